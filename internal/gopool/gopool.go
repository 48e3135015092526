// Package gopool runs functions on goroutines kept between them (issue 26). A goroutine on the call path goes deep
// (the HTTP client, the gateway, the actor ask) and a new goroutine starts with the runtime's small stack, so every
// call paid for growing and copying its stack two or three times; a goroutine that ran one function keeps its
// stack for the next. Never fewer goroutines than before: a function that finds no idle goroutine starts a new
// one, so nothing queues behind another; idle ones end after Idle.
package gopool

import (
	"sync/atomic"
	"time"
)

// Idle is how long a goroutine waits for the next function before it ends.
const Idle = 5 * time.Second

// Pool runs functions on idle goroutines, or on new ones when none is idle. Its zero value is not usable: New.
type Pool struct {
	idle    chan func()
	then    func()       // run after each function, on its goroutine (NewThen); nil: nothing
	started atomic.Int64 // goroutines started (tests)
}

// New makes a pool with no goroutine yet.
func New() *Pool { return &Pool{idle: make(chan func())} }

// NewThen makes a pool that runs then after each function, on the goroutine that ran it, before the goroutine
// waits for the next one.
func NewThen(then func()) *Pool { return &Pool{idle: make(chan func()), then: then} }

// Go runs f on an idle goroutine of the pool, or on a new one when none is idle. It never waits for f.
func (p *Pool) Go(f func()) {
	select {
	case p.idle <- f:
	default:
		p.started.Add(1)
		go p.loop(f)
	}
}

// loop runs f, then each function handed to it, until it has waited Idle for one.
func (p *Pool) loop(f func()) {
	t := time.NewTimer(Idle)
	defer t.Stop()
	for {
		f()
		f = nil // nothing of the function is kept while idle
		if p.then != nil {
			p.then()
		}
		t.Reset(Idle)
		select {
		case f = <-p.idle:
		case <-t.C:
			return
		}
	}
}
