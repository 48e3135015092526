package classify

import (
	"cmp"
	"slices"
)

// Outcome is how one classification ended.
type Outcome string

// Outcomes of one classification.
const (
	OutcomeClassified   Outcome = "classified"   // CLASSIFIED with 1-3 skills
	OutcomeUnclassified Outcome = "unclassified" // the classifier answered, no skill reached the threshold
	OutcomeFailed       Outcome = "failed"       // the classifier (or the store) failed: UNCLASSIFIED, retried later
	OutcomeGone         Outcome = "gone"         // the tool was removed meanwhile
	OutcomeInterrupted  Outcome = "interrupted"  // shutdown: the tool stays CLASSIFYING and is resumed at the next start
)

// settled reports whether the outcome settles the tool (it is announced as classified).
func (o Outcome) settled() bool {
	return o == OutcomeClassified || o == OutcomeUnclassified || o == OutcomeFailed
}

// Ref is a tool a classifier pool works on: its id and server, the text it is classified by, and the skills it
// keeps while it is being classified.
type Ref struct {
	ID             int64
	Server         string
	Name           string
	Description    string
	InputSchema    []byte
	SkillIDs       []string
	PrimarySkillID *string
}

// Tool is the text the tool is classified by.
func (r Ref) Tool() Tool {
	return Tool{Name: r.Name, Description: r.Description, InputSchema: r.InputSchema}
}

// Queue holds the decisions of a classifier pool (BR-004, EC-009) without running anything: which tools wait,
// which run (at most limit at once), which failed and wait for the classifier to recover, which one is the probe
// that tests whether it has, and which finished tools of each server are not announced yet. Its owner (one actor)
// starts what Next hands out, reports each outcome to Finish, and runs the timers. Not safe for concurrent use.
type Queue struct {
	limit   int
	fifo    []int64       // of tool ids; ids no longer in jobs are skipped
	jobs    map[int64]Ref // queued, not started
	running map[int64]Ref
	again   map[int64]bool // changed while being classified: classify once more
	failed  map[int64]Ref
	probe   int64 // the failed tool being retried (queued or running), 0 when none

	pending map[string]int     // per server: tools queued or running
	done    map[string][]int64 // per server: tools finished since the last TakeDone
}

// NewQueue returns an empty queue that runs at most limit classifications at once (at least one).
func NewQueue(limit int) *Queue {
	return &Queue{limit: max(limit, 1), jobs: map[int64]Ref{}, running: map[int64]Ref{}, again: map[int64]bool{},
		failed: map[int64]Ref{}, pending: map[string]int{}, done: map[string][]int64{}}
}

// Backlog is how many tools are queued, running, and failed.
func (q *Queue) Backlog() (queued, running, failed int) {
	return len(q.jobs), len(q.running), len(q.failed)
}

// SeedFailed remembers tools found unclassified at start as failed (they may have failed before the restart), so
// that they wait for the retry like failed ones; a tool queued or running is left alone.
func (q *Queue) SeedFailed(refs []Ref) {
	for _, r := range refs {
		_, queued := q.jobs[r.ID]
		if _, running := q.running[r.ID]; !queued && !running {
			q.failed[r.ID] = r
		}
	}
}

// Enqueue queues a tool once: a tool already queued is not queued again, and one being classified is classified
// again afterwards only when force says its definition changed.
func (q *Queue) Enqueue(r Ref, force bool) { q.enqueue(r, force, false) }

func (q *Queue) enqueue(r Ref, force, probe bool) {
	delete(q.failed, r.ID)
	if _, ok := q.running[r.ID]; ok {
		if force {
			q.again[r.ID] = true
		}
		return
	}
	if _, ok := q.jobs[r.ID]; ok {
		return
	}
	q.jobs[r.ID] = r
	q.pending[r.Server]++
	if probe {
		q.fifo = append([]int64{r.ID}, q.fifo...)
	} else {
		q.fifo = append(q.fifo, r.ID)
	}
}

// Remove forgets removed tools: no longer failed, and out of the queue (a running one finishes as it will).
func (q *Queue) Remove(ids []int64) {
	for _, id := range ids {
		delete(q.failed, id)
		if r, ok := q.jobs[id]; ok {
			q.dropJob(id, r)
		}
	}
}

