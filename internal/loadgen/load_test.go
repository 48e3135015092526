package loadgen

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(n ...int) []time.Duration {
		out := make([]time.Duration, len(n))
		for i, v := range n {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		name string
		ds   []time.Duration
		p    float64
		want time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one", ms(7), 0.99, 7 * time.Millisecond},
		{"median of unsorted", ms(5, 1, 3, 2, 4), 0.5, 3 * time.Millisecond},
		{"p99 of 100 is the 99th", ms(seq(100)...), 0.99, 99 * time.Millisecond},
		{"max", ms(5, 1, 3), 1, 5 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := append([]time.Duration(nil), tc.ds...)
			if got := Percentile(tc.ds, tc.p); got != tc.want {
				t.Fatalf("Percentile(%v, %v) = %v, want %v", tc.ds, tc.p, got, tc.want)
			}
			for i := range before {
				if before[i] != tc.ds[i] {
					t.Fatalf("Percentile reordered its input: %v", tc.ds)
				}
			}
		})
	}
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

// TestClosedCountsEveryCallOnce: maxCalls bounds the calls across all workers, each success has a latency and
// each failure is counted with the last error kept.
func TestClosedCountsEveryCallOnce(t *testing.T) {
	var n atomic.Int64
	boom := errors.New("boom")
	call := func(context.Context) error {
		if n.Add(1)%4 == 0 {
			return boom
		}
		return nil
	}
	res := Closed(call, 8, 1000, time.Minute, time.Second)
	if got := n.Load(); got != 1000 {
		t.Fatalf("%d calls made, want 1000", got)
	}
	if len(res.Lat) != 750 || res.Errs != 250 || !errors.Is(res.LastErr, boom) {
		t.Fatalf("got %d successes, %d failures (last %v), want 750, 250, boom", len(res.Lat), res.Errs, res.LastErr)
	}
	if res.Elapsed <= 0 || res.Rate() <= 0 {
		t.Fatalf("elapsed %v, rate %v: want both positive", res.Elapsed, res.Rate())
	}
	var merged Result
	merged.Merge(res)
	merged.Merge(res)
	if len(merged.Lat) != 1500 || merged.Errs != 500 || merged.Elapsed != 2*res.Elapsed {
		t.Fatalf("merged %d/%d/%v, want 1500/500/%v", len(merged.Lat), merged.Errs, merged.Elapsed, 2*res.Elapsed)
	}
}

// TestClosedStopsAtTheTimeLimit: with an unreachable call bound, the time limit ends the load.
func TestClosedStopsAtTheTimeLimit(t *testing.T) {
	call := func(context.Context) error { time.Sleep(time.Millisecond); return nil }
	start := time.Now()
	res := Closed(call, 4, 1_000_000, 100*time.Millisecond, time.Second)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("took %v, want about 100ms", took)
	}
	if len(res.Lat) == 0 || len(res.Lat) >= 1_000_000 {
		t.Fatalf("%d calls, want some and far fewer than the bound", len(res.Lat))
	}
}
