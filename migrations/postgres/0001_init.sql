-- 0001: the aggregator's initial schema (design.md "Database Schema", logic-contract.md BR-001, BR-003, BR-008,
-- EC-004). The runner executes this file in one transaction and records it in mcp.schema_migrations.

CREATE SCHEMA IF NOT EXISTS mcp;

-- Registered external MCP servers. The UNIQUE constraint on name is what decides concurrent duplicate
-- registrations (EC-004): the store never checks-then-inserts.
CREATE TABLE mcp.external_servers (
    id                   UUID             PRIMARY KEY DEFAULT gen_random_uuid(),
    name                 VARCHAR(255)     NOT NULL,
    description          TEXT,
    transport_type       VARCHAR(32)      NOT NULL,
    connection_config    JSONB            NOT NULL,
    health_check_url     TEXT,
    auto_connect         BOOLEAN          NOT NULL DEFAULT FALSE,
    status               VARCHAR(32)      NOT NULL DEFAULT 'DISCONNECTED',
    error_message        TEXT,
    tool_count           INTEGER          NOT NULL DEFAULT 0,
    last_health_check    TIMESTAMPTZ,
    health_response_ms   DOUBLE PRECISION,
    consecutive_failures INTEGER          NOT NULL DEFAULT 0,
    registered_at        TIMESTAMPTZ      NOT NULL DEFAULT now(),
    connected_at         TIMESTAMPTZ,
    updated_at           TIMESTAMPTZ      NOT NULL DEFAULT now(),
    CONSTRAINT external_servers_name_key UNIQUE (name),
    CONSTRAINT external_servers_transport_type_check CHECK (transport_type IN ('STDIO', 'SSE', 'HTTP'))
);

CREATE INDEX idx_external_servers_status ON mcp.external_servers (status);
-- ListServers pages in registration order.
CREATE INDEX idx_external_servers_registered ON mcp.external_servers (registered_at, id);

-- One row per state entered, for debugging; goes with its server.
CREATE TABLE mcp.server_connection_history (
    id          BIGSERIAL    PRIMARY KEY,
    server_id   UUID         NOT NULL REFERENCES mcp.external_servers (id) ON DELETE CASCADE,
    event_type  VARCHAR(32)  NOT NULL,
    details     JSONB,
    timestamp   TIMESTAMPTZ  NOT NULL DEFAULT now()
);

CREATE INDEX idx_server_connection_history_server ON mcp.server_connection_history (server_id, id);

-- Tools discovered on the servers, namespaced {server}.{original}; they go with their server (BR-008).
CREATE TABLE mcp.tools (
    id                   BIGSERIAL      PRIMARY KEY,
    name                 VARCHAR(1024)  NOT NULL,
    original_name        VARCHAR(1024)  NOT NULL,
    description          TEXT           NOT NULL DEFAULT '',
    input_schema         JSONB          NOT NULL DEFAULT '{}',
    definition           JSONB          NOT NULL DEFAULT '{}',
    source_server_id     UUID           NOT NULL REFERENCES mcp.external_servers (id) ON DELETE CASCADE,
    is_external          BOOLEAN        NOT NULL DEFAULT TRUE,
    is_classified        BOOLEAN        NOT NULL DEFAULT FALSE,
    classification_state VARCHAR(32)    NOT NULL DEFAULT 'DISCOVERED',
    skill_ids            TEXT[]         NOT NULL DEFAULT '{}',
    primary_skill_id     TEXT,
    definition_hash      TEXT           NOT NULL DEFAULT '',
    discovered_at        TIMESTAMPTZ    NOT NULL DEFAULT now(),
    updated_at           TIMESTAMPTZ    NOT NULL DEFAULT now(),
    changed_at           TIMESTAMPTZ,
    CONSTRAINT tools_name_key UNIQUE (name),
    CONSTRAINT tools_source_server_original_name_key UNIQUE (source_server_id, original_name),
    CONSTRAINT tools_classification_state_check
        CHECK (classification_state IN ('DISCOVERED', 'CLASSIFYING', 'CLASSIFIED', 'UNCLASSIFIED'))
);

-- Lookups and cascades by source_server_id use the index of tools_source_server_original_name_key (its leading
-- column), so a separate index on source_server_id alone would only slow down large tool discoveries.

-- Admin operations; no foreign key, the audit outlives the server.
CREATE TABLE mcp.audit_log (
    id          BIGSERIAL    PRIMARY KEY,
    event       VARCHAR(64)  NOT NULL,
    server_id   UUID,
    server_name TEXT,
    actor       TEXT         NOT NULL DEFAULT '',
    ip_address  TEXT         NOT NULL DEFAULT '',
    details     JSONB,
    timestamp   TIMESTAMPTZ  NOT NULL DEFAULT now()
);

CREATE INDEX idx_audit_log_timestamp ON mcp.audit_log (timestamp, id);
