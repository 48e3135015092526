package lifecycle

import (
	"context"
	"fmt"
	"net/http"
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
