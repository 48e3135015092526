-- 0003: SQLite dialect of migrations/postgres/0003_features.sql (a backend's prompts, resources and resource
-- templates). Timestamps are UTC text of fixed width, as in 0001.

CREATE TABLE server_features (
    server_id   TEXT    NOT NULL REFERENCES external_servers (id) ON DELETE CASCADE,
    kind        TEXT    NOT NULL CHECK (kind IN ('prompt', 'resource', 'resource_template')),
    key         TEXT    NOT NULL,
    position    INTEGER NOT NULL,
    definition  TEXT    NOT NULL,
    updated_at  TEXT    NOT NULL,
    PRIMARY KEY (server_id, kind, key)
) STRICT;
