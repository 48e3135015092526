-- 0002: single ownership of servers among several daemon processes on one database (issue 13). A server's lease
-- names the process that may open its session; the epoch grows each time it changes hands and fences that owner's
-- writes. Expiry is compared with the database's clock, never a node's. A released lease stays as an expired row,
-- so the next owner's epoch is still higher.

CREATE TABLE mcp.server_leases (
    server_id  UUID         PRIMARY KEY REFERENCES mcp.external_servers (id) ON DELETE CASCADE,
    owner      TEXT         NOT NULL,
    epoch      BIGINT       NOT NULL,
    expires_at TIMESTAMPTZ  NOT NULL
);

CREATE INDEX idx_server_leases_owner ON mcp.server_leases (owner);

-- Running daemon processes: where each one's MCP endpoint answers and when it last said it was alive.
CREATE TABLE mcp.nodes (
    node_id      TEXT         PRIMARY KEY,
    address      TEXT         NOT NULL,
    heartbeat_at TIMESTAMPTZ  NOT NULL
);
