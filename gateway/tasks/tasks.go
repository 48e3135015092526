// Package tasks holds durable tasks (MCP 2025-11-25 tasks, issue 30): a tool call the caller asked to run as a
// task is answered at once with the task, run in the background through the gateway, and its outcome kept in the
// store (persistence.TaskStore) for the task's TTL, so that its owner can read it from any session, any node, or
// after the daemon restarted. The aggregator holds the task around a normal backend call; a task is visible only
// to the subject that created it (admins may list every task). Both front ends (/mcp and REST) share one Manager.
package tasks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/persistence"
)

// Defaults of Config.
const (
	DefaultMaxOpenPerOwner = 100
	DefaultTTL             = time.Hour
	DefaultMaxTTL          = 24 * time.Hour
	DefaultPollInterval    = time.Second
	DefaultSweepInterval   = time.Minute
	// MinTTL is the shortest TTL a caller may ask for; a shorter one is raised to it.
	MinTTL = time.Second
	// sweepBatch is how many expired tasks one sweep deletes at most per statement.
	sweepBatch = 500
	// storePoll is how often Wait reads the store for a task running on another node.
	storePoll = 250 * time.Millisecond
)

// Messages of tasks that end without their call's answer.
const (
	MsgCancelled = "The task was cancelled by its owner"
	MsgStopped   = "The daemon running the task stopped before the call finished; the call's outcome is unknown"
	MsgExpired   = "The task's TTL elapsed before the call finished"
)

// Errors of the Manager; the front ends map them (404, 429, 409, 503).
var (
	// ErrNotFound: no such task for this caller (another owner's task is not found either).
	ErrNotFound = persistence.ErrNotFound
	// ErrLimit: the caller has its limit of open tasks.
	ErrLimit = persistence.ErrTaskLimit
	// ErrFinished: the task is already final (cancelling it is refused).
	ErrFinished = persistence.ErrTaskFinished
)

// Config configures a Manager.
type Config struct {
	Store persistence.TaskStore
	// Node is this daemon's instance id, stored on the tasks it runs.
	Node string
	// MaxOpenPerOwner caps the open tasks of one subject (DefaultMaxOpenPerOwner when 0; negative: no cap).
	MaxOpenPerOwner int
	// DefaultTTL is the TTL of a task whose caller asked none; MaxTTL the longest one granted.
	DefaultTTL, MaxTTL time.Duration
	// PollInterval is the interval suggested to pollers.
	PollInterval time.Duration
	// SweepInterval is how often Run deletes expired tasks.
	SweepInterval time.Duration
	// LiveNodes lists the daemons known to be running (their heartbeats), for failing the open tasks of those
	// that stopped (nil: only RecoverAtStart's and Close's own).
	LiveNodes func(ctx context.Context) ([]string, error)
	// Resume, when set, follows again the backend's task of a task whose node stopped (persistence.Task's
	// BackendTaskID on BackendServer): the Manager claims such tasks instead of failing them (RecoverAtStart, Run)
	// and runs Resume for each, bounded by the task's TTL, as it runs a call. Nil: they fail like the others.
	Resume func(ctx context.Context, t persistence.Task) Outcome
	// OrphanInterval is how often Run looks for the open tasks of nodes that stopped (SweepInterval when 0).
	OrphanInterval time.Duration
	// SendInput, when set, hands a client's answer to a task's pending request to node, the one running the task
	// (Answer), and reports whether a request there took it (its Manager's TakeInput). Nil: answers reach only
	// this node's requests.
	SendInput func(ctx context.Context, node string, in Input) (taken bool, err error)
	// Announce, when set, tells the other nodes of each status change this node makes (as the hooks are told);
	// they pass it to their hooks with Announced.
	Announce func(t persistence.Task)
	Logger   *slog.Logger
}

// Outcome is how a task's call ended: Result (a CallToolResult as JSON) when it completed, else Error (a JSON-RPC
// error object or the shared error body) with Message.
type Outcome struct {
	Result  json.RawMessage
	Error   json.RawMessage
	Message string
}

