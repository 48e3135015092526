-- 0011: SQLite dialect of migrations/postgres/0011_task_backend.sql (the backend's task behind a durable task).

ALTER TABLE tasks ADD COLUMN backend_task_id TEXT NOT NULL DEFAULT '' CHECK (length(backend_task_id) <= 512);
ALTER TABLE tasks ADD COLUMN backend_server TEXT NOT NULL DEFAULT '' CHECK (length(backend_server) <= 512);
ALTER TABLE tasks ADD COLUMN input_request TEXT;
