package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"
)

// keyedRegistration is the outcome of one POST /servers with an Idempotency-Key: the status (0 when the
// connection failed) and the server id of a 201.
type keyedRegistration struct {
	status int
	id     string
	err    error
}

// registerKeyed posts the registration of server i (name and key derived from i) without failing the test, so
// it can run while the daemon is killed.
func registerKeyed(client *http.Client, base string, i int) keyedRegistration {
	body, _ := json.Marshal(map[string]any{
		"name": fmt.Sprintf("crash-%03d", i), "transport_type": "HTTP", "auto_connect": false,
		"connection_config": map[string]any{"base_url": "http://127.0.0.1:1/mcp"},
	})
	req, err := http.NewRequest("POST", base+"/servers", bytes.NewReader(body))
	if err != nil {
		return keyedRegistration{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", fmt.Sprintf("crash-key-%03d", i))
	resp, err := client.Do(req)
	if err != nil {
		return keyedRegistration{err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return keyedRegistration{status: resp.StatusCode, err: err}
	}
	var out struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(raw, &out)
	if resp.StatusCode != http.StatusCreated {
		return keyedRegistration{status: resp.StatusCode, err: fmt.Errorf("%s", raw)}
	}
	return keyedRegistration{status: resp.StatusCode, id: out.ID}
}

// TestKeyedRegistrationSurvivesSIGKILL (issue 24, item 9): the daemon is SIGKILLed while 200 keyed registrations
// are in flight; after a restart every request retried with its key answers 201, a request answered before the
// crash with the same server, and each name is registered exactly once, including those the crash stored without
// acknowledging (which answered 409 before registrations took a key).
func TestKeyedRegistrationSurvivesSIGKILL(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	for name, dbURL := range stores() {
		t.Run(name, func(t *testing.T) {
			const n = 200
			d := newDaemon(t, dbURL(t))
			d.env = append(d.env, fmt.Sprintf("MCP_AGGREGATOR_MAX_SERVERS=%d", n))
			d.start()
			client := &http.Client{Timeout: 60 * time.Second}
			first := make([]keyedRegistration, n)
			acked := make(chan struct{}, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					first[i] = registerKeyed(client, d.base, i)
					if first[i].status == http.StatusCreated {
						acked <- struct{}{}
					}
				}()
			}
			// Kill once some registrations were answered, so others are on their way through the daemon.
			select {
			case <-acked:
			case <-time.After(60 * time.Second):
				t.Fatalf("no registration answered; logs:\n%s", d.logs)
			}
			time.Sleep(20 * time.Millisecond)
			d.signal(syscall.SIGKILL, 5*time.Second)
			wg.Wait()
			client.CloseIdleConnections()

			d.start()
			_, list := d.do("GET", "/servers?limit=1000", nil)
			stored := map[string]bool{}
			servers, _ := list["servers"].([]any)
			for _, it := range servers {
				stored[it.(map[string]any)["name"].(string)] = true
			}
			ackedN, unacked := 0, 0
			for i, r := range first {
				if r.status == http.StatusCreated {
					ackedN++
				} else if stored[fmt.Sprintf("crash-%03d", i)] {
					unacked++
				}
			}
			t.Logf("before the retries: %d answered 201, %d stored without an answer, %d servers stored", ackedN, unacked, len(stored))

			for i := range n {
				r := registerKeyed(client, d.base, i)
				if r.status != http.StatusCreated {
					t.Errorf("retry of crash-%03d: %d %v; want 201", i, r.status, r.err)
					continue
				}
				if first[i].status == http.StatusCreated && r.id != first[i].id {
					t.Errorf("retry of crash-%03d answered server %s, the first answer %s", i, r.id, first[i].id)
				}
			}
			_, list = d.do("GET", "/servers?limit=1000", nil)
			if total, _ := list["total"].(float64); total != n {
				t.Errorf("%v servers after the retries, want %d", list["total"], n)
			}
			d.signal(syscall.SIGTERM, 15*time.Second)
		})
	}
}
