package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
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
// under it. Small heaps keep GOGC=400's room (five times their live heap is under the budget); a daemon with
// thousands of tools collects when it fills the budget; and however much is live, the heap always has room to grow
// before the next collection, so the collector never thrashes (the limit follows the live heap up and down).
const (
	// defaultGOGC is the heap growth, in percent of the live heap, that starts a collection.
	defaultGOGC = 400
	// defaultBudget is the soft limit while the live heap leaves enough room under it: 96 MiB of runtime memory
	// keeps the daemon with 10,000 tools indexed (about 50 MiB live, 10 MiB of stacks and metadata) near its 150 MB
	// RSS target, with its 30 MiB of binary pages and the embedded store's own caches besides, and is twice what a
	// daemon with tens of servers needs at GOGC=400.
	defaultBudget = 96 << 20
	// defaultHeadroom is the least room the heap gets to grow between two collections: below it the collector
	// would run after every few MiB allocated, as under a fixed limit near the live heap.
	defaultHeadroom = 24 << 20
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
	return p
}

// memSample is what the policy reads of the runtime after a collection.
type memSample struct {
	// live is the heap the collection found live (/gc/heap/live:bytes).
	live uint64
	// nonHeap is what the soft limit counts besides heap spans: goroutine stacks and the runtime's metadata.
	nonHeap uint64
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
	stopped atomic.Bool
}

func newMemoryPolicy(headroom, budget int64, setLimit func(int64) int64, read func() memSample) *memoryPolicy {
	return &memoryPolicy{headroom: headroom, budget: budget, setLimit: setLimit, read: read}
}

// limitFor is the soft limit for a sample: the budget, or the live heap, the runtime's other memory and the
// headroom when they need more. Past four times the headroom of live heap the headroom is a quarter of the live
// heap instead (GOGC=25), so that a very large daemon does not collect after every few percent of growth.
func (p *memoryPolicy) limitFor(s memSample) int64 {
	const most = 1 << 60
	live, other := int64(min(s.live, most)), int64(min(s.nonHeap, most))
	return max(live+other+max(p.headroom, live/4), p.budget)
}

// update reads the runtime and moves the limit.
func (p *memoryPolicy) update() {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.limitFor(p.read())
	if l != p.limit {
		p.setLimit(l)
		p.limit = l
	}
	p.updates++
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

// stop ends following collections (the limit stays where it is).
func (p *memoryPolicy) stop() { p.stopped.Store(true) }

// state returns the limit last set and how many times the policy read the runtime.
func (p *memoryPolicy) state() (limit, updates int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.limit, p.updates
}

// readMemSample reads the live heap and the runtime's memory classes (runtime/metrics).
func readMemSample() memSample {
	s := [...]metrics.Sample{
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
	live, total := v[0], v[1]
	heap := v[2] + v[3] + v[4] + v[5]
	if heap > total {
		return memSample{live: live}
	}
	return memSample{live: live, nonHeap: total - heap}
}
