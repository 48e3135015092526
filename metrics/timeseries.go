package metrics

import (
	"sort"
	"sync"
	"time"
)

// The console's live figures (issue 29): per server, the calls of the last minutes in fixed steps, from the same
// observations as mcp_aggregator_tool_calls_total and mcp_aggregator_execution_duration_seconds (Metrics.Call),
// so the console needs no Prometheus or Grafana to draw calls/s, p50/p95 latency and errors.
//
// Memory is fixed per server: a ring of SeriesPoints slots, each holding the call counts by outcome and a latency
// histogram over the Prometheus buckets (latencyBuckets), about 120 bytes a slot, so about 14 KiB a server with the
// defaults (10 minutes at 5 s). The servers are the ones with a series in Metrics (at most
// MCP_AGGREGATOR_MAX_SERVERS; ForgetServer drops a removed or renamed server's ring).

// Defaults of the recorder: 120 steps of 5 s, the last 10 minutes.
const (
	SeriesStep   = 5 * time.Second
	SeriesPoints = 120
)

// outcomeIndex numbers the outcomes of a call within a slot.
var outcomeNames = [...]string{OutcomeOK, OutcomeToolError, OutcomeFailed, OutcomeUnavailable, OutcomeTimeout, OutcomeCancelled, OutcomeRateLimited}

func outcomeIndex(outcome string) int {
	for i, o := range outcomeNames {
		if o == outcome {
			return i
		}
	}
	return -1
}

// slot is one step of one server's ring.
type slot struct {
	start    int64 // the step's start, in steps since the epoch; 0: never written
	outcomes [len(outcomeNames)]uint32
	latency  [len(latencyBuckets) + 1]uint32 // by latencyBuckets, the last one above them all
}

// ring is one server's slots; mu guards them.
type ring struct {
	mu    sync.Mutex
	slots []slot
}

// Recorder keeps the recent calls of every server in fixed memory. A nil *Recorder records nothing.
type Recorder struct {
	step   time.Duration
	points int
	now    func() time.Time

	mu    sync.RWMutex
	rings map[string]*ring
}

// NewRecorder keeps points steps of step for each server (SeriesStep and SeriesPoints when zero); now is the clock
// (time.Now when nil).
func NewRecorder(step time.Duration, points int, now func() time.Time) *Recorder {
	if step <= 0 {
		step = SeriesStep
	}
	if points <= 0 {
		points = SeriesPoints
	}
	if now == nil {
		now = time.Now
	}
	return &Recorder{step: step, points: points, now: now, rings: map[string]*ring{}}
}

// Step is the width of one point.
func (r *Recorder) Step() time.Duration { return r.step }

// Points is how many points a series holds.
func (r *Recorder) Points() int { return r.points }

// Record adds the end of one call on server: its outcome and, for the calls the backend answered (ok and
// tool_error, as mcp_aggregator_execution_duration_seconds), how long it took.
func (r *Recorder) Record(server, outcome string, took time.Duration) {
	if r == nil || server == "" {
		return
	}
	oi := outcomeIndex(outcome)
	if oi < 0 {
		return
	}
	rg := r.ring(server)
	n := r.now().UnixNano() / int64(r.step)
	rg.mu.Lock()
	defer rg.mu.Unlock()
	s := &rg.slots[n%int64(len(rg.slots))]
	if s.start != n {
		*s = slot{start: n}
	}
	s.outcomes[oi]++
	if outcome == OutcomeOK || outcome == OutcomeToolError {
		secs := took.Seconds()
		i := sort.SearchFloat64s(latencyBuckets[:], secs) // the first bucket whose bound is >= secs
		s.latency[i]++
	}
}

func (r *Recorder) ring(server string) *ring {
	r.mu.RLock()
	rg := r.rings[server]
	r.mu.RUnlock()
	if rg != nil {
		return rg
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if rg = r.rings[server]; rg == nil {
		rg = &ring{slots: make([]slot, r.points)}
		r.rings[server] = rg
	}
	return rg
}

// Forget drops a server's ring.
func (r *Recorder) Forget(server string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.rings, server)
}

