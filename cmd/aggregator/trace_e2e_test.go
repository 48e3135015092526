package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence/pgtest"
)

// tracedBackend is an in-process go-sdk streamable HTTP MCP server with a tool "echo" that records, per call, the
// traceparent of the HTTP request that carried it and of the call's _meta.
type tracedBackend struct {
	url string
	mu  sync.Mutex
	// headers and metas are the traceparents of each call, in order.
	headers, metas []string
}

func newTracedBackend(t *testing.T) *tracedBackend {
	t.Helper()
	b := &tracedBackend{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "traced-backend", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			meta, _ := r.Params.Meta["traceparent"].(string)
			header := ""
			if r.Extra != nil {
				header = r.Extra.Header.Get("traceparent")
			}
			b.mu.Lock()
			b.headers, b.metas = append(b.headers, header), append(b.metas, meta)
			b.mu.Unlock()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo"}}}, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	b.url = hs.URL + "/mcp"
	return b
}

// last is the traceparent header and _meta of the last call.
func (b *tracedBackend) last() (header, meta string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.headers) == 0 {
		return "", ""
	}
	return b.headers[len(b.headers)-1], b.metas[len(b.metas)-1]
}

// traceEnv is what turns a daemon's tracing on, exporting to j quickly.
func traceEnv(j *peertest.Jaeger) []string {
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + j.OTLP, "OTEL_SERVICE_NAME=mcp-aggregator-e2e", "OTEL_BSP_SCHEDULE_DELAY=100"}
}

// newTraceparent is a sampled W3C traceparent of a new trace: the header, the trace id and the parent span id.
func newTraceparent() (string, string, string) {
	tid, sid := make([]byte, 16), make([]byte, 8)
	_, _ = rand.Read(tid)
	_, _ = rand.Read(sid)
	t, s := hex.EncodeToString(tid), hex.EncodeToString(sid)
	return "00-" + t + "-" + s + "-01", t, s
}

// registerTraced registers the backend as server name through d and waits until /mcp lists its echo tool.
func registerTraced(t *testing.T, d *daemon, name, url string) string {
	t.Helper()
	code, s := d.do("POST", "/servers", map[string]any{"name": name, "transport_type": "HTTP",
		"connection_config": map[string]any{"base_url": url, "allow_insecure_http": true}})
	if code != 201 {
		t.Fatalf("register: %d %v", code, s)
	}
	id := s["id"].(string)
	d.waitStatus(id, "CONNECTED", 30*time.Second)
	return id
}

// mcpCallTraced calls tool through the MCP endpoint at base with the go-sdk client speaking revision version, the
// trace context in the request's _meta, retrying while the endpoint does not list the tool yet.
func mcpCallTraced(t *testing.T, base, version, tool, traceparent string) {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "trace-e2e", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: base + "/mcp"},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{},
			Meta: mcp.Meta{"traceparent": traceparent}})
		if err == nil && !res.IsError {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("call %s through /mcp: %v %+v", tool, err, res)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// spanNamed finds the span of trace tr named name with span.kind kind.
func spanNamed(t *testing.T, tr peertest.JaegerTrace, name, kind string) peertest.JaegerSpan {
	t.Helper()
	for _, s := range tr.Spans {
		if s.OperationName == name && s.Tag("span.kind") == kind {
			return s
		}
	}
	var have []string
	for _, s := range tr.Spans {
		have = append(have, s.OperationName+"/"+s.Tag("span.kind"))
	}
	t.Fatalf("trace %s has no %s span %q; spans: %v", tr.TraceID, kind, name, have)
	return peertest.JaegerSpan{}
}

// checkCallTrace checks the spans of one routed call below the inbound span in: the gateway's call span, and the
// client span of the backend request below it, which the backend received as its traceparent (header and _meta).
func checkCallTrace(t *testing.T, tr peertest.JaegerTrace, in peertest.JaegerSpan, server string, b *tracedBackend) (gw, client peertest.JaegerSpan) {
	t.Helper()
	gw = spanNamed(t, tr, "gateway.call", "internal")
	if gw.Parent() != in.SpanID {
		t.Errorf("gateway.call's parent is %s, want the inbound span %s", gw.Parent(), in.SpanID)
	}
	if gw.Tag("aggregator.server.name") != server {
		t.Errorf("gateway.call server %q, want %q", gw.Tag("aggregator.server.name"), server)
	}
	client = spanNamed(t, tr, "tools/call echo", "client")
	if client.Parent() != gw.SpanID {
		t.Errorf("the backend call's parent is %s, want gateway.call %s", client.Parent(), gw.SpanID)
	}
	for k, want := range map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "echo", "aggregator.server.name": server} {
		if got := client.Tag(k); got != want {
			t.Errorf("client span %s = %q, want %q", k, got, want)
		}
	}
	if client.Tag("mcp.session.id") == "" {
		t.Error("client span has no mcp.session.id")
	}
	want := "00-" + tr.TraceID + "-" + client.SpanID + "-01"
	if header, meta := b.last(); header != want || meta != want {
		t.Errorf("the backend received traceparent header %q and _meta %q, want %q (the client span)", header, meta, want)
	}
	return gw, client
}

