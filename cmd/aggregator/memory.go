package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// The daemon's default garbage-collection policy. GOGC=400 makes the collector run when the heap has grown to five
// times what the last collection left live: with the small live heaps of the call path (about 10 MiB with a few
// servers) that saves the go-sdk's per-message garbage most of its collection cost (about +15 % routed throughput,
// BENCHMARKS.md). Five times a large live heap is too much, though, and a fixed soft limit does not fit every
// daemon: at 256 MiB a daemon with 10,000 tools indexed (about 50 MiB live) let its heap fill to the limit (about
// 280 MiB RSS), and at 128 MiB the collector ran nearly continuously once the live heap neared it (search p95
// doubled; BENCHMARKS.md "Memory, fourth pass"). The memory policy therefore moves the soft limit after every
// collection: it is a budget of defaultBudget for all the memory the runtime holds, raised when the live heap and
// the runtime's other memory leave less than defaultHeadroom (or a quarter of the live heap, if more) of room
// under it, or than what the daemon allocates in burstWindow while it allocates fast. Small heaps keep GOGC=400's
// room (five times their live heap is under the budget); a daemon with thousands of tools collects when it fills
// the budget; a burst of allocation (a hostile backend's oversized messages, indexing) gets room in proportion to
// its rate, up to as much again as is live (a collection's work is in proportion to the live heap, so a small live
// heap collects often at little cost), given back once it is over; and however much is live, the heap always has
// room to grow before the next collection, so the collector never thrashes (the limit follows the live heap up and
// down).
const (
	// defaultGOGC is the heap growth, in percent of the live heap, that starts a collection.
	defaultGOGC = 400
	// defaultBudget is the soft limit while the live heap leaves enough room under it. RSS is about the limit plus
	// the 42-45 MiB of the binary's own pages the daemon touches (file-backed, measured with no server at all), so
	// the budget is what a 100 MB daemon can spend: 48 MiB keeps one with 50 stdio servers (15 MiB live) at 91-101
	// MiB of RSS once idle where 96 MiB gave 126-147, and is about what GOGC=400 asks for with the call path's 9 MiB
	// live heap anyway.
	// Larger live heaps get the limit above it (10,000 tools indexed, about 50 MiB live: live + runtime + headroom).
	defaultBudget = 48 << 20
	// defaultHeadroom is the least room the heap gets to grow between two collections: below it the collector
	// would run after every few MiB allocated, as under a fixed limit near the live heap.
	defaultHeadroom = 24 << 20
	// burstWindow: while the daemon allocates fast (a hostile backend's 16 MiB messages read one after the
	// other, a catalogue being indexed), the headroom is at least what it allocates in this long, so that the
	// collector runs at most about four times a second instead of after every message or two (at a 96 MiB budget
	// and 24 MiB of headroom the healthy servers' throughput halved under the 100 MB-results attack,
	// BENCHMARKS.md "Memory, fifth pass"). Once the allocation rate falls, the next collection brings the limit back.
	// That room is at most the live heap (the collector's work per byte allocated is then at most what GOGC=100
	// costs): a collection's work is the live heap, so a small live heap can afford to collect more often, and
	// room in proportion to the rate alone let 50 stdio servers' connection burst (the go-sdk's 32 KiB decode
	// buffer per message and per tool registered, indexing, classification: about 300 MiB/s for a second, 18 MiB
	// live) raise the limit to 104-122 MiB and the daemon's RSS to 134-146 MiB for a moment.
	burstWindow = 250 * time.Millisecond
	// maxBurstHeadroom caps that: with the live heap of such an attack the limit stays near the fixed 256 MiB
	// limit that bounded it before.
	maxBurstHeadroom = 128 << 20
	// relaxEvery is how often the policy looks at the allocation rate between collections, to lower the limit
	// once a burst is over: an idle daemon may not collect again for minutes.
	relaxEvery = time.Second
)

// memoryDefaults applies the daemon's garbage-collection defaults unless the environment sets them: GOGC=400 when
// GOGC is unset, and when GOMEMLIMIT is unset a soft memory limit that a memoryPolicy keeps at defaultBudget, or
// above it by what the live heap needs (see above). It returns the policy it started (nil when GOMEMLIMIT is set:
// the operator's limit stays as it is).
func memoryDefaults(lookup func(string) (string, bool)) *memoryPolicy {
	if _, set := lookup("GOGC"); !set {
		debug.SetGCPercent(defaultGOGC)
	}
	if _, set := lookup("GOMEMLIMIT"); set {
		return nil
	}
	p := newMemoryPolicy(defaultHeadroom, defaultBudget, debug.SetMemoryLimit, readMemSample)
	p.start()
	go p.relaxLoop(relaxEvery)
	return p
}

