package main

import (
	"math"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"time"
)

func TestMemoryPolicyLimit(t *testing.T) {
	const mib = 1 << 20
	p := newMemoryPolicy(24*mib, 96*mib, nil, nil)
	for _, c := range []struct {
		name          string
		live, nonHeap uint64
		want          int64
	}{
		{"start: the budget", 2 * mib, 4 * mib, 96 * mib},
		{"10,000 tools: still the budget", 50 * mib, 10 * mib, 96 * mib},
		{"more live: live + other + headroom", 70 * mib, 11 * mib, (70 + 11 + 24) * mib},
		{"past 4x the headroom live: a quarter of it", 400 * mib, 20 * mib, (400 + 20 + 100) * mib},
		{"absurd readings do not overflow", math.MaxUint64, math.MaxUint64, 1<<60 + 1<<60 + 1<<58},
	} {
		if got := p.limitFor(memSample{live: c.live, nonHeap: c.nonHeap}, memSample{}); got != c.want {
			t.Errorf("%s: limit %d MiB, want %d MiB", c.name, got/mib, c.want/mib)
		}
	}
	// The allocation rate since the sample before: at 400 MiB/s the headroom is what 250 ms allocate; faster,
	// at most 128 MiB; never more than the live heap; slow, the budget again.
	t0 := time.Now()
	for _, c := range []struct {
		name   string
		live   uint64
		allocs uint64
		after  time.Duration
		want   int64
	}{
		{"400 MiB/s", 150 * mib, 1400 * mib, time.Second, (150 + 10 + 100) * mib},
		{"4 GiB/s: capped", 150 * mib, 5000 * mib, time.Second, (150 + 10 + 128) * mib},
		{"400 MiB/s, 50 MiB live: as much again as is live", 50 * mib, 1400 * mib, time.Second, (50 + 10 + 50) * mib},
		{"300 MiB/s, 18 MiB live (50 stdio servers connecting): the budget", 18 * mib, 1300 * mib, time.Second, 96 * mib},
		{"10 MiB/s: the budget", 50 * mib, 1010 * mib, time.Second, 96 * mib},
	} {
		prev := memSample{live: c.live, nonHeap: 10 * mib, allocs: 1000 * mib, at: t0}
		s := memSample{live: c.live, nonHeap: 10 * mib, allocs: c.allocs, at: t0.Add(c.after)}
		if got := p.limitFor(s, prev); got != c.want {
			t.Errorf("%s: limit %d MiB, want %d MiB", c.name, got/mib, c.want/mib)
		}
	}
}

