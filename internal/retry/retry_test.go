package retry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// recorder is an Options.Sleep that records the waits and never waits; cancel, when set, ends ctx at that wait.
type recorder struct {
	waits  []time.Duration
	cancel func()
	at     int
}

func (r *recorder) sleep(ctx context.Context, d time.Duration) error {
	r.waits = append(r.waits, d)
	if r.cancel != nil && len(r.waits) == r.at {
		r.cancel()
	}
	return ctx.Err()
}

func TestDo(t *testing.T) {
	errFail := errors.New("fail")
	plain := Backoff{Initial: 100 * time.Millisecond, Max: 400 * time.Millisecond, Multiplier: 2}
	ms := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		opts      Options
		results   []error // the attempts' errors in order; past the end every attempt succeeds
		cancelAt  int     // the wait at which ctx is cancelled (0: never)
		wantTries int
		wantWaits []time.Duration
		wantErr   error  // errors.Is
		wantMsg   string // exact message, when set
	}{
		{name: "first try succeeds", wantTries: 1, wantWaits: ms()},
		{name: "waits grow and cap", results: []error{errFail, errFail, errFail, errFail, errFail}, wantTries: 6,
			wantWaits: ms(100, 200, 400, 400, 400)},
		{name: "max tries returns the last error", opts: Options{MaxTries: 3},
			results: []error{errFail, errFail, errors.New("third"), nil}, wantTries: 3, wantWaits: ms(100, 200),
			wantMsg: "third"},
		{name: "permanent stops at once, unwrapped", results: []error{errFail, backoff.Permanent(errFail)},
			wantTries: 2, wantWaits: ms(100), wantErr: errFail, wantMsg: "fail"},
		{name: "reset starts the schedule again", results: []error{errFail, errFail, Reset(errFail), errFail},
			wantTries: 5, wantWaits: ms(100, 200, 100, 200)},
		{name: "wait overrides the schedule",
			opts:    Options{Wait: func(d time.Duration, err error) time.Duration { return d + time.Second }},
			results: []error{errFail, errFail}, wantTries: 3, wantWaits: ms(1100, 1200)},
		{name: "context ends while waiting", results: []error{errFail, errFail, errFail}, cancelAt: 2,
			wantTries: 2, wantWaits: ms(100, 200), wantErr: context.Canceled,
			wantMsg: "context canceled (after: fail)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rec := &recorder{}
			if tc.cancelAt > 0 {
				rec.cancel, rec.at = cancel, tc.cancelAt
			}
			tc.opts.Sleep = rec.sleep
			tries := 0
			got, err := Do(ctx, plain.Schedule(), tc.opts, func() (int, error) {
				tries++
				if tries <= len(tc.results) && tc.results[tries-1] != nil {
					return 0, tc.results[tries-1]
				}
				return 42, nil
			})
			if tries != tc.wantTries {
				t.Errorf("%d tries, want %d", tries, tc.wantTries)
			}
			if len(rec.waits) != len(tc.wantWaits) {
				t.Fatalf("waits %v, want %v", rec.waits, tc.wantWaits)
			}
			for i := range rec.waits {
				if rec.waits[i] != tc.wantWaits[i] {
					t.Errorf("waits %v, want %v", rec.waits, tc.wantWaits)
					break
				}
			}
			switch {
			case tc.wantErr == nil && tc.wantMsg == "":
				if err != nil || got != 42 {
					t.Errorf("Do = %d, %v; want 42, nil", got, err)
				}
			default:
				if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
					t.Errorf("error %v, want %v", err, tc.wantErr)
				}
				if tc.wantMsg != "" && (err == nil || err.Error() != tc.wantMsg) {
					t.Errorf("error %v, want %q", err, tc.wantMsg)
				}
			}
		})
	}
}

// TestDoStopsWhenTheScheduleStops: a cenkalti schedule that says Stop ends the retries with the last error.
func TestDoStopsWhenTheScheduleStops(t *testing.T) {
	errFail := errors.New("fail")
	tries := 0
	_, err := Do(context.Background(), &backoff.StopBackOff{}, Options{},
		func() (struct{}, error) { tries++; return struct{}{}, errFail })
	if !errors.Is(err, errFail) || tries != 1 {
		t.Fatalf("%d tries, error %v; want 1 and %v", tries, err, errFail)
	}
}

// TestScheduleIsDelay: the n-th NextBackOff after Reset is Delay(n), jitter included.
func TestScheduleIsDelay(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: 8 * time.Second, Multiplier: 2, Jitter: 0.5}
	s := b.Schedule()
	for round := 0; round < 2; round++ {
		for n := 1; n <= 6; n++ {
			d := s.NextBackOff()
			base := b.Base(n)
			if d < base/2 || d >= base*3/2 {
				t.Fatalf("round %d, backoff %d = %v, outside [%v, %v)", round, n, d, base/2, base*3/2)
			}
		}
		s.Reset()
	}
}

func TestSleep(t *testing.T) {
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on a cancelled context: %v", err)
	}
}