// TestTraceThroughJaeger runs the daemon with tracing on against a real Jaeger, calls a tool through /mcp with a
// go-sdk client that sends a traceparent in _meta, and through REST with a traceparent header, and reads each
// trace back from Jaeger's query API: one trace continuing the client's, with the inbound span, the gateway's call
// span and the backend's client span linked parent to child, the backend given the client span's context, and
// the daemon's log lines of the request carrying the trace id.
func TestTraceThroughJaeger(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	j := peertest.StartJaeger(t)
	b := newTracedBackend(t)
	d := newDaemon(t, "")
	d.env = append(d.env, traceEnv(j)...)
	d.start()
	registerTraced(t, d, "traced", b.url)

	// Both revisions: a 2025-11-25 client has a session (its id on the span), a 2026-07-28 client has none.
	for _, version := range []string{actors.ProtocolVersion, mcpserver.ModernProtocol} {
		t.Run("mcp/"+version, func(t *testing.T) {
			tp, tid, parent := newTraceparent()
			mcpCallTraced(t, d.mcp, version, "traced__echo", tp)
			tr := j.Trace(t, tid, 3, 20*time.Second)
			if tr.TraceID != tid {
				t.Fatalf("Jaeger has no trace %s", tid)
			}
			in := spanNamed(t, tr, "tools/call traced__echo", "server")
			if in.Parent() != parent {
				t.Errorf("the /mcp span's parent is %q, want the client's %s", in.Parent(), parent)
			}
			for k, want := range map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "traced__echo"} {
				if got := in.Tag(k); got != want {
					t.Errorf("/mcp span %s = %q, want %q", k, got, want)
				}
			}
			if got := in.Tag("mcp.session.id"); (got != "") != (version == actors.ProtocolVersion) {
				t.Errorf("/mcp span's mcp.session.id = %q with revision %s", got, version)
			}
			if got := tr.ServiceName(in); got != "mcp-aggregator-e2e" {
				t.Errorf("service.name %q, want OTEL_SERVICE_NAME's", got)
			}
			checkCallTrace(t, tr, in, "traced", b)
		})
	}

	t.Run("rest", func(t *testing.T) {
		tp, tid, parent := newTraceparent()
		body := strings.NewReader(`{"name":"traced.echo","arguments":{}}`)
		req, _ := http.NewRequest("POST", strings.SplitN(d.base, "/api/", 2)[0]+"/api/v1/tools/call", body)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("traceparent", tp)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("REST call: %d", resp.StatusCode)
		}
		tr := j.Trace(t, tid, 3, 20*time.Second)
		if tr.TraceID != tid {
			t.Fatalf("Jaeger has no trace %s", tid)
		}
		in := spanNamed(t, tr, "POST /api/v1/tools/call", "server")
		if in.Parent() != parent || in.Tag("http.response.status_code") != "200" {
			t.Errorf("REST span: parent %q (want %s), status %q", in.Parent(), parent, in.Tag("http.response.status_code"))
		}
		checkCallTrace(t, tr, in, "traced", b)
		if !strings.Contains(d.logs.String(), `"trace_id":"`+tid+`"`) {
			t.Errorf("no log line carries trace_id %s", tid)
		}
	})

	// A registration through REST: its audit record's store write is a client span of the request's trace, with
	// the database and the server's id. (The server row is written by the registry actor, whose message does not
	// carry the request's context yet: that write is a trace of its own.)
	t.Run("store writes", func(t *testing.T) {
		tp, tid, _ := newTraceparent()
		body := strings.NewReader(`{"name":"stored","transport_type":"HTTP","auto_connect":false,` +
			`"connection_config":{"base_url":"` + b.url + `","allow_insecure_http":true}}`)
		req, _ := http.NewRequest("POST", d.base+"/servers", body)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("traceparent", tp)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var created struct{ ID string }
		_ = json.NewDecoder(resp.Body).Decode(&created)
		resp.Body.Close()
		if resp.StatusCode != 201 || created.ID == "" {
			t.Fatalf("register: %d", resp.StatusCode)
		}
		tr := j.Trace(t, tid, 3, 20*time.Second)
		in := spanNamed(t, tr, "POST /api/v1/aggregator/servers", "server")
		for _, op := range []string{"InsertAudit"} {
			w := spanNamed(t, tr, op, "client")
			if !tr.Descends(w, in) {
				t.Errorf("%s is not below the request's span", op)
			}
			for k, want := range map[string]string{"db.system.name": "sqlite", "db.operation.name": op, "aggregator.server.id": created.ID} {
				if got := w.Tag(k); got != want {
					t.Errorf("%s span %s = %q, want %q", op, k, got, want)
				}
			}
		}
	})

	// The per-server endpoint: the request's server span continues the client's trace (from _meta), the
	// forwarded call is a client span below it, and the backend gets that span's context in _meta.
	t.Run("per-server endpoint", func(t *testing.T) {
		tp, tid, parent := newTraceparent()
		c := mcp.NewClient(&mcp.Implementation{Name: "trace-e2e", Version: "1"}, nil)
		cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: d.mcp + "/mcp/servers/traced"},
			&mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		if res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{},
			Meta: mcp.Meta{"traceparent": tp}}); err != nil || res.IsError {
			t.Fatalf("call through /mcp/servers/traced: %v %+v", err, res)
		}
		tr := j.Trace(t, tid, 2, 20*time.Second)
		in := spanNamed(t, tr, "tools/call echo", "server")
		out := spanNamed(t, tr, "tools/call echo", "client")
		if in.Parent() != parent || out.Parent() != in.SpanID {
			t.Errorf("parents: server span <- %q (want the client's %s), client span <- %q (want %s)", in.Parent(), parent, out.Parent(), in.SpanID)
		}
		if _, meta := b.last(); meta != "00-"+tid+"-"+out.SpanID+"-01" {
			t.Errorf("the backend's _meta traceparent %q, want the client span's", meta)
		}
	})

	// The MCP listener's access line of a traced request carries its trace id (the request's HTTP span's).
	t.Run("mcp access line", func(t *testing.T) {
		tp, tid, _ := newTraceparent()
		req, _ := http.NewRequest("POST", d.mcp+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("traceparent", tp)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%v\n%s", err, tail(d.logs.String(), 3000))
		}
		resp.Body.Close()
		tr := j.Trace(t, tid, 1, 20*time.Second)
		in := spanNamed(t, tr, "POST /mcp", "server")
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(d.logs.String(), `"span_id":"`+in.SpanID+`"`) {
			if time.Now().After(deadline) {
				t.Fatalf("no log line carries the MCP request's span_id %s", in.SpanID)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// TestTraceAcrossClusterNodes: on a two-node cluster, a call through the node that does not own the server goes
// to the owner with its trace context: Jaeger holds one trace whose /mcp and gateway spans come from the node
// that took the call and whose backend client span comes from the owner, linked parent to child.
func TestTraceAcrossClusterNodes(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	j := peertest.StartJaeger(t)
	etcd := peertest.StartEtcd(t)
	db := pgtest.NewDatabase(t)
	nodes := newCluster(t, 2, db, func(int) []string {
		return append([]string{"MCP_AGGREGATOR_CLUSTER=etcd", "MCP_AGGREGATOR_CLUSTER_ETCD=" + etcd, "MCP_AGGREGATOR_LOG_FORMAT=json"}, traceEnv(j)...)
	})
	b := newTracedBackend(t)
	registerTraced(t, nodes[0].daemon, "remote", b.url)
	// The node that holds the backend session owns the server; the call goes through the other one.
	var owner, caller *clusterNode
	deadline := time.Now().Add(20 * time.Second)
	for owner == nil {
		for i, n := range nodes {
			if held, _ := n.backendSessions(t); held["remote"] {
				owner, caller = n, nodes[1-i]
			}
		}
		if owner == nil && time.Now().After(deadline) {
			t.Fatal("no node holds the backend session")
		}
		time.Sleep(50 * time.Millisecond)
	}
	tp, tid, parent := newTraceparent()
	mcpCallTraced(t, caller.mcp, actors.ProtocolVersion, "remote__echo", tp)
	tr := j.Trace(t, tid, 3, 20*time.Second)
	if tr.TraceID != tid {
		t.Fatalf("Jaeger has no trace %s", tid)
	}
	in := spanNamed(t, tr, "tools/call remote__echo", "server")
	if in.Parent() != parent {
		t.Errorf("the /mcp span's parent is %q, want the client's %s", in.Parent(), parent)
	}
	gw, client := checkCallTrace(t, tr, in, "remote", b)
	for _, c := range []struct {
		what string
		span peertest.JaegerSpan
		node *clusterNode
	}{{"/mcp span", in, caller}, {"gateway.call", gw, caller}, {"backend client span", client, owner}} {
		if got := tr.ProcessTag(c.span, "service.instance.id"); got != c.node.id {
			t.Errorf("%s from node %q, want %s (%q)", c.what, got, c.node.name, c.node.id)
		}
	}
	if t.Failed() {
		t.Logf("caller logs:\n%s\nowner logs:\n%s", tail(caller.logs.String(), 3000), tail(owner.logs.String(), 3000))
	}
}
