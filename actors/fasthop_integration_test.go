package actors_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/persistence"
)

// idRecorder is a go-sdk streamable HTTP backend with an echo tool that records the JSON-RPC id of every tools/call
// it receives (the fast hop's are strings "mcp-aggregator-hop-N", the go-sdk client's numbers), and can forget its
// sessions as a restarted backend does.
type idRecorder struct {
	handler atomic.Pointer[http.Handler]
	mu      sync.Mutex
	ids     []string
}

func newIDRecorder(t *testing.T) (*idRecorder, string) {
	rec := &idRecorder{}
	rec.restart()
	hs := httptest.NewServer(rec)
	t.Cleanup(hs.Close)
	return rec, hs.URL
}

// restart replaces the backend by a new one that knows none of the old sessions (they get 404).
func (rec *idRecorder) restart() {
	srv := mcp.NewServer(&mcp.Implementation{Name: "ids", Version: "1"}, nil)
	type args struct {
		Message string `json:"message"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "echo"}, func(_ context.Context, _ *mcp.CallToolRequest, a args) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Echo: " + a.Message}}}, nil, nil
	})
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	rec.handler.Store(&h)
}

func (rec *idRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if id, _, ok := toolsCall(r); ok {
		rec.mu.Lock()
		rec.ids = append(rec.ids, string(id))
		rec.mu.Unlock()
	}
	(*rec.handler.Load()).ServeHTTP(w, r)
}

// toolsCall reads a POST's JSON-RPC message, leaving the body for the next handler: ok when it is a tools/call,
// with its id and the tool's name.
func toolsCall(r *http.Request) (id json.RawMessage, tool string, ok bool) {
	if r.Method != http.MethodPost {
		return nil, "", false
	}
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name string `json:"name"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &m) != nil || m.Method != "tools/call" {
		return nil, "", false
	}
	return m.ID, m.Params.Name, true
}

// last is the id of the last tools/call received.
func (rec *idRecorder) last() string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.ids) == 0 {
		return ""
	}
	return rec.ids[len(rec.ids)-1]
}

// TestFastHopServesPlainCalls: a plain call to a streamable HTTP server goes through the server actor's fast hop
// (its id is the hop's) and answers as before; with NoFastHop it goes through the go-sdk session. When the backend
// forgets the session (a restart), the fast call fails SERVER_UNAVAILABLE and the server reconnects, as with the
// go-sdk: the next calls are served on a new session.
func TestFastHopServesPlainCalls(t *testing.T) {
	for _, off := range []bool{false, true} {
		name := "hop"
		if off {
			name = "no-hop"
		}
		t.Run(name, func(t *testing.T) {
			rec, url := newIDRecorder(t)
			cfg := testConfig()
			cfg.NoFastHop = off
			r := newRig(t, cfg)
			s := r.register("ids", persistence.TransportHTTP, map[string]any{"base_url": url, "allow_insecure_http": true}, nil, true)
			r.waitStatus(s.ID, persistence.StatusConnected, 20*time.Second)
			mustEcho(t, r, s.ID, "first")
			if hop := strings.HasPrefix(rec.last(), `"mcp-aggregator-hop-`); hop == off {
				t.Fatalf("tools/call id %s: hop %v, want %v", rec.last(), hop, !off)
			}

			rec.restart()
			rep, err := r.echo(s.ID, "forgotten")
			if err != nil {
				t.Fatal(err)
			}
			if rep.Error == nil || rep.Error.Code != errcode.ServerUnavailable {
				t.Fatalf("a call on a session the backend forgot: got %v, want %s", rep.GetError(), errcode.ServerUnavailable)
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				rep, err := r.echo(s.ID, "again")
				if err == nil && rep.Error == nil && strings.Contains(string(rep.ResultJson), "Echo: again") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no call served after the backend forgot the session: %v %v", err, rep.GetError())
				}
				time.Sleep(100 * time.Millisecond)
			}
			if hop := strings.HasPrefix(rec.last(), `"mcp-aggregator-hop-`); hop == off {
				t.Errorf("after reconnecting, tools/call id %s: hop %v, want %v", rec.last(), hop, !off)
			}
		})
	}
}
