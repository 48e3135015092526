// Package floodguard bounds what one backend's notifications cost the daemon. Without it a backend that floods
// notifications/tools/list_changed makes the daemon rediscover it back to back (each run a tools/list, a store
// write, a routing-table reload and a list_changed to every /mcp client), and one that floods log messages or
// progress notifications during a call has each of them marshalled, sent through the actor system and written to
// the calling client; either halves the throughput of every healthy server beside it.
//
//   - Latch merges a session's list_changed notifications at their source: while one is on its way to the server
//     actor, the next ones are dropped (the rediscovery the first one causes lists what they announce).
//   - Runs schedules rediscoveries per key (server and kind): at most one running and one pending, a run caused by
//     list_changed starting no sooner than an interval after the previous one started when that one found nothing
//     new. A forced run (a new session, an admin refresh) starts as soon as none is running.
//   - Listings remembers a fingerprint of what each key's last run stored, so that a list_changed run that lists
//     the same as before stores and publishes nothing (no write, no reload, no list_changed downstream).
//   - Limiter is a token bucket per kind (log, progress) for one server's relayed notifications; beyond the rate
//     they are dropped and counted.
//   - Pacer slows the reading of a stdio session down while its notifications come faster than ReadRate: the
//     backend then waits on its own writes (backpressure), and the daemon spends no more on it than that rate,
//     whatever it sends (reading, decoding and handling a notification cost the daemon even when it is dropped).
package floodguard

import (
	"crypto/sha256"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Kinds of notifications a flood may drop (label kind of mcp_aggregator_notifications_dropped_total).
const (
	KindLog         = "log"          // notifications/message relayed to the calling client
	KindProgress    = "progress"     // notifications/progress relayed to the calling client
	KindListChanged = "list_changed" // notifications/{tools,prompts,resources}/list_changed merged into one pending
)

// Defaults of the configuration.
const (
	// DefaultRate is how many log messages, and how many progress notifications, of one server are relayed per
	// second (MCP_AGGREGATOR_NOTIFY_RATE); a burst of as many passes at once.
	DefaultRate = 100
	// DefaultInterval is the least time between two rediscoveries of one server and kind caused by list_changed.
	DefaultInterval = time.Second
	// ReadRate is how many notifications a second a session's reader takes before it waits (with a burst of as
	// many): far above what a backend sends to report on its work, far below what a flooding one sends.
	ReadRate = 1000
)

// Pacer paces the notifications read from one session. A nil Pacer never waits.
type Pacer struct{ l *rate.Limiter }

// NewPacer paces at perSecond notifications a second, with a burst of as many; perSecond <= 0: nil, no pacing.
func NewPacer(perSecond float64) *Pacer {
	if perSecond <= 0 {
		return nil
	}
	return &Pacer{l: rate.NewLimiter(rate.Limit(perSecond), max(int(perSecond), 1))}
}

// Wait takes one notification's token, waiting for it when the rate is exceeded; false when stop closed first.
func (p *Pacer) Wait(stop <-chan struct{}) bool {
	if p == nil {
		return true
	}
	r := p.l.Reserve()
	d := r.Delay()
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		r.Cancel()
		return false
	}
}

// Latch merges notifications at their source: Set reports whether the caller should pass the notification on
// (none is on its way); the receiver calls Clear before acting on it, so a notification that arrives after Clear
// is passed on again and none is lost. Safe for concurrent use; the zero value is open.
type Latch struct{ set atomic.Bool }

// Set closes the latch and reports whether it was open.
func (l *Latch) Set() bool { return l.set.CompareAndSwap(false, true) }

// Clear opens the latch.
func (l *Latch) Clear() { l.set.Store(false) }

// Limiter bounds the relayed notifications of one server: a token bucket per kind. A nil Limiter allows all.
type Limiter struct {
	log, progress *rate.Limiter
	dropped       func(kind string)
}

// NewLimiter allows perSecond notifications of each kind per second with a burst of as many (at least 1);
// dropped (may be nil) is called for every notification refused. perSecond <= 0 returns nil: no limit.
func NewLimiter(perSecond float64, dropped func(kind string)) *Limiter {
	if perSecond <= 0 {
		return nil
	}
	burst := max(int(perSecond), 1)
	return &Limiter{log: rate.NewLimiter(rate.Limit(perSecond), burst), progress: rate.NewLimiter(rate.Limit(perSecond), burst), dropped: dropped}
}

// Allow reports whether one more notification of kind (KindLog or KindProgress) may be relayed now, and counts it
// as dropped when not.
func (l *Limiter) Allow(kind string) bool {
	if l == nil {
		return true
	}
	b := l.log
	if kind == KindProgress {
		b = l.progress
	}
	if b.Allow() {
		return true
	}
	if l.dropped != nil {
		l.dropped(kind)
	}
	return false
}

