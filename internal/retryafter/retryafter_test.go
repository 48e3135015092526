package retryafter

import (
	"net/http"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	now := time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC)
	date := func(d time.Duration) string { return now.Add(d).Format(http.TimeFormat) }
	for _, tc := range []struct {
		name   string
		h      string
		max    time.Duration
		want   time.Duration
		wantOK bool
	}{
		{"empty", "", 0, 0, false},
		{"blank", "   ", 0, 0, false},
		{"seconds", "2", 0, 2 * time.Second, true},
		{"seconds with spaces", " 7 ", 0, 7 * time.Second, true},
		{"fraction", "1.5", 0, 1500 * time.Millisecond, true},
		{"zero", "0", 0, 0, false},
		{"negative", "-3", 0, 0, false},
		{"words", "soon", 0, 0, false},
		{"no cap", "3600", 0, time.Hour, true},
		{"at the cap", "60", time.Minute, time.Minute, true},
		{"over the cap", "61", time.Minute, 0, false},
		{"http date", date(10 * time.Second), 0, 10 * time.Second, true},
		{"http date over the cap", date(2 * time.Minute), time.Minute, 0, false},
		{"http date in the past", date(-10 * time.Second), 0, 0, false},
		{"http date now", date(0), 0, 0, false},
		{"rfc850 date", now.Add(30 * time.Second).Format(time.RFC850), 0, 30 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Parse(tc.h, now, tc.max)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("Parse(%q, max %v) = %v, %v; want %v, %v", tc.h, tc.max, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
