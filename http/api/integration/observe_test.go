package integration_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/api"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/internal/syncbuf"
	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

type seriesAnswer struct {
	StepSeconds   float64 `json:"step_seconds"`
	WindowSeconds float64 `json:"window_seconds"`
	Servers       []struct {
		ServerID string `json:"server_id"`
		Name     string `json:"name"`
		Points   []struct {
			Calls  int      `json:"calls"`
			Errors int      `json:"errors"`
			P50Ms  *float64 `json:"p50_ms"`
			P95Ms  *float64 `json:"p95_ms"`
		} `json:"points"`
		States []struct {
			State string `json:"state"`
		} `json:"states"`
	} `json:"servers"`
}

// TestTimeseriesAndActorsWithRealActors: real calls through the REST API on the real actor system show up in the
// servers' figures (calls, errors, p50/p95) with the server's state changes; a client token bound to a profile sees
// only its profile's server (the other one is 404 and missing from the list); the actor view is admin only and
// shows the server actors under the placement, with the server each serves and its owner.
func TestTimeseriesAndActorsWithRealActors(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "agg.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	logger := slog.New(slog.NewJSONHandler(&syncbuf.Buffer{}, nil))
	m := metrics.New(nil)
	sys, err := actors.Start(context.Background(), actors.Deps{Store: st, Logger: logger, Config: actors.DefaultConfig(), Metrics: m, NodeID: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = sys.Shutdown(c)
	})
	toks, err := auth.Parse("ops:"+curAdmin, "bot:"+curBot, "")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{app: api.New(api.Deps{Store: st, Control: sys, Curation: sys, Logger: logger, Tokens: toks, Metrics: m})}
	ids := map[string]string{}
	for _, name := range []string{"a", "b"} {
		r := e.authDo(t, curAdmin, "POST", base+"/servers", `{"name":"`+name+`","transport_type":"HTTP","connection_config":{"base_url":"`+featureBackend(t, name, true)+`"},"auto_connect":true}`)
		if r.status != http.StatusCreated {
			t.Fatalf("register %s: %d %s", name, r.status, r.body)
		}
		ids[name] = r.json(t)["id"].(string)
	}
	if r := e.authDo(t, curAdmin, "PUT", base+"/profiles/team", `{"selectors":[{"server":"a"}],"clients":["bot"]}`); r.status != http.StatusCreated {
		t.Fatalf("create profile: %d %s", r.status, r.body)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if p, ok := sys.Routes().Profile("team"); ok && p.Count() == 1 && len(sys.Routes().Callable()) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the servers' tools were never routable")
		}
		time.Sleep(50 * time.Millisecond)
	}
	calls := map[string]int{"a.echo": 3, "b.echo": 1}
	for name, n := range calls {
		for range n {
			if r := e.authDo(t, curAdmin, "POST", "/api/v1/tools/call", `{"name":"`+name+`","arguments":{}}`); r.status != http.StatusOK {
				t.Fatalf("call %s: %d %s", name, r.status, r.body)
			}
		}
	}

	get := func(token, path string, want int) seriesAnswer {
		t.Helper()
		r := e.authDo(t, token, "GET", path, "")
		if r.status != want {
			t.Fatalf("GET %s: %d %s, want %d", path, r.status, r.body, want)
		}
		var out seriesAnswer
		if want == http.StatusOK {
			if err := json.Unmarshal(r.body, &out); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	sum := func(a seriesAnswer, name string) (calls, latencies int) {
		for _, s := range a.Servers {
			if s.Name != name {
				continue
			}
			for _, p := range s.Points {
				calls += p.Calls
				if p.P50Ms != nil && p.P95Ms != nil && *p.P50Ms > 0 && *p.P95Ms >= *p.P50Ms {
					latencies++
				}
			}
		}
		return calls, latencies
	}

	all := get(curAdmin, base+"/timeseries", http.StatusOK)
	if all.StepSeconds != 5 || all.WindowSeconds != 600 || len(all.Servers) != 2 {
		t.Fatalf("admin's /timeseries: step %v window %v servers %d", all.StepSeconds, all.WindowSeconds, len(all.Servers))
	}
	for name, n := range map[string]int{"a": 3, "b": 1} {
		if c, l := sum(all, name); c != n || l == 0 {
			t.Errorf("server %s: %d calls with latency in %d steps, want %d calls and a latency", name, c, l, n)
		}
	}
	mine := get(curBot, base+"/timeseries", http.StatusOK)
	if len(mine.Servers) != 1 || mine.Servers[0].Name != "a" {
		t.Errorf("the bot's /timeseries lists %+v, want server a only", mine.Servers)
	}
	get(curBot, base+"/servers/"+ids["b"]+"/timeseries", http.StatusNotFound)
	one := get(curBot, base+"/servers/"+ids["a"]+"/timeseries", http.StatusOK)
	if c, _ := sum(one, "a"); c != 3 {
		t.Errorf("a's own series counts %d calls, want 3", c)
	}
	if len(one.Servers) != 1 || len(one.Servers[0].States) == 0 || one.Servers[0].States[len(one.Servers[0].States)-1].State != "CONNECTED" {
		t.Errorf("a's state changes in the window: %+v", one.Servers)
	}
	get(curAdmin, base+"/servers/00000000-0000-0000-0000-000000000000/timeseries", http.StatusNotFound)

	// A per-session child: a proxy session on a shows as a proxy actor under a's server actor.
	ps, err := sys.OpenProxySession(context.Background(), "a", actors.ProxyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	if r := e.authDo(t, curBot, "GET", base+"/actors", ""); r.status != http.StatusForbidden {
		t.Fatalf("a client token's GET /actors: %d, want 403", r.status)
	}
	r := e.authDo(t, curAdmin, "GET", base+"/actors", "")
	if r.status != http.StatusOK {
		t.Fatalf("GET /actors: %d %s", r.status, r.body)
	}
	var v actors.ActorView
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatal(err)
	}
	served, proxies := map[string]bool{}, 0
	for _, a := range v.Actors {
		if a.ID != "placement" {
			continue
		}
		for _, c := range a.Children {
			if c.Kind == "server" && c.State == "CONNECTED" && c.MailboxDepth != nil {
				served[c.ServerName] = true
			}
			for _, g := range c.Children {
				if g.Kind == "proxy" && g.ServerName == "a" && c.ServerName == "a" && g.MailboxDepth != nil {
					proxies++
				}
			}
		}
	}
	if proxies != 1 {
		t.Errorf("%d proxy actors under a's server actor, want 1 (%s)", proxies, r.body)
	}
	if !served["a"] || !served["b"] {
		t.Errorf("server actors under the placement: %v (%s)", served, r.body)
	}
	for _, p := range v.Servers {
		if p.Owner != "node-1" || !p.Local || p.Actor == "" {
			t.Errorf("server %s placement %+v, want owned here by node-1", p.Name, p)
		}
	}
}
