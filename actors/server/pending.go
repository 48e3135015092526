package server

import (
	"context"
	"sync"
)

// pendingRequests are a server actor's backend requests in flight (calls and feature requests): the actor admits
// them (add, under the id beginRequest gave), cancels them (one by its call id, all at a disconnect or a shutdown)
// and counts them (the per-server limit, a drain). The worker that ran a request removes it itself (done), so the
// end of a call costs no message to the actor (issue 26: a message per call to its own mailbox, a goroutine woken to
// run it); only while the actor waits for its requests to end (a disconnect's or a hand-over's drain: watch) does
// done tell it to send the actor a callDone, which decides what the last one's end starts.
type pendingRequests struct {
	mu      sync.Mutex
	byID    map[uint64]context.CancelCauseFunc
	byCall  map[string]uint64 // a call's call_id -> its id, for CancelCall
	watched bool
}

func newPendingRequests() *pendingRequests {
	return &pendingRequests{byID: map[uint64]context.CancelCauseFunc{}, byCall: map[string]uint64{}}
}

// add counts the request id in flight; callID (a call's call_id, "" for none) lets cancel find it.
func (p *pendingRequests) add(id uint64, cancel context.CancelCauseFunc, callID string) {
	p.mu.Lock()
	p.byID[id] = cancel
	if callID != "" {
		p.byCall[callID] = id
	}
	p.mu.Unlock()
}

// done removes the request id (and its callID) and reports whether the actor is waiting for requests to end.
func (p *pendingRequests) done(id uint64, callID string) (watched bool) {
	p.mu.Lock()
	delete(p.byID, id)
	if callID != "" && p.byCall[callID] == id {
		delete(p.byCall, callID)
	}
	watched = p.watched
	p.mu.Unlock()
	return watched
}

// watch makes every later done report that the actor waits, and returns how many requests are in flight now: a
// request that ends after this count is seen is reported by its done, so no end is missed between the two.
func (p *pendingRequests) watch() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.watched = true
	return len(p.byID)
}

// unwatch ends a wait: done stops reporting.
func (p *pendingRequests) unwatch() {
	p.mu.Lock()
	p.watched = false
	p.mu.Unlock()
}

// len is the number of requests in flight.
func (p *pendingRequests) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.byID)
}

// cancel cancels the call in flight under callID and reports whether there was one.
func (p *pendingRequests) cancel(callID string) bool {
	p.mu.Lock()
	id, ok := p.byCall[callID]
	cancel := p.byID[id]
	p.mu.Unlock()
	if ok && cancel != nil {
		cancel(nil)
	}
	return ok
}

// cancelAll cancels every request in flight with cause (nil: context.Canceled).
func (p *pendingRequests) cancelAll(cause error) {
	p.mu.Lock()
	cancels := make([]context.CancelCauseFunc, 0, len(p.byID))
	for _, c := range p.byID {
		cancels = append(cancels, c)
	}
	p.mu.Unlock()
	for _, c := range cancels {
		c(cause)
	}
}
