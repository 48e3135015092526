-- 0010: SQLite dialect of migrations/postgres/0010_profile_token_budget.sql (a profile's token budget, issue 31).

ALTER TABLE profiles ADD COLUMN token_budget INTEGER CHECK (token_budget IS NULL OR token_budget >= 0);
