// Package retryafter reads the Retry-After header of an HTTP answer (RFC 9110 §10.2.3): delay-seconds or an HTTP
// date. The outbound clients that honour it (the embedding client, the LLM classifier) share this one parser and
// keep their own bounds.
package retryafter

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Parse is the wait a Retry-After value asks for, measured from now for an HTTP date. Seconds may carry a
// fraction ("1.5"). ok is false, and the wait 0, when h is empty, unparsable, not positive (a zero or negative
// number, a date not after now), or longer than max when max > 0: a caller that would rather cut a long wait to
// its bound passes max 0 and applies min itself.
func Parse(h string, now time.Time, max time.Duration) (d time.Duration, ok bool) {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(h, 64); err == nil {
		d = time.Duration(s * float64(time.Second))
	} else if t, err := http.ParseTime(h); err == nil {
		d = t.Sub(now)
	} else {
		return 0, false
	}
	if d <= 0 || (max > 0 && d > max) {
		return 0, false
	}
	return d, true
}