// Manager creates, runs, reads and cancels tasks. Safe for concurrent use.
type Manager struct {
	cfg  Config
	log  *slog.Logger
	base context.Context // ends at Close: every running task is stopped
	stop context.CancelFunc

	mu      sync.Mutex
	running map[string]*run
	hooks   map[*StatusHook]struct{} // told of each status change this node makes or hears of (OnStatus)
	inputs  inputWaiters             // requests of this node's tasks waiting for their client's answer (input.go)

	seenMu   sync.Mutex
	seen     seenTasks      // the owners of this node's callers and the statuses told, for CatchUp (catchup.go)
	catching sync.WaitGroup // the catch-ups of owners new to this node (catchUpOwner) running
}

// StatusHook is told of a task's new status, as stored, when this node changed it (input_required and back,
// completed, failed, cancelled), or another node did and announced it (Announced: the task then carries no
// result, error or pending request); it must not block for long.
type StatusHook func(t persistence.Task)

// OnStatus registers h until the returned function is called.
func (m *Manager) OnStatus(h StatusHook) (remove func()) {
	p := &h
	m.mu.Lock()
	m.hooks[p] = struct{}{}
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		delete(m.hooks, p)
		m.mu.Unlock()
	}
}

// changed tells the hooks, and the other nodes (Config.Announce), of t's new status.
func (m *Manager) changed(t persistence.Task) {
	m.tell(t)
	if m.cfg.Announce != nil {
		m.cfg.Announce(t)
	}
}

// Announced tells the hooks of a status change another node made (Config.Announce there), unless the hooks were
// told a newer one already (a final status, or a later update: an announcement that waited in a queue while a
// catch-up read the task). A task that ended
// there (cancelled through that node, or failed by it) while it runs here has its call stopped: its outcome could
// no longer be stored, and the backend's work (a backend task, a request waiting for its client) is cancelled.
func (m *Manager) Announced(t persistence.Task) {
	if m.stale(t) {
		return
	}
	if !persistence.TaskOpen(t.Status) {
		m.mu.Lock()
		r := m.running[t.ID]
		m.mu.Unlock()
		if r != nil {
			m.log.Info("a task that ended on another node stops here", "task", t.ID, "status", t.Status)
			r.cancel()
		}
	}
	m.tell(t)
}

func (m *Manager) tell(t persistence.Task) {
	m.noteTold(t)
	m.mu.Lock()
	hooks := make([]StatusHook, 0, len(m.hooks))
	for h := range m.hooks {
		hooks = append(hooks, *h)
	}
	m.mu.Unlock()
	for _, h := range hooks {
		h(t)
	}
}

// run is a task running on this node.
type run struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when the task's final status is stored (or could not be)
	// state is runRunning, then runEnding (its call returned: the outcome is stored) or runHandover (the daemon is
	// stopping and the task follows a backend's task, left running for another node, or this one restarted, to
	// resume: the run is not cancelled, and its end stores nothing). Whichever comes first wins.
	state atomic.Int32
}

const (
	runRunning int32 = iota
	runEnding
	runHandover
)

// New returns a Manager over cfg.
func New(cfg Config) *Manager {
	if cfg.MaxOpenPerOwner == 0 {
		cfg.MaxOpenPerOwner = DefaultMaxOpenPerOwner
	}
	if cfg.DefaultTTL <= 0 {
		cfg.DefaultTTL = DefaultTTL
	}
	if cfg.MaxTTL <= 0 {
		cfg.MaxTTL = DefaultMaxTTL
	}
	cfg.DefaultTTL = min(cfg.DefaultTTL, cfg.MaxTTL)
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = DefaultSweepInterval
	}
	if cfg.OrphanInterval <= 0 {
		cfg.OrphanInterval = cfg.SweepInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	base, stop := context.WithCancel(context.Background())
	return &Manager{cfg: cfg, log: cfg.Logger, base: base, stop: stop, running: map[string]*run{}, hooks: map[*StatusHook]struct{}{},
		inputs: inputWaiters{m: map[string]inputWaiter{}}, seen: newSeenTasks()}
}

// Owner is the subject a task belongs to: the OAuth subject, the static token's name, or "anonymous" while auth
// is off (every caller is then the same anonymous admin).
func Owner(id auth.Identity) string {
	if id.Anonymous || id.Name == "" {
		return auth.AnonymousName
	}
	if id.OAuth {
		return "sub:" + id.Name
	}
	return "token:" + id.Name
}

// isAdmin reports whether id may read every owner's tasks.
func isAdmin(id auth.Identity) bool { return id.Allows(auth.ScopeAdmin) }

