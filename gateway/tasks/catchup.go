package tasks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// Catching up after a break of the feed. The other nodes announce their tasks' status changes through the store's
// feed (Config.Announce, Announced), which delivers at most once: a node whose feed connection broke has missed the
// changes announced until it reconnected. Its clients would then never hear that a task run elsewhere ended (their
// notifications/tasks/status), and a task running here that was cancelled through another node meanwhile would
// run on. So, once the feed is back, CatchUp re-reads from the store the tasks this node's callers follow, and tells
// the hooks of each whose status differs from the one they were last told (as Announced does):
//
//   - the newest tasks (up to catchUpPage) of every owner that used this node's Manager (started, read, listed or
//     cancelled a task here) within MaxTTL: those owners' sessions are the ones told of status changes;
//   - every task the hooks were last told is open (or a listen stream follows open: Follow), and every task
//     running here, whichever its owner.
//
// A task the hooks were never told of is told when it is open, or when it became final since the previous catch-up
// (less catchUpSlack, for the clocks of the nodes that stamp updated_at): an older final task was either told
// before the feed broke, or ended before its owner came here.
//
// An owner new to this node (its first task request here since the Manager started, or since it was forgotten) is
// caught up on alone, the same way, off the request's path (catchUpOwner): the announcements of its tasks made
// before this node started, or before it followed the owner, were never heard here. A task of another node that
// went input_required before this node started is so told to the hooks when its owner first uses tasks here (the
// endpoints then send its pending request to a session of the owner here, http/mcpserver/tasks_remote.go).

const (
	// catchUpPage is how many of an owner's newest tasks a catch-up reads.
	catchUpPage = 100
	// catchUpSlack widens a catch-up's window backwards, for the nodes' clocks.
	catchUpSlack = time.Minute
	// minSeenPrune is the smallest size of the told and owner maps at which they are pruned.
	minSeenPrune = 1024
	// ownerCatchUpTimeout bounds the catch-up of an owner new to this node.
	ownerCatchUpTimeout = 10 * time.Second
)

// toldState is the status of a task as the hooks were last told.
type toldState struct {
	status  string
	updated int64 // UnixMilli (an announced task's times are in milliseconds)
	expires time.Time
}

// seenTasks is what CatchUp compares the store with: the owners of this node's callers and the statuses told.
type seenTasks struct {
	owners map[string]time.Time // owner -> last use of this node's Manager
	told   map[string]toldState // task id -> the status the hooks were last told
	since  time.Time            // when the previous catch-up (or the Manager) started
	// unread are the owners new to this node whose tasks were not read yet: true while their catch-up runs, false
	// when it failed (the owner's next request tries again).
	unread     map[string]bool
	closed     bool // the Manager is closed: no owner's catch-up starts
	ownerPrune int
	toldPrune  int
}

func newSeenTasks() seenTasks {
	return seenTasks{owners: map[string]time.Time{}, told: map[string]toldState{}, unread: map[string]bool{},
		since: time.Now(), ownerPrune: minSeenPrune, toldPrune: minSeenPrune}
}

// noteOwner records that owner used this node's Manager now (its tasks are caught up on). An owner new to this
// node has its tasks caught up on now, in the background (catchUpOwner).
func (m *Manager) noteOwner(owner string) {
	now := time.Now()
	m.seenMu.Lock()
	defer m.seenMu.Unlock()
	s := &m.seen
	_, known := s.owners[owner]
	s.owners[owner] = now
	start := !known // a new owner; or one whose catch-up failed, when none runs
	if running, unread := s.unread[owner]; unread {
		start = !running
	}
	if start && !s.closed {
		s.unread[owner] = true
		m.catching.Add(1) // under seenMu, before Close sets closed: Close waits for it
		go m.catchUpOwner(owner)
	}
	if len(s.owners) <= s.ownerPrune {
		return
	}
	for o, at := range s.owners {
		if now.Sub(at) > m.cfg.MaxTTL { // none of its tasks started before that still exists
			delete(s.owners, o)
			if !s.unread[o] {
				delete(s.unread, o)
			}
		}
	}
	s.ownerPrune = max(2*len(s.owners), minSeenPrune)
}

// catchUpOwner is the catch-up of owner alone, new to this node: its newest tasks (up to catchUpPage) are read, and
// the hooks told of those whose status they were not told (as CatchUp does), but for the tasks running here (this
// node tells their changes itself). It is bounded by ownerCatchUpTimeout, and ends at Close.
func (m *Manager) catchUpOwner(owner string) {
	defer m.catching.Done()
	ctx, cancel := context.WithTimeout(m.base, ownerCatchUpTimeout)
	defer cancel()
	m.seenMu.Lock()
	since := m.seen.since.Add(-catchUpSlack)
	m.seenMu.Unlock()
	list, _, err := m.cfg.Store.ListTasks(ctx, persistence.ListTasksFilter{Owner: owner, Limit: catchUpPage})
	m.seenMu.Lock()
	if err != nil {
		m.seen.unread[owner] = false
	} else {
		delete(m.seen.unread, owner)
	}
	m.seenMu.Unlock()
	if err != nil {
		if m.base.Err() == nil {
			m.log.Warn("the tasks of an owner new to this node not read", "owner", owner, "error", err)
		}
		return
	}
	told := 0
	for _, t := range list {
		m.mu.Lock()
		here := m.running[t.ID] != nil
		m.mu.Unlock()
		if !here && m.catchUpOne(t, since) {
			told++
		}
	}
	if told > 0 {
		m.log.Debug("task statuses of an owner new to this node told", "owner", owner, "tasks", told)
	}
}

