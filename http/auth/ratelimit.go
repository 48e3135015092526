package auth

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limiter is a token bucket per client (Identity.RateKey) for tool calls, shared by the REST tool call and the MCP
// endpoint so a client has one budget. Buckets idle long enough to be full again are dropped, so memory follows
// the clients active recently, not every client ever seen. A nil *Limiter allows everything.
type Limiter struct {
	limit rate.Limit
	burst int
	idle  time.Duration
	now   func() time.Time
	// share divides the limit among the nodes of a cluster (SetShare; 1 on a single node).
	share int

	mu        sync.Mutex
	buckets   map[string]*bucket
	lastSweep time.Time
}

type bucket struct {
	lim  *rate.Limiter
	last time.Time
}

// NewLimiter allows perSecond calls per client with bursts of burst. perSecond <= 0 means no limit (nil).
func NewLimiter(perSecond float64, burst int) *Limiter {
	if perSecond <= 0 {
		return nil
	}
	if burst < 1 {
		burst = 1
	}
	// A bucket left alone for burst/rate is full again: forgetting it then changes nothing.
	idle := time.Duration(float64(burst) / perSecond * float64(time.Second))
	if idle < time.Minute {
		idle = time.Minute
	}
	return &Limiter{limit: rate.Limit(perSecond), burst: burst, idle: idle, now: time.Now, share: 1, buckets: map[string]*bucket{}}
}

// SetShare makes this limiter enforce 1/nodes of the configured rate and burst (at least 1 call), so that a
// client's calls over all the nodes of a cluster stay within the configured limit. A client whose calls all land
// on one node gets that node's share only: spread clients over the nodes (round-robin load balancing).
func (l *Limiter) SetShare(nodes int) {
	if l == nil {
		return
	}
	nodes = max(nodes, 1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if nodes == l.share {
		return
	}
	l.share = nodes
	limit, burst := l.shareLocked()
	for _, b := range l.buckets {
		b.lim.SetLimit(limit)
		b.lim.SetBurst(burst)
	}
}

// shareLocked is this node's rate and burst; l.mu is held.
func (l *Limiter) shareLocked() (rate.Limit, int) {
	return l.limit / rate.Limit(l.share), max(l.burst/l.share, 1)
}

// Allow takes one token from key's bucket. When the bucket is empty it returns false and how long until a token is
// available.
func (l *Limiter) Allow(key string) (bool, time.Duration) {
	if l == nil {
		return true, 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) >= l.idle {
		for k, b := range l.buckets {
			if now.Sub(b.last) >= l.idle {
				delete(l.buckets, k)
			}
		}
		l.lastSweep = now
	}
	b := l.buckets[key]
	if b == nil {
		b = &bucket{lim: rate.NewLimiter(l.shareLocked())}
		l.buckets[key] = b
	}
	b.last = now
	r := b.lim.ReserveN(now, 1)
	if !r.OK() {
		return false, l.idle
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// Len is how many buckets are kept.
func (l *Limiter) Len() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}
