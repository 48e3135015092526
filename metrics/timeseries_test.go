package metrics

import (
	"sync"
	"testing"
	"time"
	"unsafe"
)

// fakeClock is a settable clock for the recorder.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type call struct {
	at      time.Duration // after the start
	outcome string
	took    time.Duration
}

func TestRecorderSeries(t *testing.T) {
	base := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC) // on a step boundary
	tests := []struct {
		name  string
		calls []call
		now   time.Duration // when the series is read, after the start
		// back is the point checked, counted from the last (0: the current step).
		back                              int
		calls_, errors, toolErrors, cance int
		rate                              float64
		p50, p95                          time.Duration
		latency                           bool
		total                             int // calls in the whole series, when not calls_
	}{
		{name: "one step of ok calls", calls: []call{{0, OutcomeOK, 3 * time.Millisecond}, {time.Second, OutcomeOK, 3 * time.Millisecond}},
			now: 5 * time.Second, back: 1, calls_: 2, rate: 0.4,
			// both in (2.5 ms, 5 ms]: interpolated as histogram_quantile does
			p50: 3750 * time.Microsecond, p95: 4875 * time.Microsecond, latency: true},
		{name: "errors and tool errors", calls: []call{{0, OutcomeFailed, 0}, {0, OutcomeTimeout, 0}, {0, OutcomeUnavailable, 0},
			{0, OutcomeToolError, 80 * time.Millisecond}, {0, OutcomeCancelled, 0}},
			now: 5 * time.Second, back: 1, calls_: 5, errors: 3, toolErrors: 1, cance: 1, rate: 1,
			p50: 75*time.Millisecond + 12500*time.Microsecond, p95: 75*time.Millisecond + 23750*time.Microsecond, latency: true},
		{name: "current step is rated over its elapsed part", calls: []call{{2 * time.Second, OutcomeOK, time.Minute * 2}},
			now: 4 * time.Second, back: 0, calls_: 1, rate: 0.25, p50: time.Minute, p95: time.Minute, latency: true},
		{name: "a step without calls", calls: []call{{0, OutcomeOK, time.Millisecond}}, now: 10 * time.Second, back: 0, total: 1},
		{name: "older than the window is gone", calls: []call{{0, OutcomeOK, time.Millisecond}}, now: 10*time.Minute + time.Second, back: 119},
		{name: "unknown outcome is not counted", calls: []call{{0, "bogus", time.Millisecond}}, now: 5 * time.Second, back: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := &fakeClock{t: base}
			r := NewRecorder(0, 0, clk.now)
			for _, c := range tc.calls {
				clk.t = base.Add(c.at)
				r.Record("s", c.outcome, c.took)
			}
			clk.t = base.Add(tc.now)
			pts := r.Series("s")
			if len(pts) != SeriesPoints {
				t.Fatalf("%d points, want %d", len(pts), SeriesPoints)
			}
			if !pts[len(pts)-1].Start.Equal(clk.t.Truncate(SeriesStep)) {
				t.Fatalf("last point starts at %v, want %v", pts[len(pts)-1].Start, clk.t.Truncate(SeriesStep))
			}
			p := pts[len(pts)-1-tc.back]
			if p.Calls != tc.calls_ || p.Errors != tc.errors || p.ToolErrors != tc.toolErrors || p.Cancelled != tc.cance {
				t.Errorf("calls/errors/tool errors/cancelled = %d/%d/%d/%d, want %d/%d/%d/%d", p.Calls, p.Errors, p.ToolErrors, p.Cancelled,
					tc.calls_, tc.errors, tc.toolErrors, tc.cance)
			}
			if got := p.CallsPerSecond(); got != tc.rate {
				t.Errorf("calls/s = %v, want %v", got, tc.rate)
			}
			if p.HasLatency != tc.latency || absDur(p.P50-tc.p50) > time.Microsecond || absDur(p.P95-tc.p95) > time.Microsecond {
				t.Errorf("latency %v p50 %v p95 %v, want %v %v %v", p.HasLatency, p.P50, p.P95, tc.latency, tc.p50, tc.p95)
			}
			total := 0
			for _, q := range pts {
				total += q.Calls
			}
			if want := max(tc.total, tc.calls_); total != want {
				t.Errorf("the series holds %d calls, want %d", total, want)
			}
		})
	}
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

func TestRecorderForgetAndMetricsCall(t *testing.T) {
	m := New(nil)
	m.Call("a", OutcomeOK, time.Millisecond)
	m.Call("b", OutcomeFailed, 0)
	if got := m.Series.Servers(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("servers %v, want [a b]", got)
	}
	pts := m.Series.Series("a")
	if last := pts[len(pts)-1]; last.Calls != 1 || last.Outcomes[OutcomeOK] != 1 {
		t.Fatalf("the call is not in the current step: %+v", last)
	}
	m.ForgetServer("a")
	if got := m.Series.Servers(); len(got) != 1 || got[0] != "b" {
		t.Fatalf("servers after forgetting a: %v", got)
	}
	var nilRec *Recorder
	nilRec.Record("x", OutcomeOK, 0)
	if nilRec.Series("x") != nil || nilRec.Servers() != nil {
		t.Fatal("a nil recorder returned something")
	}
}

// TestRecorderMemoryBound: the README states about 14 KiB per server (120 slots); keep that true.
func TestRecorderMemoryBound(t *testing.T) {
	if size := unsafe.Sizeof(slot{}) * SeriesPoints; size > 15*1024 {
		t.Fatalf("a server's ring takes %d bytes, more than the 15 KiB the README promises", size)
	}
}

func TestRecorderConcurrent(t *testing.T) {
	r := NewRecorder(time.Millisecond, 8, nil)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				r.Record([]string{"a", "b"}[i%2], OutcomeOK, time.Millisecond)
				_ = r.Series("a")
			}
		}()
	}
	wg.Wait()
	if len(r.Series("b")) != 8 {
		t.Fatal("wrong number of points")
	}
}

// BenchmarkRecorderRecord is the cost the recorder adds to every call (Metrics.Call).
func BenchmarkRecorderRecord(b *testing.B) {
	r := NewRecorder(0, 0, nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Record("server", OutcomeOK, 3*time.Millisecond)
		}
	})
}