// TTL is the TTL granted for asked (nil: none asked): the default, clamped to [MinTTL, MaxTTL].
func (m *Manager) TTL(asked *time.Duration) time.Duration {
	if asked == nil {
		return m.cfg.DefaultTTL
	}
	return min(max(*asked, MinTTL), m.cfg.MaxTTL)
}

// Start creates a task of caller for a call of tool (resolved to server, when known) and runs call in the
// background, with ctx's values but not its cancellation, bounded by the task's TTL. It returns the task as
// created; ErrLimit when the caller has its limit of open tasks.
func (m *Manager) Start(ctx context.Context, caller auth.Identity, tool, server string, ttl *time.Duration, call func(ctx context.Context) Outcome) (persistence.Task, error) {
	// Noted once the task runs here: an owner's catch-up (new to this node) leaves out the tasks running here.
	defer m.noteOwner(Owner(caller))
	t := persistence.Task{Owner: Owner(caller), Tool: tool, Server: server, Node: m.cfg.Node, TTL: m.TTL(ttl),
		PollInterval: m.cfg.PollInterval}
	maxOpen := max(m.cfg.MaxOpenPerOwner, 0)
	if err := m.cfg.Store.CreateTask(ctx, &t, maxOpen); err != nil {
		return persistence.Task{}, fmt.Errorf("tasks: start: %w", err)
	}
	m.launch(ctx, t, call)
	return t, nil
}

// launch runs call for the task t (created, or claimed from a stopped node) in the background, with ctx's values
// but not its cancellation, bounded by the task's TTL, and stores how it ended.
func (m *Manager) launch(ctx context.Context, t persistence.Task, call func(ctx context.Context) Outcome) {
	rctx, cancel := context.WithDeadline(withInputWatcher(withTaskID(context.WithoutCancel(ctx), t.ID), m.watchInput(t.ID)), t.ExpiresAt)
	r := &run{cancel: cancel, done: make(chan struct{})}
	stopWith := context.AfterFunc(m.base, func() {
		if r.state.Load() != runHandover {
			cancel()
		}
	})
	m.mu.Lock()
	m.running[t.ID] = r
	m.mu.Unlock()
	go func() {
		defer close(r.done)
		defer stopWith()
		defer cancel()
		out := call(rctx)
		if r.state.CompareAndSwap(runRunning, runEnding) { // else left open for a resumption (Close)
			m.finish(t.ID, rctx, out)
		}
		m.mu.Lock()
		delete(m.running, t.ID)
		m.mu.Unlock()
	}()
}

// maxInputMessage bounds the part of an elicitation's message a task's status message quotes.
const maxInputMessage = 1000

// watchInput is the input watcher of task id's call: while the backend waits on its client's answer to one or
// more relayed requests, the task is input_required with the last request stored on it (so that a client reading
// the task from another session sees it), then working again. The store writes are serialised, so the last one
// says what is pending; an update of a task that ended meanwhile changes nothing.
func (m *Manager) watchInput(id string) InputWatcher {
	var mu sync.Mutex
	pending := 0
	update := func(u persistence.TaskUpdate) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		t, err := m.cfg.Store.UpdateTask(ctx, id, u)
		if err != nil && !errors.Is(err, persistence.ErrTaskFinished) {
			m.log.Warn("task input status not stored", "task", id, "error", err)
		}
		if err == nil {
			m.changed(t)
		}
	}
	return func(ctx context.Context, method string, params json.RawMessage) (context.Context, func()) {
		var raw [8]byte
		_, _ = rand.Read(raw[:])
		key := "in-" + hex.EncodeToString(raw[:]) // unique over the task's life (resumptions included)
		ctx = context.WithValue(ctx, inputReqKey{}, key)
		doc, err := json.Marshal(map[string]any{"key": key, "method": method, "params": params})
		if err != nil || len(doc) > persistence.MaxTaskPayloadBytes {
			doc = nil // the status alone says the task waits
		}
		msg := inputMessage(method, params)
		mu.Lock()
		pending++
		update(persistence.TaskUpdate{Status: persistence.TaskInputRequired, StatusMessage: &msg, InputRequest: doc})
		mu.Unlock()
		var once sync.Once
		return ctx, func() {
			once.Do(func() {
				mu.Lock()
				defer mu.Unlock()
				if pending--; pending == 0 {
					working := ""
					update(persistence.TaskUpdate{Status: persistence.TaskWorking, StatusMessage: &working})
				}
			})
		}
	}
}

