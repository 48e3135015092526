-- 0009: durable tasks (issue 30): a task-augmented tools/call (MCP 2025-11-25 tasks, REST "task") is answered at
-- once with a task, run in the background, and its outcome kept here for its TTL, so that its owner can read it
-- from another session, another node or after the daemon restarted. id is 128 random bits (hex); owner is the
-- subject that created it (the only one who may read it, admins aside). node is the daemon running an open task:
-- a task whose node is gone is marked failed. result and error are JSON kept as written (json, not jsonb).

CREATE TABLE mcp.tasks (
    id               VARCHAR(64)   PRIMARY KEY,
    owner            VARCHAR(512)  NOT NULL,
    status           VARCHAR(16)   NOT NULL
        CHECK (status IN ('working', 'input_required', 'completed', 'failed', 'cancelled')),
    status_message   TEXT          NOT NULL DEFAULT '',
    tool_name        VARCHAR(512)  NOT NULL,
    server_name      VARCHAR(512)  NOT NULL DEFAULT '',
    node             VARCHAR(512)  NOT NULL DEFAULT '',
    ttl_ms           BIGINT        NOT NULL CHECK (ttl_ms > 0),
    poll_interval_ms BIGINT        NOT NULL DEFAULT 0,
    created_at       TIMESTAMPTZ   NOT NULL,
    updated_at       TIMESTAMPTZ   NOT NULL,
    expires_at       TIMESTAMPTZ   NOT NULL,
    result           JSON,
    error            JSON
);

CREATE INDEX idx_tasks_owner_created ON mcp.tasks (owner, created_at DESC, id DESC);
CREATE INDEX idx_tasks_created ON mcp.tasks (created_at DESC, id DESC);
CREATE INDEX idx_tasks_expires ON mcp.tasks (expires_at);
CREATE INDEX idx_tasks_open ON mcp.tasks (owner) WHERE status IN ('working', 'input_required');
