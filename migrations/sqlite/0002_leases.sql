-- 0002: SQLite dialect of migrations/postgres/0002_leases.sql (server leases with epochs, running nodes).
-- Timestamps are UTC text of fixed width, as in 0001, so text order is time order.

CREATE TABLE server_leases (
    server_id  TEXT    NOT NULL PRIMARY KEY REFERENCES external_servers (id) ON DELETE CASCADE,
    owner      TEXT    NOT NULL,
    epoch      INTEGER NOT NULL,
    expires_at TEXT    NOT NULL
) STRICT;

CREATE INDEX idx_server_leases_owner ON server_leases (owner);

CREATE TABLE nodes (
    node_id      TEXT NOT NULL PRIMARY KEY,
    address      TEXT NOT NULL,
    heartbeat_at TEXT NOT NULL
) STRICT;
