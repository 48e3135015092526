-- 0006: the access policy (issue 27): one document of ordered CEL rules deciding which caller may list and call
-- which tool (gateway/policy). One row (id 1), written whole by PUT /api/v1/aggregator/policy; version grows by one
-- on every write. No row: no rule, every call allowed (as before this migration).

CREATE TABLE mcp.access_policy (
    id         SMALLINT     PRIMARY KEY CHECK (id = 1),
    document   JSONB        NOT NULL,
    version    BIGINT       NOT NULL CHECK (version > 0),
    updated_at TIMESTAMPTZ  NOT NULL
);
