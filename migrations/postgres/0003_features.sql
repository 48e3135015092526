-- 0003: what a backend offers besides tools (issue 14): its prompts, resources and resource templates, as its
-- prompts/list, resources/list and resources/templates/list returned them. The aggregated MCP endpoint lists them
-- from the routing table, which is loaded from here; discovery replaces a server's rows all at once.
-- key is the prompt's name, the resource's URI or the template's URI template; position keeps the backend's order.

CREATE TABLE mcp.server_features (
    server_id   UUID         NOT NULL REFERENCES mcp.external_servers (id) ON DELETE CASCADE,
    kind        TEXT         NOT NULL CHECK (kind IN ('prompt', 'resource', 'resource_template')),
    key         TEXT         NOT NULL,
    position    INTEGER      NOT NULL,
    definition  JSONB        NOT NULL,
    updated_at  TIMESTAMPTZ  NOT NULL,
    PRIMARY KEY (server_id, kind, key)
);
