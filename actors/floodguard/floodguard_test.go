package floodguard

import (
	"testing"
	"time"
)

// TestRunsCoalesce: a flood of triggers gives one run at a time, at most one pending, spaced by the interval; a
// forced trigger does not wait for the interval but still waits for the running run.
func TestRunsCoalesce(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type step struct {
		op     string // trigger, force, done, changed (done, having stored a new listing), due, forget
		ms     int
		seq    uint64
		expect Next
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"idle key starts at once", []step{{op: "trigger", ms: 0, expect: Next{Run: true}}}},
		{"flood while running: one pending, after the interval", []step{
			{op: "trigger", ms: 0, expect: Next{Run: true}},
			{op: "trigger", ms: 1},
			{op: "trigger", ms: 2},
			{op: "done", ms: 10, expect: Next{After: 990 * time.Millisecond, Seq: 1}},
			{op: "trigger", ms: 20},
			{op: "due", ms: 1000, seq: 1, expect: Next{Run: true}},
			{op: "done", ms: 1010},
		}},
		{"trigger soon after a run waits", []step{
			{op: "trigger", ms: 0, expect: Next{Run: true}},
			{op: "done", ms: 5},
			{op: "trigger", ms: 100, expect: Next{After: 900 * time.Millisecond, Seq: 1}},
			{op: "trigger", ms: 200},
			{op: "due", ms: 1000, seq: 1, expect: Next{Run: true}},
		}},
		{"forced skips the wait, a stale timer does nothing", []step{
			{op: "trigger", ms: 0, expect: Next{Run: true}},
			{op: "done", ms: 5},
			{op: "trigger", ms: 100, expect: Next{After: 900 * time.Millisecond, Seq: 1}},
			{op: "force", ms: 200, expect: Next{Run: true, Forced: true}},
			{op: "due", ms: 1000, seq: 1},
			{op: "done", ms: 1100},
		}},
		{"a run that found a change lets the next start at once", []step{
			{op: "trigger", ms: 0, expect: Next{Run: true}},
			{op: "trigger", ms: 1},
			{op: "changed", ms: 10, expect: Next{Run: true}},
			{op: "done", ms: 20},
			{op: "trigger", ms: 30, expect: Next{After: 980 * time.Millisecond, Seq: 1}},
		}},
		{"a key forgotten during its run is dropped when the run ends", []step{
			{op: "trigger", ms: 0, expect: Next{Run: true}},
			{op: "trigger", ms: 1},
			{op: "forget", ms: 2},
			{op: "done", ms: 3},
			{op: "trigger", ms: 4, expect: Next{Run: true}},
		}},
		{"forced while running waits for the run", []step{
			{op: "trigger", ms: 0, expect: Next{Run: true}},
			{op: "force", ms: 1},
			{op: "trigger", ms: 2},
			{op: "done", ms: 3, expect: Next{Run: true, Forced: true}},
			{op: "done", ms: 4},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRuns(time.Second)
			for i, s := range tt.steps {
				var got Next
				switch s.op {
				case "trigger":
					got = r.Trigger("k", false, at(s.ms))
				case "force":
					got = r.Trigger("k", true, at(s.ms))
				case "done":
					got = r.Done("k", false, at(s.ms))
				case "changed":
					got = r.Done("k", true, at(s.ms))
				case "due":
					got = r.Due("k", s.seq, at(s.ms))
				case "forget":
					r.Forget("k")
				}
				if got != s.expect {
					t.Fatalf("step %d (%s at %d ms): got %+v, want %+v", i, s.op, s.ms, got, s.expect)
				}
			}
		})
	}
}

// TestLimiterDropsBeyondTheRate: a burst beyond the bucket is dropped and counted per kind; kinds have their own
// buckets; a rate of 0 is no limit.
func TestLimiterDropsBeyondTheRate(t *testing.T) {
	dropped := map[string]int{}
	l := NewLimiter(10, func(kind string) { dropped[kind]++ })
	passed := 0
	for range 1000 {
		if l.Allow(KindLog) {
			passed++
		}
	}
	if passed < 10 || passed > 12 || dropped[KindLog] != 1000-passed {
		t.Fatalf("1000 log messages at 10/s: %d passed, %d dropped", passed, dropped[KindLog])
	}
	if !l.Allow(KindProgress) || dropped[KindProgress] != 0 {
		t.Fatalf("progress shares the log bucket: dropped %v", dropped)
	}
	var none *Limiter = NewLimiter(0, nil)
	for range 1000 {
		if !none.Allow(KindLog) {
			t.Fatal("rate 0 dropped a message")
		}
	}
}

// TestLatchAndListings: a latch passes one notification until cleared; a listing is the same only under the same
// epoch and items.
func TestLatchAndListings(t *testing.T) {
	var l Latch
	if !l.Set() || l.Set() {
		t.Fatal("latch: want the first Set to pass and the second to be merged")
	}
	l.Clear()
	if !l.Set() {
		t.Fatal("latch: want a Set after Clear to pass")
	}
	var ls Listings
	a := Sum([][]byte{[]byte("ab"), []byte("c")})
	if a == Sum([][]byte{[]byte("a"), []byte("bc")}) || a == Sum([][]byte{[]byte("ab")}, [][]byte{[]byte("c")}) {
		t.Fatal("fingerprints of different listings collide")
	}
	if ls.Same("k", 1, a) {
		t.Fatal("an empty Listings knows k")
	}
	ls.Remember("k", 1, a)
	if !ls.Same("k", 1, a) || ls.Same("k", 2, a) || ls.Same("k", 1, Sum(nil)) {
		t.Fatal("Same must hold only for the same epoch and fingerprint")
	}
	ls.Forget("k")
	if ls.Same("k", 1, a) {
		t.Fatal("Forget kept k")
	}
}

// TestPacerWaitsBeyondTheRate: the burst passes at once, the next notification waits for its token, and a stop
// ends the wait.
func TestPacerWaitsBeyondTheRate(t *testing.T) {
	p := NewPacer(10)
	never := make(chan struct{})
	start := time.Now()
	for range 10 {
		if !p.Wait(never) {
			t.Fatal("Wait within the burst returned false")
		}
	}
	if !p.Wait(never) || time.Since(start) < 50*time.Millisecond {
		t.Fatalf("the 11th notification at 10/s passed after %s; want it to wait about 100 ms", time.Since(start))
	}
	stop := make(chan struct{})
	close(stop)
	p = NewPacer(0.001)
	p.Wait(never) // the burst of one
	if p.Wait(stop) {
		t.Fatal("Wait returned true although stop was closed")
	}
	if (*Pacer)(nil).Wait(stop) != true {
		t.Fatal("a nil Pacer must never wait")
	}
}
