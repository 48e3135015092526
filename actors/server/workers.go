package server

import "time"

// workerIdle is how long a call's goroutine waits for the next call before it ends.
const workerIdle = 5 * time.Second

// workers runs the server actor's calls on goroutines that outlive a call (issue 26). A call's goroutine goes deep
// (the HTTP client and its layers) and a new goroutine starts with the runtime's small stack, so every call paid
// for growing and copying its stack two or three times (5 % of a call's CPU in the daemon's profile); a goroutine
// that served a call keeps its stack for the next. Never fewer goroutines than before: a call that finds no idle
// one starts a new one, so nothing queues behind another call; idle ones end after workerIdle.
type workers struct {
	idle chan func()
}

func newWorkers() *workers { return &workers{idle: make(chan func())} }

// run runs f on an idle worker, or on a new one when none is idle.
func (w *workers) run(f func()) {
	select {
	case w.idle <- f:
	default:
		go w.loop(f)
	}
}

// loop runs f, then each call handed to it, until it has waited workerIdle for one.
func (w *workers) loop(f func()) {
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		f()
		f = nil // nothing of the call is kept while idle
		t.Reset(workerIdle)
		select {
		case f = <-w.idle:
		case <-t.C:
			return
		}
	}
}
