package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// The daemon's default garbage-collection policy. GOGC=400 makes the collector run when the heap has grown to five
// times what the last collection left live: with the small live heaps of the call path (a few MiB per server) that
// saves the go-sdk's per-message garbage most of its collection cost (about +15 % routed throughput,
// BENCHMARKS.md). Five times a large live heap is too much, though: a daemon with 10,000 tools indexed holds about
// 50 MiB live, and a fixed soft limit of 256 MiB let its heap fill to the limit whatever was live (about 280 MiB
// RSS, BENCHMARKS.md "Memory, fifth pass"), while a fixed low limit made the collector run nearly continuously
// once the live heap neared it. The memory policy therefore moves the soft limit after every collection to what
// the runtime then holds plus a bounded headroom: small heaps keep GOGC=400's room (the limit is above five times
// their live heap), a large heap grows by at most the headroom before the next collection, and the limit follows the
// live heap up and down, so no live heap is too large for it (a fixed limit made the collector thrash).
const (
	// defaultGOGC is the heap growth, in percent of the live heap, that starts a collection.
	defaultGOGC = 400
	// defaultHeadroom is how much the memory the runtime holds may grow between two collections at most. 48 MiB is
	// about four times the live heap of a daemon with tens of servers (so GOGC=400 is what decides there) and keeps
	// a daemon with 10,000 tools near 150 MB of RSS.
	defaultHeadroom = 48 << 20
	// defaultLimitFloor is the least the soft limit is set to, whatever the runtime holds (at start it holds
	// little).
	defaultLimitFloor = 64 << 20
)

// memoryDefaults applies the daemon's garbage-collection defaults unless the environment sets them: GOGC=400 when
// GOGC is unset, and when GOMEMLIMIT is unset a soft memory limit that a memoryPolicy keeps at what the runtime
// holds after each collection plus defaultHeadroom. It returns the policy it started (nil when GOMEMLIMIT is set:
// the operator's limit stays as it is).
func memoryDefaults(lookup func(string) (string, bool)) *memoryPolicy {
	if _, set := lookup("GOGC"); !set {
		debug.SetGCPercent(defaultGOGC)
	}
	if _, set := lookup("GOMEMLIMIT"); set {
		return nil
	}
	p := newMemoryPolicy(defaultHeadroom, defaultLimitFloor, debug.SetMemoryLimit, readMemSample)
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

// memoryPolicy sets the soft memory limit after every garbage collection to the live heap and the runtime's other
// memory plus a headroom (never below a floor). The headroom is what the heap may allocate before the next
// collection: new objects first fill the free slots of the spans in use, so the heap's fragmentation does not eat
// it. It is started once per process; tests make their own with fake functions.
type memoryPolicy struct {
	headroom, floor int64
	setLimit        func(int64) int64
	read            func() memSample

	mu      sync.Mutex // cleanups may run concurrently
	limit   int64      // the limit last set (0: none yet)
	updates int64
	stopped atomic.Bool
}

func newMemoryPolicy(headroom, floor int64, setLimit func(int64) int64, read func() memSample) *memoryPolicy {
	return &memoryPolicy{headroom: headroom, floor: floor, setLimit: setLimit, read: read}
}

// limitFor is the soft limit for a sample: live heap, other runtime memory and headroom, at least the floor. Past
// four times the headroom of live heap the headroom is a quarter of the live heap instead (GOGC=25), so that a
// very large daemon does not collect after every few percent of growth.
func (p *memoryPolicy) limitFor(s memSample) int64 {
	const most = 1 << 60
	live, other := int64(min(s.live, most)), int64(min(s.nonHeap, most))
	return max(live+other+max(p.headroom, live/4), p.floor)
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