// memSample is what the policy reads of the runtime after a collection.
type memSample struct {
	// live is the heap the collection found live (/gc/heap/live:bytes).
	live uint64
	// nonHeap is what the soft limit counts besides heap spans: goroutine stacks and the runtime's metadata. The
	// unused space inside the spans in use is left out of it, although the runtime's heap goal under a limit does
	// subtract it (runtime/mgcpacer.go, memoryLimitHeapGoal): so the fragmentation takes its share of the headroom
	// (with 10,000 tools indexed the room was 2-16 MiB, not 24). Counting it was tried and raised RSS by 8-15 MiB
	// for no gain beyond noise in indexing time (BENCHMARKS.md, "A batch's words analysed once"); the headroom was
	// in effect tuned with it left out.
	nonHeap uint64
	// allocs is every heap byte allocated so far (/gc/heap/allocs:bytes) and at when it was read: two samples
	// give the allocation rate.
	allocs uint64
	at     time.Time
}

// memoryPolicy sets the soft memory limit after every garbage collection to the larger of a budget and the live
// heap plus the runtime's other memory plus a headroom. The headroom is what the heap may allocate before the next
// collection at least: new objects first fill the free slots of the spans in use, so the heap's fragmentation does
// not eat it. It is started once per process; tests make their own with fake functions.
type memoryPolicy struct {
	headroom, budget int64
	setLimit         func(int64) int64
	read             func() memSample

	mu      sync.Mutex // cleanups may run concurrently
	limit   int64      // the limit last set (0: none yet)
	updates int64
	prev    memSample // the sample of the last collection
	stopped atomic.Bool
	done    chan struct{} // closed by stop
}

func newMemoryPolicy(headroom, budget int64, setLimit func(int64) int64, read func() memSample) *memoryPolicy {
	return &memoryPolicy{headroom: headroom, budget: budget, setLimit: setLimit, read: read, done: make(chan struct{})}
}

// limitFor is the soft limit for a sample, given the one before: the budget, or the live heap, the runtime's other
// memory and the headroom when they need more. Past four times the headroom of live heap the headroom is a quarter
// of the live heap instead (GOGC=25), so that a very large daemon does not collect after every few percent of
// growth; and it is at least what the daemon allocated in burstWindow at the rate since the sample before (at most
// the live heap, and at most maxBurstHeadroom).
func (p *memoryPolicy) limitFor(s, prev memSample) int64 {
	const most = 1 << 60
	live, other := int64(min(s.live, most)), int64(min(s.nonHeap, most))
	headroom := max(p.headroom, live/4)
	if took := s.at.Sub(prev.at); !prev.at.IsZero() && took > 0 && s.allocs > prev.allocs {
		rate := float64(s.allocs-prev.allocs) / took.Seconds()
		headroom = max(headroom, min(int64(min(rate*burstWindow.Seconds(), maxBurstHeadroom)), live))
	}
	return max(live+other+headroom, p.budget)
}

// update reads the runtime and moves the limit.
func (p *memoryPolicy) update() {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.read()
	l := p.limitFor(s, p.prev)
	p.prev = s
	if l != p.limit {
		p.setLimit(l)
		p.limit = l
	}
	p.updates++
}

// relax lowers the limit when the allocation rate since the last collection no longer needs it (a burst is over);
// raising it is left to the collections.
func (p *memoryPolicy) relax() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.prev.at.IsZero() {
		return
	}
	if l := p.limitFor(p.read(), p.prev); l < p.limit {
		p.setLimit(l)
		p.limit = l
	}
}

// relaxLoop calls relax every period until stop.
func (p *memoryPolicy) relaxLoop(period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-t.C:
			p.relax()
		}
	}
}

// gcTick is an object that nothing references once it is armed: the collector frees it in the next cycle and runs
// its cleanup, which updates the limit and arms a new one. A pointer field keeps it out of the tiny allocator,
// whose blocks are freed only when all their objects are.
type gcTick struct{ _ *byte }

// start sets the first limit and follows every collection from then on until stop.
func (p *memoryPolicy) start() {
	p.update()
	p.arm()
}

func (p *memoryPolicy) arm() {
	runtime.AddCleanup(&gcTick{}, func(p *memoryPolicy) {
		if p.stopped.Load() {
			return
		}
		p.update()
		p.arm()
	}, p)
}

// stop ends following collections and the relax loop (the limit stays where it is).
func (p *memoryPolicy) stop() {
	if !p.stopped.Swap(true) {
		close(p.done)
	}
}

// state returns the limit last set and how many times the policy read the runtime.
func (p *memoryPolicy) state() (limit, updates int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.limit, p.updates
}

// readMemSample reads the live heap and the runtime's memory classes (runtime/metrics).
func readMemSample() memSample {
	s := [...]metrics.Sample{
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
	}
	metrics.Read(s[:])
	var v [len(s)]uint64
	for i := range s {
		if s[i].Value.Kind() == metrics.KindUint64 {
			v[i] = s[i].Value.Uint64()
		}
	}
	out := memSample{allocs: v[0], live: v[1], at: time.Now()}
	if total, heap := v[2], v[3]+v[4]+v[5]+v[6]; heap <= total {
		out.nonHeap = total - heap
	}
	return out
}