// inputMessage is the status message of a task waiting on its client's answer to a request of method.
func inputMessage(method string, params json.RawMessage) string {
	var p struct {
		Message string `json:"message"`
	}
	if method == "elicitation/create" && json.Unmarshal(params, &p) == nil && p.Message != "" {
		if len(p.Message) > maxInputMessage {
			p.Message = p.Message[:maxInputMessage] + "..."
		}
		return "Waiting for the client's answer: " + p.Message
	}
	return "Waiting for the client's answer to " + method
}

// finish stores how the task's call ended. A task cancelled meanwhile stays cancelled (the store keeps the first
// final status).
func (m *Manager) finish(id string, rctx context.Context, out Outcome) {
	u := persistence.TaskUpdate{Status: persistence.TaskCompleted, Result: out.Result}
	switch {
	case m.base.Err() != nil:
		u = failed(MsgStopped, nil)
	case errors.Is(rctx.Err(), context.DeadlineExceeded) && out.Result == nil:
		u = failed(MsgExpired, out.Error)
	case out.Result == nil:
		u = failed(out.Message, out.Error)
	}
	// The store write outlives the run's context (cancelled, or past its deadline) and the Manager's.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t, err := m.cfg.Store.UpdateTask(ctx, id, u)
	if errors.Is(err, persistence.ErrTaskTooLarge) {
		t, err = m.cfg.Store.UpdateTask(ctx, id, failed(fmt.Sprintf("The call's result (%d bytes) is larger than a task keeps (%d bytes)",
			len(out.Result), persistence.MaxTaskPayloadBytes), nil))
	}
	if err == nil {
		m.changed(t)
	}
	if err != nil && !errors.Is(err, persistence.ErrTaskFinished) && !errors.Is(err, persistence.ErrNotFound) {
		m.log.Warn("task outcome not stored", "task", id, "error", err)
	}
}

func failed(msg string, doc json.RawMessage) persistence.TaskUpdate {
	if msg == "" {
		msg = "The call failed"
	}
	return persistence.TaskUpdate{Status: persistence.TaskFailed, StatusMessage: &msg, Error: doc}
}

// Get returns a task of caller (an admin reads any task); another owner's task is ErrNotFound.
func (m *Manager) Get(ctx context.Context, caller auth.Identity, id string) (persistence.Task, error) {
	m.noteOwner(Owner(caller))
	t, err := m.cfg.Store.GetTask(ctx, id)
	if err != nil {
		return persistence.Task{}, fmt.Errorf("tasks: get: %w", err)
	}
	if t.Owner != Owner(caller) && !isAdmin(caller) {
		return persistence.Task{}, fmt.Errorf("tasks: get: task %s: %w", id, ErrNotFound)
	}
	return t, nil
}

// GetOwn is Get that finds only the caller's own tasks, admin or not (the MCP methods: a task belongs to the
// subject that created it).
func (m *Manager) GetOwn(ctx context.Context, caller auth.Identity, id string) (persistence.Task, error) {
	m.noteOwner(Owner(caller))
	t, err := m.cfg.Store.GetTask(ctx, id)
	if err != nil {
		return persistence.Task{}, fmt.Errorf("tasks: get: %w", err)
	}
	if t.Owner != Owner(caller) {
		return persistence.Task{}, fmt.Errorf("tasks: get: task %s: %w", id, ErrNotFound)
	}
	return t, nil
}

// List returns a page of the caller's tasks, newest first; all owners' when all is set and the caller is an admin.
func (m *Manager) List(ctx context.Context, caller auth.Identity, all bool, limit, offset int) ([]persistence.Task, bool, error) {
	m.noteOwner(Owner(caller))
	f := persistence.ListTasksFilter{Owner: Owner(caller), Limit: limit, Offset: offset}
	if all && isAdmin(caller) {
		f.Owner = ""
	}
	list, more, err := m.cfg.Store.ListTasks(ctx, f)
	if err != nil {
		return nil, false, fmt.Errorf("tasks: list: %w", err)
	}
	return list, more, nil
}

