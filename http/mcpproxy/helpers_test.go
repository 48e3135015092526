package mcpproxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/mcpproxy"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/crypt"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

// rig is an actor system on an embedded store in a temp dir, with the proxy served on a loopback test server.
type rig struct {
	t     *testing.T
	store persistence.Store
	sys   *actors.System
	ts    *httptest.Server
	log   *slog.Logger
}

func newRig(t *testing.T, opts mcpproxy.Options) *rig {
	t.Helper()
	return newRigWith(t, opts, nil)
}

// newRigWith is newRig with the actors' configuration changed by tune (nil: the defaults the rig uses).
func newRigWith(t *testing.T, opts mcpproxy.Options, tune func(*actors.Config)) *rig {
	t.Helper()
	return newRigLogged(t, opts, tune, nil)
}

// newRigLogged is newRigWith whose log, every level of it, goes to logs too (nil: none).
func newRigLogged(t *testing.T, opts mcpproxy.Options, tune func(*actors.Config), logs io.Writer) *rig {
	t.Helper()
	inner, err := sqlite.Open(context.Background(), t.TempDir()+"/agg.db")
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	// Sealed as the daemon's store is (MCP_CREDENTIAL_KEY): callers' own credentials are stored only sealed.
	ring, err := crypt.NewKeyring(crypt.NewKey(), nil)
	if err != nil {
		t.Fatal(err)
	}
	st := crypt.Wrap(inner, ring)
	cfg := actors.DefaultConfig()
	cfg.ConnectionTimeout = 20 * time.Second
	cfg.RequestTimeout = 30 * time.Second
	if tune != nil {
		tune(&cfg)
	}
	level := slog.LevelWarn
	if os.Getenv("PROXY_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	var out io.Writer = os.Stderr
	if logs != nil {
		level, out = slog.LevelDebug, io.MultiWriter(logs, levelWriter{os.Stderr})
	}
	logger := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: level}))
	sys, err := actors.Start(context.Background(), actors.Deps{Store: st, Config: cfg, Logger: logger})
	if err != nil {
		t.Fatalf("start actors: %v", err)
	}
	if opts.Logger == nil {
		opts.Logger = logger
	}
	mux := http.NewServeMux()
	mux.Handle(mcpproxy.Prefix, mcpproxy.New(sys, opts))
	r := &rig{t: t, store: st, sys: sys, ts: httptest.NewServer(mux), log: logger}
	t.Cleanup(func() {
		r.ts.Close()
		r.stop()
		st.Close()
	})
	return r
}

func (r *rig) stop() {
	if r.sys == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := r.sys.Shutdown(ctx); err != nil {
		r.t.Errorf("shutdown: %v", err)
	}
	r.sys = nil
}

// url is the proxy endpoint of a server.
func (r *rig) url(name string) string { return r.ts.URL + mcpproxy.Prefix + name }

// register registers a server and waits until it is CONNECTED and routable.
func (r *rig) register(name, transport string, cfg map[string]any) persistence.Server {
	r.t.Helper()
	raw, _ := json.Marshal(cfg)
	s, err := r.sys.Register(context.Background(), actors.RegisterRequest{
		Name: name, TransportType: transport, ConnectionConfig: raw, AutoConnect: true,
	})
	if err != nil {
		r.t.Fatalf("register %s: %v", name, err)
	}
	r.waitStatus(s.ID, persistence.StatusConnected, 30*time.Second)
	return s
}

// waitStatus waits until the routing table shows the server in state want.
func (r *rig) waitStatus(id, want string, within time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for {
		if srv, ok := r.sys.Routes().Server(id); ok && srv.Status == want {
			return
		}
		if time.Now().After(deadline) {
			srv, _ := r.sys.Routes().Server(id)
			r.t.Fatalf("server %s did not reach %s within %v (status %q)", id, want, within, srv.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// connect opens a go-sdk client session to the proxy endpoint of a server.
func (r *rig) connect(name string, opts *mcp.ClientOptions) *mcp.ClientSession {
	r.t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "proxy-test", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: r.url(name), MaxRetries: 1},
		&mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
	if err != nil {
		r.t.Fatalf("connect to proxy of %s: %v", name, err)
	}
	r.t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// missing skips (or fails under CI=true) when a peer is not installed.
func missing(t testing.TB, what string) {
	t.Helper()
	msg := what + " is not installed: run `make peers`"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// levelWriter passes on the warnings and errors of a text log (level=WARN, level=ERROR) only.
type levelWriter struct{ w io.Writer }

func (l levelWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("level=WARN")) || bytes.Contains(p, []byte("level=ERROR")) {
		return l.w.Write(p)
	}
	return len(p), nil
}