// noteTold records the status the hooks are told of t.
func (m *Manager) noteTold(t persistence.Task) {
	now := time.Now()
	expires := t.ExpiresAt
	if expires.IsZero() { // an announced task: CreatedAt + TTL
		expires = t.CreatedAt.Add(t.TTL)
	}
	m.seenMu.Lock()
	defer m.seenMu.Unlock()
	s := &m.seen
	s.told[t.ID] = toldState{status: t.Status, updated: t.UpdatedAt.UnixMilli(), expires: expires}
	if len(s.told) <= s.toldPrune {
		return
	}
	old := s.since.Add(-catchUpSlack).UnixMilli()
	for id, st := range s.told {
		// Gone from the store, or final and older than a catch-up's window (it is not told again anyway).
		if now.After(st.expires) || (!persistence.TaskOpen(st.status) && st.updated < old) {
			delete(s.told, id)
		}
	}
	s.toldPrune = max(2*len(s.told), minSeenPrune)
}

// Follow records t, as read from the store for a client that follows it (a listen stream naming it), as told: a
// catch-up then re-reads it while it is open, also when it is not among its owner's newest tasks. A task the hooks
// were told of already keeps what they were told.
func (m *Manager) Follow(t persistence.Task) {
	m.seenMu.Lock()
	_, known := m.seen.told[t.ID]
	m.seenMu.Unlock()
	if !known && persistence.TaskOpen(t.Status) {
		m.noteTold(t)
	}
}

// CatchUp re-reads the tasks this node's callers follow and tells the hooks of those whose status changed unheard
// (see above); the daemon calls it when its feed reconnected. It returns how many it told. A task that ended
// elsewhere while it runs here has its call stopped (Announced).
func (m *Manager) CatchUp(ctx context.Context) (int, error) {
	start := time.Now()
	m.seenMu.Lock()
	since := m.seen.since.Add(-catchUpSlack)
	owners := make([]string, 0, len(m.seen.owners))
	for o := range m.seen.owners {
		owners = append(owners, o)
	}
	var open []string
	for id, st := range m.seen.told {
		if persistence.TaskOpen(st.status) {
			open = append(open, id)
		}
	}
	m.seenMu.Unlock()
	m.mu.Lock()
	for id := range m.running {
		open = append(open, id)
	}
	m.mu.Unlock()

	read := map[string]bool{}
	told := 0
	var errs []error
	for _, owner := range owners {
		list, _, err := m.cfg.Store.ListTasks(ctx, persistence.ListTasksFilter{Owner: owner, Limit: catchUpPage})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, t := range list {
			read[t.ID] = true
			if m.catchUpOne(t, since) {
				told++
			}
		}
	}
	for _, id := range open {
		if read[id] {
			continue
		}
		read[id] = true
		t, err := m.cfg.Store.GetTask(ctx, id)
		switch {
		case errors.Is(err, persistence.ErrNotFound):
			m.seenMu.Lock()
			delete(m.seen.told, id) // expired and swept
			m.seenMu.Unlock()
			continue
		case err != nil:
			errs = append(errs, err)
			continue
		}
		if m.catchUpOne(t, since) {
			told++
		}
	}
	if err := errors.Join(errs...); err != nil {
		// The window stays where it was: the next catch-up reads what this one could not.
		return told, fmt.Errorf("tasks: catch up: %w", err)
	}
	m.seenMu.Lock()
	m.seen.since = start
	m.seenMu.Unlock()
	if told > 0 {
		m.log.Info("task status changes missed during a break of the feed told", "tasks", told)
	}
	return told, nil
}

// catchUpOne tells the hooks of t, as read from the store, when its status is not the one they were last told.
func (m *Manager) catchUpOne(t persistence.Task, since time.Time) bool {
	m.seenMu.Lock()
	last, known := m.seen.told[t.ID]
	m.seenMu.Unlock()
	switch {
	case known && last.status == t.Status && last.updated == t.UpdatedAt.UnixMilli():
		return false
	case !known && !persistence.TaskOpen(t.Status) && t.UpdatedAt.Before(since):
		return false
	}
	// As another node's announcement shows it: no result, error or pending request.
	t.Result, t.Error, t.InputRequest = nil, nil, nil
	m.Announced(t)
	return true
}

// stale reports whether the hooks were told a newer status of t than t's: a final one (a task's final status never
// changes), or one updated later.
func (m *Manager) stale(t persistence.Task) bool {
	m.seenMu.Lock()
	defer m.seenMu.Unlock()
	last, ok := m.seen.told[t.ID]
	return ok && (!persistence.TaskOpen(last.status) || last.updated > t.UpdatedAt.UnixMilli())
}
