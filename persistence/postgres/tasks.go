package postgres

import (
	"strconv"

	"github.com/mcpgw/aggregator/persistence/internal/sqlstore"
)

// The durable tasks (persistence/internal/sqlstore/tasks.go) in PostgreSQL's SQL. Creations of one owner's tasks
// take a transaction-level advisory lock on the owner, so that the count of open tasks and the insert are decided
// together across every process; an update locks the task's row.

// taskLockClass is the first key of the advisory locks CreateTask takes per owner ("task").
const taskLockClass int32 = 0x7461736b

const taskColumns = `id, owner, status, status_message, tool_name, server_name, node, ttl_ms, poll_interval_ms,
	created_at, updated_at, expires_at, result::text, error::text, backend_task_id, backend_server, input_request::text`

const taskInsertColumns = `id, owner, status, status_message, tool_name, server_name, node, ttl_ms,
	poll_interval_ms, created_at, updated_at, expires_at, result, error, backend_task_id, backend_server, input_request`

func taskQueries() sqlstore.TaskQueries {
	return sqlstore.TaskQueries{
		TaskColumns: taskColumns,
		LockOwner:   `SELECT pg_advisory_xact_lock(` + strconv.Itoa(int(taskLockClass)) + `, hashtext($1))`,
		CountOpen:   `SELECT count(*) FROM mcp.tasks WHERE owner = $1 AND status IN ('working', 'input_required')`,
		InsertTask: `INSERT INTO mcp.tasks (` + taskInsertColumns + `)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)`,
		GetTask:  `SELECT ` + taskColumns + ` FROM mcp.tasks WHERE id = $1`,
		LockTask: `SELECT ` + taskColumns + ` FROM mcp.tasks WHERE id = $1 FOR UPDATE`,
		ListTasks: `SELECT ` + taskColumns + ` FROM mcp.tasks WHERE ($1::text IS NULL OR owner = $1)
			ORDER BY created_at DESC, id DESC LIMIT $2 OFFSET $3`,
		UpdateTask: `UPDATE mcp.tasks SET status = $2, status_message = $3, result = $4, error = $5, updated_at = $6,
			input_request = $7 WHERE id = $1`,
		FailOrphans: `UPDATE mcp.tasks SET status = 'failed', status_message = $2, updated_at = $3
			WHERE status IN ('working', 'input_required')
				AND node NOT IN (SELECT json_array_elements_text($1::json))
				AND ($4::int = 0 OR backend_task_id = '')`,
		DeleteExpired: `DELETE FROM mcp.tasks WHERE id IN (SELECT id FROM mcp.tasks WHERE expires_at <= $1 LIMIT $2)`,
		SetBackend: `UPDATE mcp.tasks SET backend_task_id = $2, backend_server = $3, updated_at = $4
			WHERE id = $1 AND status IN ('working', 'input_required')`,
		ClaimOrphans: `UPDATE mcp.tasks SET node = $2, updated_at = $3
			WHERE status IN ('working', 'input_required') AND backend_task_id <> ''
				AND node NOT IN (SELECT json_array_elements_text($1::json))
			RETURNING ` + taskColumns,
	}
}