// Next is what Runs says to do about a key: start a run now (Run, Forced when it must store and publish even
// when nothing changed), or call Due with Seq after After, or nothing (zero).
type Next struct {
	Run    bool
	Forced bool
	After  time.Duration
	Seq    uint64
}

// Runs schedules the runs of keys. It is not safe for concurrent use: one actor owns it.
type Runs struct {
	interval time.Duration
	keys     map[string]*runState
}

type runState struct {
	running bool      // a run is going on
	waiting bool      // a timer (seq) is armed for the pending run
	pending bool      // another run is owed
	forced  bool      // the owed run must store and publish even when nothing changed
	last    time.Time // when the last run started
	seq     uint64
	// forgotten: the key's server was removed while a run was going on; Done drops the key.
	forgotten bool
}

// NewRuns schedules runs at least interval apart (forced runs excepted).
func NewRuns(interval time.Duration) *Runs {
	return &Runs{interval: interval, keys: map[string]*runState{}}
}

// Trigger owes key a run (forced: one that stores and publishes even when nothing changed).
func (r *Runs) Trigger(key string, forced bool, now time.Time) Next {
	s := r.keys[key]
	if s == nil {
		s = &runState{}
		r.keys[key] = s
	}
	s.pending = true
	s.forced = s.forced || forced
	if s.running {
		return Next{}
	}
	return r.next(s, now)
}

// Done ends key's run; what is owed meanwhile is said by the result. changed: the run found (and stored) a new
// listing, so the next one need not wait for the interval: only runs that find nothing new are spaced, and a
// backend's real changes are picked up at once.
func (r *Runs) Done(key string, changed bool, now time.Time) Next {
	s := r.keys[key]
	if s == nil {
		return Next{}
	}
	s.running = false
	if s.forgotten {
		delete(r.keys, key)
		return Next{}
	}
	if changed {
		s.last = time.Time{}
	}
	return r.next(s, now)
}

// Due is the timer of Next.After firing: the pending run starts now unless a later trigger started it already.
func (r *Runs) Due(key string, seq uint64, now time.Time) Next {
	s := r.keys[key]
	if s == nil || !s.waiting || s.seq != seq || s.running {
		return Next{}
	}
	s.waiting = false
	return r.next(s, now)
}

// Forget drops what Runs knows of key (its server was removed); a run going on still calls Done, which then drops
// it.
func (r *Runs) Forget(key string) {
	if s := r.keys[key]; s != nil && !s.running {
		delete(r.keys, key)
	} else if s != nil {
		s.pending, s.forced, s.waiting, s.forgotten = false, false, false, true
	}
}

func (r *Runs) next(s *runState, now time.Time) Next {
	if !s.pending {
		return Next{}
	}
	wait := s.last.Add(r.interval).Sub(now)
	if s.forced || wait <= 0 {
		forced := s.forced
		s.running, s.pending, s.forced, s.waiting, s.last = true, false, false, false, now
		return Next{Run: true, Forced: forced}
	}
	if s.waiting {
		return Next{}
	}
	s.waiting = true
	s.seq++
	return Next{After: wait, Seq: s.seq}
}

// Fingerprint identifies a listing: its items in order.
type Fingerprint [sha256.Size]byte

// Sum is the fingerprint of the lists, in order (each item length-prefixed, so items cannot run into each other).
func Sum(lists ...[][]byte) Fingerprint {
	h := sha256.New()
	var n [8]byte
	for _, list := range lists {
		binary.BigEndian.PutUint64(n[:], uint64(len(list)))
		h.Write(n[:])
		for _, item := range list {
			binary.BigEndian.PutUint64(n[:], uint64(len(item)))
			h.Write(n[:])
			h.Write(item)
		}
	}
	var f Fingerprint
	h.Sum(f[:0])
	return f
}

// Listings remembers, per key, the fingerprint of what was last stored and under which lease epoch. Safe for
// concurrent use.
type Listings struct {
	mu sync.Mutex
	m  map[string]stored
}

type stored struct {
	epoch int64
	sum   Fingerprint
}

// Same reports whether key's last stored listing, under the same lease epoch, had this fingerprint.
func (l *Listings) Same(key string, epoch int64, sum Fingerprint) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.m[key]
	return ok && s.epoch == epoch && s.sum == sum
}

// Remember records what key's run stored.
func (l *Listings) Remember(key string, epoch int64, sum Fingerprint) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]stored{}
	}
	l.m[key] = stored{epoch: epoch, sum: sum}
}

// Last returns what key's last stored listing was (zero values: none), to tell whether a run stored a new one.
func (l *Listings) Last(key string) (epoch int64, sum Fingerprint) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.m[key]
	return s.epoch, s.sum
}

// Forget drops key's fingerprint.
func (l *Listings) Forget(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, key)
}