// Cancel cancels an open task of caller and stops its call when it runs on this node; a final task is
// ErrFinished (returned with the task).
func (m *Manager) Cancel(ctx context.Context, caller auth.Identity, id string, own bool) (persistence.Task, error) {
	get := m.Get
	if own {
		get = m.GetOwn
	}
	if _, err := get(ctx, caller, id); err != nil {
		return persistence.Task{}, err
	}
	msg := MsgCancelled
	t, err := m.cfg.Store.UpdateTask(ctx, id, persistence.TaskUpdate{Status: persistence.TaskCancelled, StatusMessage: &msg})
	if err != nil {
		return t, fmt.Errorf("tasks: cancel: %w", err)
	}
	m.changed(t)
	m.mu.Lock()
	r := m.running[id]
	m.mu.Unlock()
	if r != nil {
		r.cancel()
	}
	return t, nil
}

// Wait returns the caller's task once it is final, or as it is after wait (bounded by ctx). A task running on
// this node is waited for directly; one running elsewhere is read from the store every 250 ms.
func (m *Manager) Wait(ctx context.Context, caller auth.Identity, id string, wait time.Duration, own bool) (persistence.Task, error) {
	get := m.Get
	if own {
		get = m.GetOwn
	}
	// Whether it runs here is looked at before the task is read: a run stores its final status before it leaves
	// running, so a task read open while it was not running here is running elsewhere.
	m.mu.Lock()
	r := m.running[id]
	m.mu.Unlock()
	t, err := get(ctx, caller, id)
	if err != nil || !persistence.TaskOpen(t.Status) || wait <= 0 {
		return t, err
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	tick := time.NewTicker(storePoll)
	defer tick.Stop()
	for {
		var done <-chan struct{}
		if r != nil {
			done = r.done
		}
		select {
		case <-ctx.Done():
			return t, nil
		case <-timer.C:
			return m.reread(ctx, caller, id, t, get)
		case <-done:
			r = nil // closed for good: the store has the final status (or could not be written: poll it)
		case <-tick.C:
		}
		t, err = get(ctx, caller, id)
		if err != nil || !persistence.TaskOpen(t.Status) {
			return t, err
		}
	}
}

func (m *Manager) reread(ctx context.Context, caller auth.Identity, id string, last persistence.Task,
	get func(context.Context, auth.Identity, string) (persistence.Task, error)) (persistence.Task, error) {
	t, err := get(ctx, caller, id)
	if err != nil {
		return last, nil
	}
	return t, nil
}

// Recover marks failed every open task whose node is not among live (this node's included when it just
// started: its own tasks of a previous run are orphans too, unless its id is the same, in which case the caller
// passes an empty live). It returns how many.
func (m *Manager) Recover(ctx context.Context, live []string) (int, error) {
	// The tasks that follow a backend's task are spared when this Manager resumes them: failing first, then
	// claiming, the tasks this node claims at start (its own of a previous run, under the same id) stay open.
	resume := m.cfg.Resume != nil
	n, err := m.cfg.Store.FailOrphanedTasks(ctx, live, MsgStopped, resume)
	if err != nil {
		return 0, fmt.Errorf("tasks: recover: %w", err)
	}
	m.resumeOrphans(ctx, live)
	if n > 0 {
		m.log.Warn("tasks left open by a stopped daemon marked failed", "tasks", n)
	}
	return n, nil
}

// resumeOrphans claims, when the Manager resumes backend tasks (Config.Resume), the open tasks of nodes not in
// live that follow a backend's task, and resumes following each on this node. A task the claim could not read
// is left to FailOrphanedTasks.
func (m *Manager) resumeOrphans(ctx context.Context, live []string) {
	if m.cfg.Resume == nil || m.base.Err() != nil {
		return
	}
	claimed, err := m.cfg.Store.ClaimOrphanedTasks(ctx, live, m.cfg.Node)
	if err != nil {
		m.log.Warn("tasks of stopped daemons not claimed", "error", err)
		return
	}
	for _, t := range claimed {
		m.log.Info("following again the backend task of a task whose daemon stopped", "task", t.ID,
			"backend_task", t.BackendTaskID, "server", t.Server)
		m.launch(context.Background(), t, func(ctx context.Context) Outcome { return m.cfg.Resume(ctx, t) })
	}
}

// Sweep deletes the expired tasks and returns how many.
func (m *Manager) Sweep(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := m.cfg.Store.DeleteExpiredTasks(ctx, time.Now(), sweepBatch)
		total += n
		if err != nil {
			return total, fmt.Errorf("tasks: sweep: %w", err)
		}
		if n < sweepBatch {
			return total, nil
		}
	}
}

