package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/internal/storeutil"
)

// TaskQueries is a dialect's SQL of the durable tasks. Every query selecting a task selects TaskColumns.
type TaskQueries struct {
	// TaskColumns: id, owner, status, status message, tool, server, node, ttl (ms), poll interval (ms),
	// created_at, updated_at, expires_at, result, error, backend task id, backend server, input request.
	TaskColumns string
	// LockOwner (owner) serialises the creations of one owner's tasks until the transaction ends; empty when the
	// dialect's write transactions are serial already.
	LockOwner string
	// CountOpen (owner) counts the owner's open tasks.
	CountOpen string
	// InsertTask (TaskColumns' values, in order).
	InsertTask string
	// GetTask (id); LockTask (id) is GetTask locking the row where the dialect locks rows.
	GetTask, LockTask string
	// ListTasks (owner or NULL, limit, offset) newest first, by created_at then id.
	ListTasks string
	// UpdateTask (id, status, status message, result, error, updated_at, input request).
	UpdateTask string
	// FailOrphans (JSON array of live node ids, message, now, spare followed: 1 or 0) fails the open tasks of
	// other nodes (but those following a backend's task when sparing them).
	FailOrphans string
	// DeleteExpired (now, limit).
	DeleteExpired string
	// SetBackend (id, backend task id, backend server, now) on an open task.
	SetBackend string
	// ClaimOrphans (JSON array of live node ids, node, now) moves to node the open tasks of other nodes that follow
	// a backend's task, RETURNING TaskColumns.
	ClaimOrphans string
}

// Tasks implements persistence.TaskStore over a Dialect.
type Tasks struct {
	d *Dialect
	q TaskQueries
}

// NewTasks returns the task methods over d with the dialect's task SQL q.
func NewTasks(d *Dialect, q TaskQueries) Tasks { return Tasks{d: d, q: q} }

