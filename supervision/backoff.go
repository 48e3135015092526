// Package supervision holds the restart and retry policies of the aggregator: a true exponential backoff with jitter
// (internal/retry's Backoff; protoactor's own "exponential" strategy grows linearly and never caps), the reconnect
// schedule of a server that cannot be reached, and a protoactor SupervisorStrategy that restarts a crashed actor
// after such a backoff without touching its siblings.
package supervision

import (
	"time"

	"github.com/mcpgw/aggregator/internal/retry"
)

// Backoff is an exponential delay with jitter: the aggregator's one (retry.Backoff), named here where the
// restart and reconnect policies use it.
type Backoff = retry.Backoff

// DefaultBackoff is 1 s, 2 s, 4 s, 8 s, 16 s ... capped at 60 s, with 20 % jitter.
func DefaultBackoff() Backoff {
	return Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.2}
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
