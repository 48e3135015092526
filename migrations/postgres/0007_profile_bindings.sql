-- 0007: profiles bound to OAuth subjects and to a claim's values, beside static token names (issue 27).
-- [{"subject":"..."} | {"claim":"groups","value":"eng"}]. Version 0006 belongs to another change; the runner applies
-- whatever versions are missing, in order, so a gap is harmless. Existing profiles bind no subject or claim.

ALTER TABLE mcp.profiles
    ADD COLUMN bindings JSONB NOT NULL DEFAULT '[]',
    ADD CONSTRAINT profiles_bindings_check CHECK (jsonb_typeof(bindings) = 'array');
