-- 0004: tool curation (issue 16): per-server tool filters and pinning settings, per-tool overrides, definition
-- pins and profiles. Version 0003 belongs to another change; the runner applies whatever versions are missing, in
-- order, so the gap is harmless. Servers registered before this migration keep today's behaviour: pinning off.

ALTER TABLE mcp.external_servers
    -- {"mode":"allow"|"deny","patterns":[...]}; NULL: no filter.
    ADD COLUMN tool_filter      JSONB,
    ADD COLUMN tool_pinning     BOOLEAN      NOT NULL DEFAULT FALSE,
    ADD COLUMN pin_new_tools    VARCHAR(16)  NOT NULL DEFAULT 'withhold',
    ADD COLUMN pins_baseline_at TIMESTAMPTZ,
    -- Grows by one with every write to the server's pins; SaveToolPins compares it (optimistic concurrency).
    ADD COLUMN pins_version     BIGINT       NOT NULL DEFAULT 0,
    ADD CONSTRAINT external_servers_pin_new_tools_check CHECK (pin_new_tools IN ('withhold', 'serve')),
    ADD CONSTRAINT external_servers_tool_filter_check
        CHECK (tool_filter IS NULL OR jsonb_typeof(tool_filter) = 'object');

-- What an admin changed about one tool, by the backend's original name (it survives rediscovery and renames).
CREATE TABLE mcp.tool_overrides (
    server_id     UUID           NOT NULL REFERENCES mcp.external_servers (id) ON DELETE CASCADE,
    original_name VARCHAR(1024)  NOT NULL,
    exposed_name  VARCHAR(1024),
    description   TEXT,
    annotations   JSONB,
    updated_at    TIMESTAMPTZ    NOT NULL DEFAULT now(),
    PRIMARY KEY (server_id, original_name)
);

-- An exposed name is unique over every override; the index decides concurrent writers.
CREATE UNIQUE INDEX tool_overrides_exposed_name_key ON mcp.tool_overrides (exposed_name)
    WHERE exposed_name IS NOT NULL;

-- Definition pinning: the approved definition of each tool, the change waiting for an admin, the last rejected one.
CREATE TABLE mcp.tool_pins (
    server_id     UUID           NOT NULL REFERENCES mcp.external_servers (id) ON DELETE CASCADE,
    original_name VARCHAR(1024)  NOT NULL,
    approved_hash TEXT           NOT NULL DEFAULT '',
    approved_def  JSONB,
    approved_at   TIMESTAMPTZ,
    pending_hash  TEXT           NOT NULL DEFAULT '',
    pending_def   JSONB,
    pending_since TIMESTAMPTZ,
    rejected_hash TEXT           NOT NULL DEFAULT '',
    PRIMARY KEY (server_id, original_name)
);

-- Named tool subsets; selectors name servers by name, so a profile may refer to a server that does not exist yet.
CREATE TABLE mcp.profiles (
    name        VARCHAR(255)  PRIMARY KEY,
    description TEXT,
    selectors   JSONB         NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(selectors) = 'array'),
    clients     JSONB         NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(clients) = 'array'),
    created_at  TIMESTAMPTZ   NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ   NOT NULL DEFAULT now()
);
