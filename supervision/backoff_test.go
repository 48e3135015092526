package supervision

import (
	"testing"
	"time"
)

func TestBackoffBaseIsExponentialAndCapped(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: 10 * time.Second, Multiplier: 2}
	cases := []struct {
		attempt int
		want    time.Duration
	}{
		{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second},
		{4, 8 * time.Second}, {5, 10 * time.Second}, {60, 10 * time.Second}, {100000, 10 * time.Second},
	}
	for _, c := range cases {
		if got := b.Base(c.attempt); got != c.want {
			t.Errorf("Base(%d) = %v, want %v", c.attempt, got, c.want)
		}
	}
}

func TestBackoffJitterStaysInBand(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.2}
	for _, r := range []float64{0, 0.25, 0.5, 0.999999} {
		rnd := func() float64 { return r }
		for attempt := 1; attempt <= 8; attempt++ {
			base := b.Base(attempt)
			d := b.Delay(attempt, rnd)
			lo, hi := time.Duration(float64(base)*0.8), time.Duration(float64(base)*1.2)
			if d < lo || d > hi {
				t.Fatalf("Delay(%d) with r=%v = %v, outside [%v,%v]", attempt, r, d, lo, hi)
			}
		}
	}
	// The real random source spreads values: 50 draws are not all equal.
	seen := map[time.Duration]bool{}
	for i := 0; i < 50; i++ {
		seen[b.Delay(3, nil)] = true
	}
	if len(seen) < 2 {
		t.Fatalf("jitter produced a single value over 50 draws")
	}
}

func TestRetryScheduleFollowsReadingMd(t *testing.T) {
	s := DefaultRetrySchedule()
	s.Backoff.Jitter = 0
	want := []time.Duration{1, 2, 4, 8, 16}
	for i, w := range want {
		d, ok := s.Next(i+1, nil)
		if !ok || d != w*time.Second {
			t.Fatalf("attempt %d: got %v,%v want %v", i+1, d, ok, w*time.Second)
		}
	}
	for attempt := 6; attempt < 10; attempt++ {
		d, ok := s.Next(attempt, nil)
		if !ok || d != time.Minute {
			t.Fatalf("steady attempt %d: got %v,%v want 1m", attempt, d, ok)
		}
	}
	s.Steady = 0
	if _, ok := s.Next(6, nil); ok {
		t.Fatalf("Steady=0 must stop after the attempts")
	}
}
