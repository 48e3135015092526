-- 0008: per-user credentials (issue 28). A server's credential_mode is 'shared' (every caller uses its
-- connection_config, as before) or 'per_user' (each caller's calls run on a session of their own, with their own
-- secret injected where user_credential says: {"env": "API_KEY"} for stdio, {"header": "Authorization",
-- "prefix": "Bearer "} for HTTP and SSE). user_credentials holds one secret per (server, subject), sealed by the
-- daemon (AES-256-GCM under MCP_CREDENTIAL_KEY, persistence/crypt) before it reaches the database.

ALTER TABLE mcp.external_servers
    ADD COLUMN credential_mode VARCHAR(16) NOT NULL DEFAULT 'shared',
    ADD COLUMN user_credential JSONB,
    ADD CONSTRAINT external_servers_credential_mode_check CHECK (credential_mode IN ('shared', 'per_user')),
    ADD CONSTRAINT external_servers_user_credential_check CHECK (
        (credential_mode = 'shared' AND user_credential IS NULL)
        OR (credential_mode = 'per_user' AND jsonb_typeof(user_credential) = 'object'));

CREATE TABLE mcp.user_credentials (
    server_id  UUID         NOT NULL REFERENCES mcp.external_servers (id) ON DELETE CASCADE,
    subject    VARCHAR(512) NOT NULL CHECK (length(subject) >= 1),
    secret     JSONB        NOT NULL,
    created_at TIMESTAMPTZ  NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ  NOT NULL DEFAULT now(),
    PRIMARY KEY (server_id, subject)
);
