-- 0008: SQLite dialect of migrations/postgres/0008_user_credentials.sql (per-user credentials). JSON is text
-- checked with json_valid; the secret is the sealed envelope the daemon writes.

ALTER TABLE external_servers ADD COLUMN credential_mode TEXT NOT NULL DEFAULT 'shared'
    CHECK (credential_mode IN ('shared', 'per_user'));
ALTER TABLE external_servers ADD COLUMN user_credential TEXT
    CHECK ((credential_mode = 'shared' AND user_credential IS NULL)
        OR (credential_mode = 'per_user' AND json_valid(user_credential) AND json_type(user_credential) = 'object'));

CREATE TABLE user_credentials (
    server_id  TEXT NOT NULL REFERENCES external_servers (id) ON DELETE CASCADE,
    subject    TEXT NOT NULL CHECK (length(subject) BETWEEN 1 AND 512),
    secret     TEXT NOT NULL CHECK (json_valid(secret)),
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z'),
    updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z'),
    PRIMARY KEY (server_id, subject)
) STRICT;
