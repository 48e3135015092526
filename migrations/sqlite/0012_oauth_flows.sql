-- 0012: SQLite dialect of migrations/postgres/0012_oauth_flows.sql (the callers' OAuth flows and the registered
-- clients). Timestamps are UTC text of fixed width, as in 0001, so text order is time order; data and code are
-- the sealed envelopes the daemon writes.

CREATE TABLE oauth_flows (
    state      TEXT    NOT NULL PRIMARY KEY CHECK (length(state) BETWEEN 1 AND 128),
    server_id  TEXT    NOT NULL REFERENCES external_servers (id) ON DELETE CASCADE,
    subject    TEXT    NOT NULL CHECK (length(subject) BETWEEN 1 AND 512),
    data       TEXT    NOT NULL CHECK (json_valid(data)),
    returned   INTEGER NOT NULL DEFAULT 0 CHECK (returned IN (0, 1)),
    code       TEXT    CHECK (code IS NULL OR json_valid(code)),
    iss        TEXT    NOT NULL DEFAULT '' CHECK (length(iss) <= 2048),
    error      TEXT    NOT NULL DEFAULT '' CHECK (length(error) <= 1024),
    created_at TEXT    NOT NULL,
    expires_at TEXT    NOT NULL
) STRICT;

CREATE INDEX idx_oauth_flows_expires ON oauth_flows (expires_at);
CREATE INDEX idx_oauth_flows_subject ON oauth_flows (subject);

CREATE TABLE oauth_clients (
    server_id    TEXT NOT NULL REFERENCES external_servers (id) ON DELETE CASCADE,
    issuer       TEXT NOT NULL CHECK (length(issuer) BETWEEN 1 AND 2048),
    redirect_url TEXT NOT NULL CHECK (length(redirect_url) <= 2048),
    data         TEXT NOT NULL CHECK (json_valid(data)),
    created_at   TEXT NOT NULL,
    PRIMARY KEY (server_id, issuer)
) STRICT;
