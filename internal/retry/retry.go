// Package retry is the aggregator's one way of trying again: an exponential backoff with jitter (Backoff) and the
// loop that runs an operation until it succeeds (Do). The reconnect schedule of a server, the restart delay of a
// crashed actor (both in package supervision), the PostgreSQL feed's reconnect and the retries of the embedding and
// classification clients are all computed by Backoff; the loops that wait in place use Do.
//
// Do's schedule is a github.com/cenkalti/backoff/v5 BackOff (Backoff.Schedule gives one), and its errors follow
// that library's conventions: an error marked with backoff.Permanent stops the retries at once.
package retry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Backoff is an exponential delay: Initial * Multiplier^(attempt-1), capped at Max (0: no cap), spread by
// +-Jitter (a fraction of the delay, 0..1) so that clients failing together do not retry in lockstep.
type Backoff struct {
	Initial    time.Duration
	Max        time.Duration
	Multiplier float64
	Jitter     float64
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

// Delay is Base(attempt) spread by jitter, in [Base*(1-Jitter), Base*(1+Jitter)); rnd returns a number in [0,1)
// (nil uses math/rand/v2).
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

// Schedule returns b as a backoff.BackOff: the n-th NextBackOff after a Reset (or since it was made) is Delay(n).
// It never stops; Do's MaxTries or the caller's context end the retries. It is not safe for concurrent use.
func (b Backoff) Schedule() backoff.BackOff { return &schedule{b: b} }

type schedule struct {
	b Backoff
	n int
}

func (s *schedule) NextBackOff() time.Duration {
	s.n++
	return s.b.Delay(s.n, nil)
}

func (s *schedule) Reset() { s.n = 0 }

// Options tune Do. The zero value retries until the operation succeeds or the context ends.
type Options struct {
	// MaxTries is the number of attempts, the first included; 0 is no limit.
	MaxTries int
	// Wait, when set, decides the wait before the next attempt from the schedule's (scheduled) and the error of the
	// attempt that failed: where a server's Retry-After is honoured.
	Wait func(scheduled time.Duration, err error) time.Duration
	// Sleep waits d, or less when ctx ends (then it returns ctx's error); nil uses a timer. Tests replace it to
	// record the waits without waiting.
	Sleep func(ctx context.Context, d time.Duration) error
}

// resetError marks an attempt's error as the start of a new series (see Reset).
type resetError struct{ err error }

func (e *resetError) Error() string { return e.err.Error() }
func (e *resetError) Unwrap() error { return e.err }

// Reset marks err so that Do starts its schedule again (from its first delay) before the next attempt: the
// operation got somewhere (a connection that worked for a while) before it failed.
func Reset(err error) error {
	if err == nil {
		return nil
	}
	return &resetError{err}
}

// Do runs op until it succeeds and returns its result. After a failure it waits the schedule's next delay (or
// what opts.Wait makes of it) and tries again, until
//   - op's error is permanent (backoff.Permanent): Do returns the error inside, at once;
//   - opts.MaxTries attempts failed, or the schedule returns backoff.Stop: Do returns the last error;
//   - ctx ends: Do returns ctx's error, with the last error after it ("context canceled (after: ...)").
//
// s is Reset first. op runs on the caller's goroutine; Do itself starts none.
func Do[T any](ctx context.Context, s backoff.BackOff, opts Options, op func() (T, error)) (T, error) {
	sleep := opts.Sleep
	if sleep == nil {
		sleep = Sleep
	}
	s.Reset()
	for tries := 1; ; tries++ {
		res, err := op()
		if err == nil {
			return res, nil
		}
		var permanent *backoff.PermanentError
		if errors.As(err, &permanent) {
			return res, permanent.Unwrap()
		}
		if opts.MaxTries > 0 && tries >= opts.MaxTries {
			return res, err
		}
		if cerr := ctx.Err(); cerr != nil {
			return res, fmt.Errorf("%w (after: %w)", cerr, err)
		}
		var reset *resetError
		if errors.As(err, &reset) {
			s.Reset()
		}
		next := s.NextBackOff()
		if next == backoff.Stop {
			return res, err
		}
		if opts.Wait != nil {
			next = opts.Wait(next, err)
		}
		if serr := sleep(ctx, next); serr != nil {
			return res, fmt.Errorf("%w (after: %w)", serr, err)
		}
	}
}

// Sleep waits d, or until ctx ends (then it returns ctx's error).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