// RemoveServer forgets a removed server's tools: failed, queued, to be classified again, and not announced.
func (q *Queue) RemoveServer(server string) {
	for id, r := range q.failed {
		if r.Server == server {
			delete(q.failed, id)
		}
	}
	for id, r := range q.jobs {
		if r.Server == server {
			q.dropJob(id, r)
		}
	}
	for id, r := range q.running {
		if r.Server == server {
			delete(q.again, id)
		}
	}
	delete(q.pending, server)
	delete(q.done, server)
}

// dropJob takes a queued tool out of the queue (its id stays in the FIFO and is skipped).
func (q *Queue) dropJob(id int64, r Ref) {
	delete(q.jobs, id)
	q.release(r.Server)
	if q.probe == id {
		q.probe = 0
	}
}

// release counts one tool of a server as no longer queued or running.
func (q *Queue) release(server string) (last bool) {
	n, ok := q.pending[server]
	if !ok {
		return false
	}
	if n <= 1 {
		delete(q.pending, server)
		return true
	}
	q.pending[server] = n - 1
	return false
}

// Next hands out the next queued tool to classify, as running, while fewer than limit run (false: none now).
func (q *Queue) Next() (Ref, bool) {
	for len(q.running) < q.limit && len(q.fifo) > 0 {
		id := q.fifo[0]
		q.fifo = q.fifo[1:]
		r, ok := q.jobs[id]
		if !ok {
			continue
		}
		delete(q.jobs, id)
		q.running[id] = r
		return r, true
	}
	if len(q.fifo) == 0 {
		q.fifo = nil // let the backing array go
	}
	return Ref{}, false
}

// Finished is what Finish decided.
type Finished struct {
	// Known: the tool was running (else nothing changed).
	Known bool
	// Recovered: the probe was answered, and this many failed tools were queued again (EC-009).
	Recovered int
	// Last: no tool of the server is queued or running any more: announce its finished tools now (TakeDone).
	Last bool
	// Waiting: finished tools of the server wait to be announced (while the rest of its batch runs).
	Waiting bool
}

// Finish records the outcome of a running tool: a failure remembers it for the retry; an answer to the probe
// queues every failed tool again; a tool changed while it ran is queued again; a settled tool waits to be
// announced; a probe whose tool was gone gives way to another failed tool.
func (q *Queue) Finish(id int64, outcome Outcome) Finished {
	r, ok := q.running[id]
	if !ok {
		return Finished{}
	}
	res := Finished{Known: true}
	delete(q.running, id)
	wasProbe := q.probe == id
	if wasProbe {
		q.probe = 0
	}
	switch outcome {
	case OutcomeClassified, OutcomeUnclassified:
		if wasProbe && len(q.failed) > 0 {
			for _, f := range q.sortedFailed() {
				q.enqueue(f, false, false)
				res.Recovered++
			}
		}
	case OutcomeFailed:
		q.failed[id] = r
	}
	if q.again[id] {
		delete(q.again, id)
		if outcome != OutcomeGone && outcome != OutcomeInterrupted {
			q.enqueue(r, false, false)
		}
	}
	if outcome.settled() {
		if _, live := q.pending[r.Server]; live { // else the server was removed meanwhile
			q.done[r.Server] = append(q.done[r.Server], id)
		}
	}
	res.Last = q.release(r.Server)
	res.Waiting = !res.Last && len(q.done[r.Server]) > 0
	if wasProbe && outcome == OutcomeGone {
		q.StartProbe() // not a signal either way: try another failed tool
	}
	return res
}

// TakeDone returns and forgets the finished tools of a server not announced yet.
func (q *Queue) TakeDone(server string) []int64 {
	ids := q.done[server]
	delete(q.done, server)
	return ids
}

// DoneServers lists the servers with finished tools not announced yet.
func (q *Queue) DoneServers() []string {
	out := make([]string, 0, len(q.done))
	for s := range q.done {
		out = append(out, s)
	}
	return out
}

// NeedsRetry reports whether a retry should be scheduled: there are failed tools and none is being retried.
func (q *Queue) NeedsRetry() bool { return q.probe == 0 && len(q.failed) > 0 }

// StartProbe queues the oldest failed tool ahead of the queue as the probe, unless one is being retried.
func (q *Queue) StartProbe() {
	if q.probe != 0 || len(q.failed) == 0 {
		return
	}
	r := q.sortedFailed()[0]
	q.probe = r.ID
	q.enqueue(r, false, true)
}

func (q *Queue) sortedFailed() []Ref {
	out := make([]Ref, 0, len(q.failed))
	for _, r := range q.failed {
		out = append(out, r)
	}
	slices.SortFunc(out, func(x, y Ref) int { return cmp.Compare(x.ID, y.ID) })
	return out
}
