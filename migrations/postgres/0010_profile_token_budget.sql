-- 0010: a profile's token budget (issue 31): what a tools/list answer of /mcp/profiles/{name} may cost, in tokens.
-- NULL leaves the endpoint's budget (MCP_AGGREGATOR_MCP_TOKEN_BUDGET); 0 serves the profile's whole toolset.
-- Versions 0010 and 0011 belong to other changes; the runner applies whatever versions are missing, in order.

ALTER TABLE mcp.profiles
    ADD COLUMN token_budget INTEGER,
    ADD CONSTRAINT profiles_token_budget_check CHECK (token_budget IS NULL OR token_budget >= 0);