// NewTaskID returns a fresh unguessable task id: 128 random bits in hex.
func NewTaskID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("task id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

func checkTask(t *persistence.Task) error {
	switch {
	case t.Owner == "" || len(t.Owner) > persistence.MaxTaskOwnerBytes:
		return fmt.Errorf("task owner must be 1-%d bytes, not %d", persistence.MaxTaskOwnerBytes, len(t.Owner))
	case t.Tool == "" || len(t.Tool) > persistence.MaxTaskNameBytes:
		return fmt.Errorf("task tool must be 1-%d bytes, not %d", persistence.MaxTaskNameBytes, len(t.Tool))
	case len(t.Server) > persistence.MaxTaskNameBytes || len(t.Node) > persistence.MaxTaskNameBytes ||
		len(t.BackendTaskID) > persistence.MaxTaskNameBytes || len(t.BackendServer) > persistence.MaxTaskNameBytes:
		return fmt.Errorf("task server and node must be at most %d bytes", persistence.MaxTaskNameBytes)
	case len(t.ID) > 64:
		return fmt.Errorf("task id must be at most 64 bytes, not %d", len(t.ID))
	case t.TTL <= 0:
		return fmt.Errorf("task ttl must be positive, not %v", t.TTL)
	case t.PollInterval < 0:
		return fmt.Errorf("task poll interval must not be negative, not %v", t.PollInterval)
	case !persistence.ValidTaskStatus(t.Status):
		return fmt.Errorf("unknown task status %q", t.Status)
	}
	if err := checkTaskMessage(t.StatusMessage); err != nil {
		return err
	}
	return checkPayloads(t.Result, t.Error, t.InputRequest)
}

func checkTaskMessage(m string) error {
	if len(m) > persistence.MaxTaskStatusMessageBytes {
		return fmt.Errorf("task status message must be at most %d bytes, not %d", persistence.MaxTaskStatusMessageBytes, len(m))
	}
	return nil
}

func checkPayloads(docs ...json.RawMessage) error {
	for _, doc := range docs {
		if doc == nil {
			continue
		}
		if len(doc) > persistence.MaxTaskPayloadBytes {
			return fmt.Errorf("%w: %d bytes, at most %d", persistence.ErrTaskTooLarge, len(doc), persistence.MaxTaskPayloadBytes)
		}
		if !json.Valid(doc) {
			return errors.New("task result or error is not valid JSON")
		}
	}
	return nil
}

// CreateTask implements persistence.TaskStore: the count of the owner's open tasks and the insert are one
// transaction, serialised per owner.
func (k Tasks) CreateTask(ctx context.Context, t *persistence.Task, maxOpen int) (err error) {
	d := k.d
	defer d.wrap(&err, "create task for %q", t.Owner)
	if t.Status == "" {
		t.Status = persistence.TaskWorking
	}
	if err := checkTask(t); err != nil {
		return err
	}
	row := *t
	if row.ID == "" {
		if row.ID, err = NewTaskID(); err != nil {
			return err
		}
	}
	now := storeutil.Now()
	row.CreatedAt, row.UpdatedAt, row.ExpiresAt = now, now, now.Add(row.TTL)
	err = d.WriteTx(ctx, func(tx Tx) error {
		if maxOpen > 0 {
			if k.q.LockOwner != "" {
				if _, err := tx.Exec(ctx, k.q.LockOwner, row.Owner); err != nil {
					return fmt.Errorf("lock owner: %w", err)
				}
			}
			var open int
			if err := tx.QueryRow(ctx, k.q.CountOpen, row.Owner).Scan(&open); err != nil {
				return fmt.Errorf("count open tasks: %w", err)
			}
			if open >= maxOpen {
				return fmt.Errorf("%w: %d open tasks, at most %d", persistence.ErrTaskLimit, open, maxOpen)
			}
		}
		_, err := tx.Exec(ctx, k.q.InsertTask, row.ID, row.Owner, row.Status, row.StatusMessage, row.Tool, row.Server,
			row.Node, row.TTL.Milliseconds(), row.PollInterval.Milliseconds(), d.Time(row.CreatedAt), d.Time(row.UpdatedAt),
			d.Time(row.ExpiresAt), d.JSON(row.Result), d.JSON(row.Error), row.BackendTaskID, row.BackendServer,
			d.JSON(row.InputRequest))
		return err
	})
	if err != nil {
		return err
	}
	*t = row
	return nil
}

func scanTask(row Row) (persistence.Task, error) {
	var t persistence.Task
	var ttl, poll int64
	var result, errDoc, input []byte
	err := row.Scan(&t.ID, &t.Owner, &t.Status, &t.StatusMessage, &t.Tool, &t.Server, &t.Node, &ttl, &poll,
		Time(&t.CreatedAt), Time(&t.UpdatedAt), Time(&t.ExpiresAt), &result, &errDoc, &t.BackendTaskID, &t.BackendServer, &input)
	if input != nil {
		t.InputRequest = json.RawMessage(input)
	}
	t.TTL, t.PollInterval = time.Duration(ttl)*time.Millisecond, time.Duration(poll)*time.Millisecond
	if result != nil {
		t.Result = json.RawMessage(result)
	}
	if errDoc != nil {
		t.Error = json.RawMessage(errDoc)
	}
	return t, err
}

// GetTask implements persistence.TaskStore.
func (k Tasks) GetTask(ctx context.Context, id string) (out persistence.Task, err error) {
	d := k.d
	defer d.wrap(&err, "get task")
	if id == "" || len(id) > 64 {
		return out, storeutil.NotFound("task", id)
	}
	err = d.ReadTx(ctx, func(tx Tx) error {
		t, err := scanTask(tx.QueryRow(ctx, k.q.GetTask, id))
		if errors.Is(err, sql.ErrNoRows) {
			return storeutil.NotFound("task", id)
		}
		out = t
		return err
	})
	return out, err
}

// ListTasks implements persistence.TaskStore: one row more than the page tells whether more follow.
func (k Tasks) ListTasks(ctx context.Context, f persistence.ListTasksFilter) (out []persistence.Task, more bool, err error) {
	d := k.d
	defer d.wrap(&err, "list tasks")
	limit := d.limitArg(f.Limit)
	if f.Limit > 0 {
		limit = f.Limit + 1
	}
	err = d.ReadTx(ctx, func(tx Tx) error {
		rows, err := tx.Query(ctx, k.q.ListTasks, nullIfEmpty(f.Owner), limit, max(f.Offset, 0))
		if err != nil {
			return err
		}
		out, err = collect(rows, scanTask)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	if f.Limit > 0 && len(out) > f.Limit {
		out, more = out[:f.Limit], true
	}
	return out, more, nil
}

// UpdateTask implements persistence.TaskStore: the row is read (locked) and written in one transaction, so of two
// racing final updates exactly one applies.
func (k Tasks) UpdateTask(ctx context.Context, id string, u persistence.TaskUpdate) (out persistence.Task, err error) {
	d := k.d
	defer d.wrap(&err, "update task")
	if u.Status != "" && !persistence.ValidTaskStatus(u.Status) {
		return out, fmt.Errorf("unknown task status %q", u.Status)
	}
	if u.StatusMessage != nil {
		if err := checkTaskMessage(*u.StatusMessage); err != nil {
			return out, err
		}
	}
	if err := checkPayloads(u.Result, u.Error, u.InputRequest); err != nil {
		return out, err
	}
	if id == "" || len(id) > 64 {
		return out, storeutil.NotFound("task", id)
	}
	var finished bool
	err = d.WriteTx(ctx, func(tx Tx) error {
		t, err := scanTask(tx.QueryRow(ctx, k.q.LockTask, id))
		if errors.Is(err, sql.ErrNoRows) {
			return storeutil.NotFound("task", id)
		}
		if err != nil {
			return err
		}
		if !persistence.TaskOpen(t.Status) {
			out, finished = t, true
			return nil
		}
		if u.Status != "" {
			t.Status = u.Status
		}
		if u.StatusMessage != nil {
			t.StatusMessage = *u.StatusMessage
		}
		if u.Result != nil {
			t.Result = u.Result
		}
		if u.Error != nil {
			t.Error = u.Error
		}
		if u.InputRequest != nil {
			t.InputRequest = u.InputRequest
		}
		if t.Status != persistence.TaskInputRequired {
			t.InputRequest = nil // only an input_required task waits on a request
		}
		t.UpdatedAt = storeutil.Now()
		if _, err := tx.Exec(ctx, k.q.UpdateTask, t.ID, t.Status, t.StatusMessage, d.JSON(t.Result), d.JSON(t.Error),
			d.Time(t.UpdatedAt), d.JSON(t.InputRequest)); err != nil {
			return err
		}
		out = t
		return nil
	})
	if err == nil && finished {
		return out, fmt.Errorf("task %s is %s: %w", id, out.Status, persistence.ErrTaskFinished)
	}
	return out, err
}

// FailOrphanedTasks implements persistence.TaskStore: one statement.
func (k Tasks) FailOrphanedTasks(ctx context.Context, live []string, message string, spareFollowed bool) (n int, err error) {
	d := k.d
	defer d.wrap(&err, "fail orphaned tasks")
	if err := checkTaskMessage(message); err != nil {
		return 0, err
	}
	if live == nil {
		live = []string{}
	}
	nodes, err := json.Marshal(live)
	if err != nil {
		return 0, err
	}
	spare := 0
	if spareFollowed {
		spare = 1
	}
	c, err := d.Writer.Exec(ctx, k.q.FailOrphans, string(nodes), message, d.Time(storeutil.Now()), spare)
	return int(c), err
}

// SetTaskBackend implements persistence.TaskStore: one statement.
func (k Tasks) SetTaskBackend(ctx context.Context, id, backendTaskID, serverID string) (err error) {
	d := k.d
	defer d.wrap(&err, "set task backend")
	if len(backendTaskID) > persistence.MaxTaskNameBytes || len(serverID) > persistence.MaxTaskNameBytes {
		return fmt.Errorf("backend task id and server must be at most %d bytes", persistence.MaxTaskNameBytes)
	}
	_, err = d.Writer.Exec(ctx, k.q.SetBackend, id, backendTaskID, serverID, d.Time(storeutil.Now()))
	return err
}

// ClaimOrphanedTasks implements persistence.TaskStore: one statement, whose row locks (PostgreSQL) or write lock
// (SQLite) give each task to one claimer.
func (k Tasks) ClaimOrphanedTasks(ctx context.Context, live []string, node string) (out []persistence.Task, err error) {
	d := k.d
	defer d.wrap(&err, "claim orphaned tasks")
	if node == "" || len(node) > persistence.MaxTaskNameBytes {
		return nil, fmt.Errorf("claiming node must be 1-%d bytes", persistence.MaxTaskNameBytes)
	}
	if live == nil {
		live = []string{}
	}
	nodes, err := json.Marshal(live)
	if err != nil {
		return nil, err
	}
	err = d.WriteTx(ctx, func(tx Tx) error {
		rows, err := tx.Query(ctx, k.q.ClaimOrphans, string(nodes), node, d.Time(storeutil.Now()))
		if err != nil {
			return err
		}
		out, err = collect(rows, scanTask)
		return err
	})
	return out, err
}

// DeleteExpiredTasks implements persistence.TaskStore: one statement, a bounded batch.
func (k Tasks) DeleteExpiredTasks(ctx context.Context, now time.Time, limit int) (n int, err error) {
	d := k.d
	defer d.wrap(&err, "delete expired tasks")
	if limit <= 0 {
		return 0, nil
	}
	c, err := d.Writer.Exec(ctx, k.q.DeleteExpired, d.Time(storeutil.NormTime(now)), limit)
	return int(c), err
}