// RecoverAtStart fails the tasks a previous run of this node left open (it runs none of them now: it just
// started) and those of nodes that are not running.
func (m *Manager) RecoverAtStart(ctx context.Context) error {
	var live []string
	if m.cfg.LiveNodes != nil {
		nodes, err := m.cfg.LiveNodes(ctx)
		if err != nil {
			return fmt.Errorf("tasks: live nodes: %w", err)
		}
		for _, n := range nodes {
			if n != m.cfg.Node {
				live = append(live, n)
			}
		}
	}
	_, err := m.Recover(ctx, live)
	return err
}

// Run sweeps expired tasks every SweepInterval, and resumes or fails the open tasks of nodes that stopped
// (LiveNodes) every OrphanInterval, until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	tick := time.NewTicker(m.cfg.SweepInterval)
	defer tick.Stop()
	orphans := time.NewTicker(m.cfg.OrphanInterval)
	defer orphans.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if _, err := m.Sweep(ctx); err != nil && ctx.Err() == nil {
				m.log.Warn("sweeping expired tasks failed", "error", err)
			}
		case <-orphans.C:
			if m.cfg.LiveNodes == nil {
				continue
			}
			if live, err := m.cfg.LiveNodes(ctx); err == nil && len(live) > 0 {
				_, _ = m.Recover(ctx, append(live, m.cfg.Node))
			}
		}
	}
}

// Close stops every task running on this node (each is marked failed: the daemon stopped) and waits for them.
//
// A task that follows a backend's task (and the Manager resumes such tasks, Config.Resume) is handed over
// instead: its call is not cancelled here (the daemon's actors stop it when they shut down, without cancelling the
// backend's task), its row stays open, and another node, or this daemon restarted, resumes following the backend's
// task. Close does not wait for those.
func (m *Manager) Close() {
	m.HandOver()
	m.stop()
	m.seenMu.Lock()
	m.seen.closed = true // no owner's catch-up starts from now on
	m.seenMu.Unlock()
	m.catching.Wait()
	m.mu.Lock()
	var wait []chan struct{}
	for _, r := range m.running {
		if r.state.Load() != runHandover {
			wait = append(wait, r.done)
		}
	}
	m.mu.Unlock()
	for _, done := range wait {
		<-done
	}
}

// HandOver marks, when the Manager resumes backend tasks (Config.Resume), the runs whose task follows a backend's
// task (read from the store) for a hand-over: however their call ends from now on (the daemon's drain cancels it),
// nothing is stored and the task stays open for a resumption. The daemon calls it as its shutdown begins, before
// it drains its calls; Close does too.
func (m *Manager) HandOver() {
	if m.cfg.Resume == nil {
		return
	}
	m.mu.Lock()
	runs := make(map[string]*run, len(m.running))
	for id, r := range m.running {
		runs[id] = r
	}
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for id, r := range runs {
		if t, err := m.cfg.Store.GetTask(ctx, id); err == nil && t.BackendTaskID != "" && persistence.TaskOpen(t.Status) &&
			r.state.CompareAndSwap(runRunning, runHandover) {
			m.log.Info("task left to be resumed: it follows a backend's task", "task", id, "backend_task", t.BackendTaskID)
		}
	}
}

// Done is closed once the task id, running on this node, has ended; nil when it does not run here.
func (m *Manager) Done(id string) <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.running[id]; r != nil {
		return r.done
	}
	return nil
}

// Node is this daemon's instance id, as stored on the tasks it runs.
func (m *Manager) Node() string { return m.cfg.Node }

// Lookup reads task id as stored, whoever owns it: for the daemon's own use, never a caller's read (Get, GetOwn).
func (m *Manager) Lookup(ctx context.Context, id string) (persistence.Task, error) {
	t, err := m.cfg.Store.GetTask(ctx, id)
	if err != nil {
		return persistence.Task{}, fmt.Errorf("tasks: lookup: %w", err)
	}
	return t, nil
}

// Running is how many tasks run on this node.
func (m *Manager) Running() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.running)
}

// MaxOpen is the cap of open tasks per owner (0: none).
func (m *Manager) MaxOpen() int { return max(m.cfg.MaxOpenPerOwner, 0) }
