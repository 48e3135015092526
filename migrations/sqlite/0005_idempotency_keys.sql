-- 0005: SQLite dialect of migrations/postgres/0005_idempotency_keys.sql (the idempotency keys of registrations).
-- Timestamps are UTC text of fixed width, as in 0001.

CREATE TABLE idempotency_keys (
    scope       TEXT NOT NULL CHECK (length(scope) BETWEEN 1 AND 255),
    key         TEXT NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    fingerprint TEXT NOT NULL CHECK (length(fingerprint) BETWEEN 1 AND 128),
    server_id   TEXT NOT NULL REFERENCES external_servers (id) ON DELETE CASCADE,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (scope, key)
) STRICT;

CREATE INDEX idx_idempotency_keys_created ON idempotency_keys (created_at);
CREATE INDEX idx_idempotency_keys_server ON idempotency_keys (server_id);
