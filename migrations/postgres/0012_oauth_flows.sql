-- 0012: the callers' OAuth authorization code flows to protected backends, and the clients registered at the
-- backends' authorization servers (issue 28). A flow lives between its start (POST .../credentials/me/oauth) and
-- its completion (POST /oauth/complete) in the store, so that the authorization server's redirect and the
-- completion may land on any node: it is taken once (deleted when completed) and dies at expires_at. data (the
-- PKCE verifier, the client and the endpoints) and code are sealed by the daemon (AES-256-GCM under
-- MCP_CREDENTIAL_KEY, persistence/crypt) before they reach the database. oauth_clients keeps the client the
-- aggregator registered dynamically (RFC 7591) per (server, authorization server), reused by every caller's flow;
-- data (client id, secret, token endpoint auth method) is sealed too.

CREATE TABLE mcp.oauth_flows (
    state      VARCHAR(128) NOT NULL PRIMARY KEY CHECK (length(state) >= 1),
    server_id  UUID         NOT NULL REFERENCES mcp.external_servers (id) ON DELETE CASCADE,
    subject    VARCHAR(512) NOT NULL CHECK (length(subject) >= 1),
    data       JSONB        NOT NULL,
    returned   BOOLEAN      NOT NULL DEFAULT false,
    code       JSONB,
    iss        TEXT         NOT NULL DEFAULT '' CHECK (length(iss) <= 2048),
    error      TEXT         NOT NULL DEFAULT '' CHECK (length(error) <= 1024),
    created_at TIMESTAMPTZ  NOT NULL,
    expires_at TIMESTAMPTZ  NOT NULL
);

CREATE INDEX idx_oauth_flows_expires ON mcp.oauth_flows (expires_at);
CREATE INDEX idx_oauth_flows_subject ON mcp.oauth_flows (subject);

CREATE TABLE mcp.oauth_clients (
    server_id    UUID          NOT NULL REFERENCES mcp.external_servers (id) ON DELETE CASCADE,
    issuer       VARCHAR(2048) NOT NULL CHECK (length(issuer) >= 1),
    redirect_url VARCHAR(2048) NOT NULL,
    data         JSONB         NOT NULL,
    created_at   TIMESTAMPTZ   NOT NULL,
    PRIMARY KEY (server_id, issuer)
);
