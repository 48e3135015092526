package lifecycle

import (
	"context"
	"fmt"
	"net/http"

	"github.com/mcpgw/aggregator/persistence"
)

// HTTPHealth GETs a health URL: 2xx is healthy; 5xx, timeouts and connection errors are failures; 4xx is a
// configuration problem that is reported but not counted.
func HTTPHealth(ctx context.Context, client *http.Client, url string) (ok, counted bool, errText string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, false, "invalid health_check_url: " + err.Error()
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, true, "health check request failed: " + err.Error()
	}
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return true, true, ""
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return false, false, fmt.Sprintf("health_check_url answered %d (not counted as a failure)", resp.StatusCode)
	default:
		return false, true, fmt.Sprintf("health_check_url answered %d", resp.StatusCode)
	}
}

// Steps a health check's result makes (NextHealth).
const (
	HealthSteady    = iota // nothing changes
	HealthRecovered        // a success of a DEGRADED server: CONNECTED again
	HealthDegraded         // a second failure in a row of a CONNECTED server: DEGRADED
	HealthFailed           // a third failure in a row: the session ends, ERROR, retried later
)

// NextHealth is what one health check's result (ok; counted: a failure that counts, not a 4xx) does to a server in
// status with failures consecutive failures before it: the failures after it and the step (BR-006: two failures
// degrade the server, three end its session; a success resets the count).
func NextHealth(failures int, status string, ok, counted bool) (int, int) {
	switch {
	case ok && status == persistence.StatusDegraded:
		return 0, HealthRecovered
	case ok:
		return 0, HealthSteady
	case !counted:
		return failures, HealthSteady
	}
	failures++
	switch {
	case failures >= 3:
		return failures, HealthFailed
	case failures == 2 && status == persistence.StatusConnected:
		return failures, HealthDegraded
	}
	return failures, HealthSteady
}
