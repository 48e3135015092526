-- 0009: SQLite dialect of migrations/postgres/0009_tasks.sql (durable tasks). Timestamps are UTC text of fixed
-- width, as in 0001, so text order is time order.

CREATE TABLE tasks (
    id               TEXT    NOT NULL PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 64),
    owner            TEXT    NOT NULL CHECK (length(owner) BETWEEN 1 AND 512),
    status           TEXT    NOT NULL
        CHECK (status IN ('working', 'input_required', 'completed', 'failed', 'cancelled')),
    status_message   TEXT    NOT NULL DEFAULT '',
    tool_name        TEXT    NOT NULL CHECK (length(tool_name) BETWEEN 1 AND 512),
    server_name      TEXT    NOT NULL DEFAULT '' CHECK (length(server_name) <= 512),
    node             TEXT    NOT NULL DEFAULT '' CHECK (length(node) <= 512),
    ttl_ms           INTEGER NOT NULL CHECK (ttl_ms > 0),
    poll_interval_ms INTEGER NOT NULL DEFAULT 0,
    created_at       TEXT    NOT NULL,
    updated_at       TEXT    NOT NULL,
    expires_at       TEXT    NOT NULL,
    result           TEXT,
    error            TEXT
) STRICT;

CREATE INDEX idx_tasks_owner_created ON tasks (owner, created_at DESC, id DESC);
CREATE INDEX idx_tasks_created ON tasks (created_at DESC, id DESC);
CREATE INDEX idx_tasks_expires ON tasks (expires_at);
CREATE INDEX idx_tasks_open ON tasks (owner) WHERE status IN ('working', 'input_required');
