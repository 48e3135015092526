-- 0007: SQLite dialect of migrations/postgres/0007_profile_bindings.sql (profiles bound to OAuth subjects and to a
-- claim's values). JSON is text checked with json_valid, as in 0004.

ALTER TABLE profiles ADD COLUMN bindings TEXT NOT NULL DEFAULT '[]'
    CHECK (json_valid(bindings) AND json_type(bindings) = 'array');
