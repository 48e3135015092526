package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/internal/peertest"
)

// spinCPU keeps every core busy from the test process until the returned function is called (or limit passed): the
// daemon, its backends and this test then compete for the CPU, as on a loaded host.
func spinCPU(limit time.Duration) func() {
	done := make(chan struct{})
	var once sync.Once
	end := func() { once.Do(func() { close(done) }) }
	timer := time.AfterFunc(limit, end)
	for range runtime.NumCPU() {
		go func() {
			for n := 0; ; n++ {
				if n%4096 == 0 {
					select {
					case <-done:
						return
					default:
					}
				}
			}
		}()
	}
	return func() { timer.Stop(); end() }
}

// TestConnectedMeansRoutable (issue 24, item 6): the status a client reads says CONNECTED only once the server's
// tools are routable. Servers are registered through the REST API of the real daemon, one after another, while
// every core is busy; as soon as GET /servers/{id} says CONNECTED, a call of the server's tool through POST
// /api/v1/tools/call and tools/list on /mcp must find the tool, every time.
func TestConnectedMeansRoutable(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	d := newDaemon(t, "")
	d.start()
	cmd, args := peertest.EverythingStdio(t)
	echo := startEchoBackend(t, peertest.GoBinary(t, "./cmd/mcp-echo-backend"), 0)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "connected-test", Version: "1"}, nil)
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: d.mcp + "/mcp"}, nil)
	if err != nil {
		t.Fatalf("connect to /mcp: %v", err)
	}
	defer sess.Close()

	stop := spinCPU(4 * time.Minute)
	defer stop()

	const rounds = 36 // every third one a stdio server-everything, the others the Go echo backend over HTTP
	var failures []string
	for i := range rounds {
		name := fmt.Sprintf("srv%d", i)
		body := map[string]any{"name": name, "transport_type": "HTTP",
			"connection_config": map[string]any{"base_url": echo, "allow_insecure_http": true}}
		if i%3 == 0 {
			body = map[string]any{"name": name, "transport_type": "STDIO",
				"connection_config": map[string]any{"command": cmd, "args": args}}
		}
		code, srv := d.do("POST", "/servers", body)
		if code != http.StatusCreated {
			t.Fatalf("register %s: %d %v", name, code, srv)
		}
		id := srv["id"].(string)
		d.waitStatus(id, "CONNECTED", 60*time.Second)

		// At once: the REST call path and the /mcp listing.
		code, out := callREST(t, d, name+".echo", map[string]any{"message": "hi " + name})
		if code != http.StatusOK {
			failures = append(failures, fmt.Sprintf("%s: POST /api/v1/tools/call right after CONNECTED: %d %s", name, code, out))
		}
		listed, err := sess.ListTools(ctx, nil)
		if err != nil {
			t.Fatalf("tools/list on /mcp: %v", err)
		}
		if !slices.ContainsFunc(listed.Tools, func(tl *mcp.Tool) bool { return tl.Name == name+"__echo" }) {
			failures = append(failures, fmt.Sprintf("%s: tools/list on /mcp right after CONNECTED lacks %s__echo", name, name))
		}
		if code, out := d.do("DELETE", "/servers/"+id, nil); code != http.StatusNoContent {
			t.Fatalf("delete %s: %d %v", name, code, out)
		}
	}
	if len(failures) > 0 {
		t.Fatalf("%d of %d registrations were CONNECTED before their tools were routable:\n%s",
			len(failures), rounds, strings.Join(failures, "\n"))
	}
}

// callREST runs a tool through POST /api/v1/tools/call and returns the status and the body.
func callREST(t *testing.T, d *daemon, tool string, args map[string]any) (int, string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"name": tool, "arguments": args})
	resp, err := http.Post(strings.TrimSuffix(d.base, "/aggregator")+"/tools/call", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}
