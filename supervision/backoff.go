// Package supervision holds the restart and retry policies of the aggregator: a true exponential backoff with jitter
// (protoactor's own "exponential" strategy grows linearly and never caps), the reconnect schedule of a server that
// cannot be reached, and a protoactor SupervisorStrategy that restarts a crashed actor after such a backoff without
// touching its siblings.
package supervision

import (
	"math"
	"math/rand/v2"
	"time"
)

// Backoff is an exponential delay: Initial * Multiplier^(attempt-1), capped at Max, spread by +-Jitter (a fraction
// of the delay, 0..1) so that servers failing together do not retry in lockstep.
type Backoff struct {
	Initial    time.Duration
	Max        time.Duration
	Multiplier float64
	Jitter     float64
}

// DefaultBackoff is 1 s, 2 s, 4 s, 8 s, 16 s ... capped at 60 s, with 20 % jitter.
func DefaultBackoff() Backoff {
	return Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.2}
}

// Base is the delay before attempt n (1-based) without jitter.
func (b Backoff) Base(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	m := b.Multiplier
	if m < 1 {
		m = 1
	}
	d := float64(b.Initial) * math.Pow(m, float64(attempt-1))
	if b.Max > 0 && d > float64(b.Max) {
		d = float64(b.Max)
	}
	if d > float64(math.MaxInt64/2) {
		d = float64(math.MaxInt64 / 2)
	}
	return time.Duration(d)
}

// Delay is Base(attempt) spread by jitter; rnd returns a number in [0,1) (nil uses math/rand/v2).
func (b Backoff) Delay(attempt int, rnd func() float64) time.Duration {
	base := b.Base(attempt)
	j := b.Jitter
	if j <= 0 {
		return base
	}
	if j > 1 {
		j = 1
	}
	if rnd == nil {
		rnd = rand.Float64
	}
	f := 1 + j*(2*rnd()-1) // in [1-j, 1+j)
	d := time.Duration(float64(base) * f)
	if d < 0 {
		d = 0
	}
	return d
}

// RetrySchedule is how a server in ERROR is reconnected (READING.md): Attempts tries with exponential Backoff, then
// one try every Steady interval for as long as the server stays in ERROR (Steady 0 stops after the attempts).
type RetrySchedule struct {
	Backoff  Backoff
	Attempts int
	Steady   time.Duration
}

// DefaultRetrySchedule is 1 s, 2 s, 4 s, 8 s, 16 s (with jitter), then every 60 s.
func DefaultRetrySchedule() RetrySchedule {
	b := DefaultBackoff()
	b.Max = 16 * time.Second
	return RetrySchedule{Backoff: b, Attempts: 5, Steady: time.Minute}
}

// Next returns the delay before retry number attempt (1-based) and false when no more retries are due.
func (s RetrySchedule) Next(attempt int, rnd func() float64) (time.Duration, bool) {
	if attempt < 1 {
		attempt = 1
	}
	if attempt <= s.Attempts {
		return s.Backoff.Delay(attempt, rnd), true
	}
	if s.Steady <= 0 {
		return 0, false
	}
	steady := Backoff{Initial: s.Steady, Max: s.Steady, Multiplier: 1, Jitter: s.Backoff.Jitter}
	return steady.Delay(1, rnd), true
}