// Servers lists the servers with a ring, by name.
func (r *Recorder) Servers() []string {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.rings))
	for name := range r.rings {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// Point is one step of a server's series.
type Point struct {
	// Start is when the step began; Seconds how much of it has passed (Step, or less for the current step).
	Start   time.Time
	Seconds float64
	// Calls counts every call that ended in the step; Errors those that failed (failed, unavailable, timeout);
	// ToolErrors the results with isError; Cancelled those whose caller left.
	Calls, Errors, ToolErrors, Cancelled int
	// Outcomes counts the calls by outcome (only the outcomes seen).
	Outcomes map[string]int
	// P50 and P95 are the latency quantiles of the answered calls, estimated from the histogram as Prometheus'
	// histogram_quantile does; HasLatency is false when no call was answered in the step.
	P50, P95   time.Duration
	HasLatency bool
}

// CallsPerSecond is the call rate over the step (over the part that has passed, for the current one).
func (p Point) CallsPerSecond() float64 {
	if p.Seconds <= 0 {
		return 0
	}
	return float64(p.Calls) / p.Seconds
}

// Series returns a server's last Points steps, oldest first, ending with the current (partial) step; steps without
// calls are there with zeros. A server without a ring gets the same steps, all zero.
func (r *Recorder) Series(server string) []Point {
	if r == nil {
		return nil
	}
	now := r.now()
	cur := now.UnixNano() / int64(r.step)
	r.mu.RLock()
	rg := r.rings[server]
	r.mu.RUnlock()
	var slots []slot
	if rg != nil {
		rg.mu.Lock()
		slots = append([]slot(nil), rg.slots...)
		rg.mu.Unlock()
	}
	out := make([]Point, 0, r.points)
	for n := cur - int64(r.points) + 1; n <= cur; n++ {
		start := time.Unix(0, n*int64(r.step))
		p := Point{Start: start, Seconds: r.step.Seconds()}
		if n == cur {
			p.Seconds = max(now.Sub(start).Seconds(), 1) // at least a second: a rate over a few ms says nothing
		}
		if len(slots) > 0 && n >= 0 {
			if s := slots[n%int64(len(slots))]; s.start == n {
				fill(&p, &s)
			}
		}
		out = append(out, p)
	}
	return out
}

func fill(p *Point, s *slot) {
	for i, c := range s.outcomes {
		if c == 0 {
			continue
		}
		if p.Outcomes == nil {
			p.Outcomes = map[string]int{}
		}
		p.Outcomes[outcomeNames[i]] = int(c)
		p.Calls += int(c)
		switch outcomeNames[i] {
		case OutcomeFailed, OutcomeUnavailable, OutcomeTimeout:
			p.Errors += int(c)
		case OutcomeToolError:
			p.ToolErrors += int(c)
		case OutcomeCancelled:
			p.Cancelled += int(c)
		}
	}
	var total uint32
	for _, c := range s.latency {
		total += c
	}
	if total == 0 {
		return
	}
	p.HasLatency = true
	p.P50 = quantile(0.5, s.latency[:], total)
	p.P95 = quantile(0.95, s.latency[:], total)
}

// quantile estimates the q-quantile from the histogram counts by linear interpolation within the bucket that holds
// it (as Prometheus' histogram_quantile): between the bucket's lower bound (0 for the first) and its upper bound;
// in the bucket above the last bound, that bound.
func quantile(q float64, counts []uint32, total uint32) time.Duration {
	rank := q * float64(total)
	var cum float64
	for i, c := range counts {
		prev := cum
		cum += float64(c)
		if cum < rank || c == 0 {
			continue
		}
		if i == len(latencyBuckets) {
			return seconds(latencyBuckets[len(latencyBuckets)-1])
		}
		lo := 0.0
		if i > 0 {
			lo = latencyBuckets[i-1]
		}
		hi := latencyBuckets[i]
		return seconds(lo + (hi-lo)*(rank-prev)/float64(c))
	}
	return seconds(latencyBuckets[len(latencyBuckets)-1])
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
