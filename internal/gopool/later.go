package gopool

import (
	"sync"
	"time"
)

// Later runs functions a fixed delay after each was handed over, all on one timer at a time (issue 26): a
// time.AfterFunc per call costs each call a timer and, when it fires, a goroutine of its own (a relayed call's
// grace, server.AttachRelay). A function runs no sooner than the delay after After; the functions due together run
// one after another, in the order handed over.
type Later struct {
	delay time.Duration
	mu    sync.Mutex
	queue []later // in the order handed over, so in the order they are due (one delay for all)
	armed bool    // a timer is set for queue[0]
}

type later struct {
	at time.Time
	f  func()
}

// NewLater makes a Later of delay.
func NewLater(delay time.Duration) *Later { return &Later{delay: delay} }

// After runs f the delay from now.
func (l *Later) After(f func()) {
	l.mu.Lock()
	l.queue = append(l.queue, later{at: time.Now().Add(l.delay), f: f})
	arm := !l.armed
	l.armed = true
	l.mu.Unlock()
	if arm {
		time.AfterFunc(l.delay, l.run)
	}
}

// run runs the functions that are due and sets the timer for the next one.
func (l *Later) run() {
	l.mu.Lock()
	now := time.Now()
	n := 0
	for n < len(l.queue) && !l.queue[n].at.After(now) {
		n++
	}
	due := make([]func(), n)
	for i := range due {
		due[i] = l.queue[i].f
	}
	left := copy(l.queue, l.queue[n:])
	clear(l.queue[left:])
	l.queue = l.queue[:left]
	var next time.Duration
	if left > 0 {
		next = max(time.Until(l.queue[0].at), 0)
	} else {
		l.armed = false
	}
	l.mu.Unlock()
	if left > 0 {
		time.AfterFunc(next, l.run)
	}
	for _, f := range due {
		f()
	}
}
