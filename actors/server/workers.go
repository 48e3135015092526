package server

import (
	"sync"

	"github.com/mcpgw/aggregator/internal/gopool"
)

// The server actor's calls run on goroutines kept between calls (issue 26, internal/gopool): a call's goroutine
// goes deep (the HTTP client and its layers), and a new one grew its stack two or three times on every call (5 % of
// a call's CPU in the daemon's profile).

// mailboxThroughput is how many messages a mailbox run handles before it lets other goroutines run: protoactor's
// default dispatcher's.
const mailboxThroughput = 300

// callWork runs the server actor's calls (callTool). The last call a mailbox run starts runs on the run's own
// goroutine once the run is over (runLeft, the dispatcher's pool's then), instead of waking another goroutine for
// it: a call that arrives at an idle actor (every call at one caller, most under light load) goes from the asker's
// message to the backend with one goroutine hand-off instead of two (issue 26). A call started while another is
// kept hands the kept one to a worker at once, and so does any message that is not a call (flush), so a kept call
// waits at most for the run's next message to be taken, never for other work.
type callWork struct {
	workers *gopool.Pool
	mu      sync.Mutex
	kept    func()
}

func newCallWork() *callWork { return &callWork{workers: gopool.New()} }

// Go runs f: after the mailbox run that calls it, on the run's goroutine.
func (w *callWork) Go(f func()) {
	w.mu.Lock()
	prev := w.kept
	w.kept = f
	w.mu.Unlock()
	if prev != nil {
		w.workers.Go(prev)
	}
}

// take takes the kept call out.
func (w *callWork) take() func() {
	w.mu.Lock()
	f := w.kept
	w.kept = nil
	w.mu.Unlock()
	return f
}

// flush hands the kept call to a worker: the run goes on with other work.
func (w *callWork) flush() {
	if f := w.take(); f != nil {
		w.workers.Go(f)
	}
}

// runLeft runs the kept call here, once a mailbox run is over.
func (w *callWork) runLeft() {
	if f := w.take(); f != nil {
		f()
	}
}

// dispatcher runs the server actor's mailbox on goroutines kept between runs (issue 26): protoactor's default
// dispatcher starts a goroutine for each run, and on the call path nearly every call is a run of its own (the
// mailbox empties between calls), whose new small stack grew through Receive and callTool on every call (1.3 % of
// the process's CPU in BenchmarkCallPath's profile, runtime.newstack under the mailbox). Messages are handled as
// before: one run at a time, in order (the mailbox schedules a run only when none is under way).
type dispatcher struct{ p *gopool.Pool }

// Schedule implements actor.Dispatcher.
func (d dispatcher) Schedule(fn func()) { d.p.Go(fn) }

// Throughput implements actor.Dispatcher.
func (d dispatcher) Throughput() int { return mailboxThroughput }