// TestMemoryPolicyFollowsCollections checks that the policy reads the runtime after collections and sets the
// limit it computes from what it read, and that stop ends it.
func TestMemoryPolicyFollowsCollections(t *testing.T) {
	var mu sync.Mutex
	var set []int64
	var samples []memSample
	live := uint64(100 << 20)
	p := newMemoryPolicy(24<<20, 96<<20, func(l int64) int64 {
		mu.Lock()
		defer mu.Unlock()
		set = append(set, l)
		return 0
	}, func() memSample {
		mu.Lock()
		defer mu.Unlock()
		live += 1 << 20 // a different reading each time, so that each update sets a new limit
		s := memSample{live: live, nonHeap: 10 << 20}
		samples = append(samples, s)
		return s
	})
	p.start()
	defer p.stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		if _, n := p.state(); n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			_, n := p.state()
			t.Fatalf("the policy ran %d times in 10 s of collections, want 3", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Each limit set is the limit for the reading it was computed from, and the policy's state is the last one.
	// Stopped first, so that no collection runs it again between the reads (a cleanup already queued may still
	// run once: wait for it).
	p.stop()
	time.Sleep(50 * time.Millisecond)
	limit, _ := p.state()
	mu.Lock()
	last, lastSample := set[len(set)-1], samples[len(samples)-1]
	mu.Unlock()
	if last != p.limitFor(lastSample, memSample{}) {
		t.Fatalf("the limit set %d is not the limit %d for the last reading", last, p.limitFor(lastSample, memSample{}))
	}
	if limit != last {
		t.Fatalf("the policy's limit %d, last set %d", limit, last)
	}
	p.stop()
	_, before := p.state()
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if _, after := p.state(); after > before+1 { // a cleanup already queued may still run once
		t.Fatalf("the policy ran %d more times after stop", after-before)
	}
}

func TestReadMemSample(t *testing.T) {
	runtime.GC()
	s := readMemSample()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if s.live == 0 || s.live > ms.HeapSys {
		t.Fatalf("live heap %d, heap mapped %d", s.live, ms.HeapSys)
	}
	if s.nonHeap == 0 || s.nonHeap > ms.Sys {
		t.Fatalf("non-heap memory %d, all runtime memory %d", s.nonHeap, ms.Sys)
	}
}

// TestMemoryDefaultsLeaveTheEnvironmentAlone checks that GOMEMLIMIT in the environment turns the policy off and
// GOGC keeps the collector's percentage.
func TestMemoryDefaultsLeaveTheEnvironmentAlone(t *testing.T) {
	gogc := debug.SetGCPercent(100)
	limit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(gogc)
		debug.SetMemoryLimit(limit)
	})
	env := func(vars map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	if p := memoryDefaults(env(map[string]string{"GOGC": "100", "GOMEMLIMIT": "1GiB"})); p != nil {
		p.stop()
		t.Fatal("GOMEMLIMIT is set, yet a memory policy started")
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC is set to 100, yet the collector's percentage became %d", got)
	}
	p := memoryDefaults(env(map[string]string{"GOGC": "100"}))
	if p == nil {
		t.Fatal("GOMEMLIMIT is unset, yet no memory policy started")
	}
	p.stop()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC is set to 100, yet the collector's percentage became %d", got)
	}
	if l, _ := p.state(); l < defaultBudget || debug.SetMemoryLimit(-1) != l {
		t.Fatalf("the policy's limit is %d, the runtime's %d", l, debug.SetMemoryLimit(-1))
	}
	p = memoryDefaults(env(nil))
	p.stop()
	if got := debug.SetGCPercent(100); got != defaultGOGC {
		t.Fatalf("GOGC unset: the collector's percentage is %d, want %d", got, defaultGOGC)
	}
}

// TestMemoryPolicyRelaxesAfterABurst checks that a limit raised for a burst of allocation comes back to the budget
// once the rate since the last collection is low, without waiting for another collection, and that relax never
// raises it.
func TestMemoryPolicyRelaxesAfterABurst(t *testing.T) {
	const mib = 1 << 20
	var mu sync.Mutex
	now := time.Now()
	sample := memSample{live: 100 * mib, nonHeap: 10 * mib, allocs: 1000 * mib, at: now}
	var set []int64
	p := newMemoryPolicy(24*mib, 160*mib, func(l int64) int64 { set = append(set, l); return 0 },
		func() memSample { mu.Lock(); defer mu.Unlock(); return sample })
	advance := func(allocs uint64, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		sample.allocs += allocs
		sample.at = sample.at.Add(d)
	}
	p.update() // a collection
	advance(400*mib, time.Second)
	p.update() // the next one, after allocating 400 MiB/s
	if l, _ := p.state(); l != (100+10+100)*mib {
		t.Fatalf("limit after the burst %d MiB, want %d", l/mib, 100+10+100)
	}
	advance(40*mib, 100*time.Millisecond)
	p.relax() // still 400 MiB/s since the last collection: the limit stays
	if l, _ := p.state(); l != (100+10+100)*mib {
		t.Fatalf("limit during the burst %d MiB, want %d", l/mib, 100+10+100)
	}
	advance(0, 10*time.Second)
	p.relax()
	if l, _ := p.state(); l != 160*mib {
		t.Fatalf("limit 10 s after the burst %d MiB, want the budget", l/mib)
	}
	for _, l := range set[1:] {
		if l > set[0] && l != (100+10+100)*mib {
			t.Fatalf("relax raised the limit: %v", set)
		}
	}
	p.stop()
}
