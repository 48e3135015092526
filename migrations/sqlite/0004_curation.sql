-- 0004: SQLite dialect of migrations/postgres/0004_curation.sql (tool filters and pinning settings on servers,
-- tool overrides, definition pins, profiles). JSON is text checked with json_valid, timestamps fixed-width UTC
-- text, booleans 0/1, as in 0001. SQLite adds one column per ALTER TABLE.

ALTER TABLE external_servers ADD COLUMN tool_filter TEXT
    CHECK (tool_filter IS NULL OR (json_valid(tool_filter) AND json_type(tool_filter) = 'object'));
ALTER TABLE external_servers ADD COLUMN tool_pinning INTEGER NOT NULL DEFAULT 0 CHECK (tool_pinning IN (0, 1));
ALTER TABLE external_servers ADD COLUMN pin_new_tools TEXT NOT NULL DEFAULT 'withhold'
    CHECK (pin_new_tools IN ('withhold', 'serve'));
ALTER TABLE external_servers ADD COLUMN pins_baseline_at TEXT;
ALTER TABLE external_servers ADD COLUMN pins_version INTEGER NOT NULL DEFAULT 0;

CREATE TABLE tool_overrides (
    server_id     TEXT NOT NULL REFERENCES external_servers (id) ON DELETE CASCADE,
    original_name TEXT NOT NULL CHECK (length(original_name) <= 1024),
    exposed_name  TEXT CHECK (length(exposed_name) <= 1024),
    description   TEXT,
    annotations   TEXT CHECK (annotations IS NULL OR json_valid(annotations)),
    updated_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z'),
    PRIMARY KEY (server_id, original_name)
) STRICT;

CREATE UNIQUE INDEX tool_overrides_exposed_name_key ON tool_overrides (exposed_name)
    WHERE exposed_name IS NOT NULL;

CREATE TABLE tool_pins (
    server_id     TEXT NOT NULL REFERENCES external_servers (id) ON DELETE CASCADE,
    original_name TEXT NOT NULL CHECK (length(original_name) <= 1024),
    approved_hash TEXT NOT NULL DEFAULT '',
    approved_def  TEXT CHECK (approved_def IS NULL OR json_valid(approved_def)),
    approved_at   TEXT,
    pending_hash  TEXT NOT NULL DEFAULT '',
    pending_def   TEXT CHECK (pending_def IS NULL OR json_valid(pending_def)),
    pending_since TEXT,
    rejected_hash TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (server_id, original_name)
) STRICT;

CREATE TABLE profiles (
    name        TEXT NOT NULL PRIMARY KEY CHECK (length(name) <= 255),
    description TEXT,
    selectors   TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(selectors) AND json_type(selectors) = 'array'),
    clients     TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(clients) AND json_type(clients) = 'array'),
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z'),
    updated_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z')
) STRICT;
