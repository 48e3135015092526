-- 0006: SQLite dialect of migrations/postgres/0006_access_policy.sql (the access policy, one row).
-- Timestamps are UTC text of fixed width, as in 0001.

CREATE TABLE access_policy (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    document   TEXT    NOT NULL CHECK (json_valid(document)),
    version    INTEGER NOT NULL CHECK (version > 0),
    updated_at TEXT    NOT NULL
) STRICT;
