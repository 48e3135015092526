// Package loadgen drives real MCP processes for the benchmarks: it starts the echo backend and the daemon as
// processes of their own, makes one tool call per Caller invocation over REST or an MCP session, and runs closed-
// and open-loop loads that record the latency of every successful call. The routing benchmarks of cmd/aggregator
// and the side-by-side comparison with peer gateways (cmd/peer-compare) share it, so both measure the same way.
package loadgen

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Caller makes one tool call and reports whether it succeeded.
type Caller func(ctx context.Context) error

// Result is one measurement: the latency of every successful call, the failures and the wall time.
type Result struct {
	Lat     []time.Duration
	Errs    int
	Elapsed time.Duration
	LastErr error
}

// Rate is the successful calls per second of wall time.
func (r Result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(len(r.Lat)) / r.Elapsed.Seconds()
}

// Merge adds another measurement of the same load: latencies, failures and wall time add up.
func (r *Result) Merge(o Result) {
	r.Lat = append(r.Lat, o.Lat...)
	r.Errs += o.Errs
	r.Elapsed += o.Elapsed
	if o.LastErr != nil {
		r.LastErr = o.LastErr
	}
}

// Percentile is the p-quantile (0..1) of ds by the nearest-rank-below rule; ds is not modified. It is 0 for no
// durations.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

// Closed runs workers callers back to back until maxCalls calls were started or limit passed; each call gets
// callTimeout, and a call that takes longer counts as a failure.
func Closed(call Caller, workers, maxCalls int, limit, callTimeout time.Duration) Result {
	var started atomic.Int64
	var mu sync.Mutex
	var res Result
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(limit)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, maxCalls/workers+1)
			errs := 0
			var lastErr error
			for started.Add(1) <= int64(maxCalls) && time.Now().Before(deadline) {
				ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
				t := time.Now()
				err := call(ctx)
				d := time.Since(t)
				cancel()
				if err != nil {
					errs, lastErr = errs+1, err
					continue
				}
				lat = append(lat, d)
			}
			mu.Lock()
			res.Lat = append(res.Lat, lat...)
			res.Errs += errs
			if lastErr != nil {
				res.LastErr = lastErr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	return res
}

// Open starts rate calls a second for d on a fixed schedule, each in its own goroutine, whether or not earlier
// calls completed. Latency runs from the scheduled start, so a stall delays every call scheduled during it (no
// coordinated omission). The time.Sleep overshoot of the scheduler (tens of microseconds) is part of every call
// on every path.
func Open(call Caller, rate int, d, callTimeout time.Duration) Result {
	n := int(float64(rate) * d.Seconds())
	interval := time.Second / time.Duration(rate)
	lat := make([]time.Duration, n)
	ok := make([]bool, n)
	var mu sync.Mutex // guards errs and lastErr
	errs := 0
	var lastErr error
	var wg sync.WaitGroup
	start := time.Now().Add(time.Millisecond)
	for i := 0; i < n; i++ {
		at := start.Add(time.Duration(i) * interval)
		if wait := time.Until(at); wait > 0 {
			time.Sleep(wait)
		}
		wg.Add(1)
		go func(i int, at time.Time) {
			defer wg.Done()
			ctx, cancel := context.WithDeadline(context.Background(), at.Add(callTimeout))
			defer cancel()
			if err := call(ctx); err != nil {
				mu.Lock()
				errs, lastErr = errs+1, err
				mu.Unlock()
				return
			}
			lat[i], ok[i] = time.Since(at), true
		}(i, at)
	}
	wg.Wait()
	res := Result{Elapsed: time.Since(start), Errs: errs, LastErr: lastErr}
	for i := range lat {
		if ok[i] {
			res.Lat = append(res.Lat, lat[i])
		}
	}
	return res
}
