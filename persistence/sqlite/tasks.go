package sqlite

import "github.com/mcpgw/aggregator/persistence/internal/sqlstore"

// The durable tasks (persistence/internal/sqlstore/tasks.go) in SQLite's SQL. Writes are serial (the single write
// connection holds the write lock from BEGIN), so counting an owner's open tasks needs no lock of its own.

const taskColumns = `id, owner, status, status_message, tool_name, server_name, node, ttl_ms, poll_interval_ms,
	created_at, updated_at, expires_at, result, error, backend_task_id, backend_server, input_request`

func taskQueries() sqlstore.TaskQueries {
	return sqlstore.TaskQueries{
		TaskColumns: taskColumns,
		CountOpen:   `SELECT count(*) FROM tasks WHERE owner = ? AND status IN ('working', 'input_required')`,
		InsertTask: `INSERT INTO tasks (` + taskColumns + `)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		GetTask:  `SELECT ` + taskColumns + ` FROM tasks WHERE id = ?`,
		LockTask: `SELECT ` + taskColumns + ` FROM tasks WHERE id = ?`,
		ListTasks: `SELECT ` + taskColumns + ` FROM tasks WHERE (?1 IS NULL OR owner = ?1)
			ORDER BY created_at DESC, id DESC LIMIT ?2 OFFSET ?3`,
		UpdateTask: `UPDATE tasks SET status = ?2, status_message = ?3, result = ?4, error = ?5, updated_at = ?6,
			input_request = ?7 WHERE id = ?1`,
		FailOrphans: `UPDATE tasks SET status = 'failed', status_message = ?2, updated_at = ?3
			WHERE status IN ('working', 'input_required') AND node NOT IN (SELECT value FROM json_each(?1))
				AND (?4 = 0 OR backend_task_id = '')`,
		DeleteExpired: `DELETE FROM tasks WHERE rowid IN (SELECT rowid FROM tasks WHERE expires_at <= ? LIMIT ?)`,
		SetBackend: `UPDATE tasks SET backend_task_id = ?2, backend_server = ?3, updated_at = ?4
			WHERE id = ?1 AND status IN ('working', 'input_required')`,
		ClaimOrphans: `UPDATE tasks SET node = ?2, updated_at = ?3
			WHERE status IN ('working', 'input_required') AND backend_task_id <> ''
				AND node NOT IN (SELECT value FROM json_each(?1))
			RETURNING ` + taskColumns,
	}
}
