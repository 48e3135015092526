-- 0005: idempotency keys of registrations (issue 24): POST /servers with an Idempotency-Key header stores the key
-- in the transaction that inserts the server, so a client that lost the answer (a crash, a cut connection) and
-- retries gets the server it created instead of a 409. A key belongs to one caller (scope); fingerprint is a hash
-- of the request it was first used for (never the body: it may hold secrets). A key goes with its server (ON
-- DELETE CASCADE); keys older than the retention window are ignored and swept lazily by later keyed registrations.

CREATE TABLE mcp.idempotency_keys (
    scope       VARCHAR(255) NOT NULL,
    key         VARCHAR(255) NOT NULL,
    fingerprint VARCHAR(128) NOT NULL,
    server_id   UUID         NOT NULL REFERENCES mcp.external_servers (id) ON DELETE CASCADE,
    created_at  TIMESTAMPTZ  NOT NULL,
    PRIMARY KEY (scope, key)
);

CREATE INDEX idx_idempotency_keys_created ON mcp.idempotency_keys (created_at);
CREATE INDEX idx_idempotency_keys_server ON mcp.idempotency_keys (server_id);
