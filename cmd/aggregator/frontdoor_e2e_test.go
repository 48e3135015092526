package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence/pgtest"
)

// rawDo sends one request to url with an explicit Host header and extra headers, returning status, headers and
// the decoded JSON body.
func rawDo(t *testing.T, method, url, host string, body any, headers map[string]string) (int, http.Header, map[string]any) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, resp.Header, out
}

// waitFor polls cond every 50 ms until it holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDNSRebindingRefusedE2E replays the attack of the issue against the daemon binary with the default settings
// (loopback, no token): a page whose name resolves to 127.0.0.1 POSTs a STDIO server that runs `touch FILE`. It
// is answered 403 HOST_NOT_ALLOWED, nothing is registered and the file never appears; the MCP listener's /mcp,
// /sse and /mcp/servers/{name} refuse the same way, and a foreign Origin is 403 ORIGIN_NOT_ALLOWED on both.
func TestDNSRebindingRefusedE2E(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	d := newDaemon(t, "")
	d.start()
	restHost := strings.TrimPrefix(strings.SplitN(d.base, "/api/", 2)[0], "http://")
	mcpHost := strings.TrimPrefix(d.mcp, "http://")
	_, restPort, _ := net.SplitHostPort(restHost)
	_, mcpPort, _ := net.SplitHostPort(mcpHost)
	file := filepath.Join(t.TempDir(), "pwned")
	reg := map[string]any{"name": "pwn", "transport_type": "STDIO",
		"connection_config": map[string]any{"command": "touch", "args": []string{file}}}

	evilREST := "evil.example:" + restPort
	code, _, body := rawDo(t, "POST", d.base+"/servers", evilREST, reg, map[string]string{"Origin": "http://" + evilREST})
	if code != http.StatusForbidden || body["error_code"] != "HOST_NOT_ALLOWED" || body["detail"] == nil {
		t.Fatalf("rebinding POST: %d %v", code, body)
	}
	code, _, body = rawDo(t, "POST", d.base+"/servers", "", reg, map[string]string{"Origin": "http://evil.example"})
	if code != http.StatusForbidden || body["error_code"] != "ORIGIN_NOT_ALLOWED" {
		t.Fatalf("cross-origin POST: %d %v", code, body)
	}
	if _, list := d.do("GET", "/servers", nil); list["total"] != 0.0 {
		t.Fatalf("something was registered: %v", list)
	}

	evilMCP := "evil.example:" + mcpPort
	for _, path := range []string{"/mcp", "/sse", "/mcp/servers/everything", "/readyz"} {
		method := "POST"
		if path == "/sse" || path == "/readyz" {
			method = "GET"
		}
		code, _, body := rawDo(t, method, d.mcp+path, evilMCP, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "ping"},
			map[string]string{"Origin": "http://" + evilMCP, "Accept": "application/json, text/event-stream"})
		if code != http.StatusForbidden || body["error_code"] != "HOST_NOT_ALLOWED" {
			t.Errorf("%s %s with a rebound Host: %d %v", method, path, code, body)
		}
	}
	code, _, body = rawDo(t, "POST", d.mcp+"/mcp", "", map[string]any{"jsonrpc": "2.0", "id": 1, "method": "ping"},
		map[string]string{"Origin": "https://evil.example", "Accept": "application/json, text/event-stream"})
	if code != http.StatusForbidden || body["error_code"] != "ORIGIN_NOT_ALLOWED" {
		t.Errorf("/mcp with a foreign Origin: %d %v", code, body)
	}
	// Loopback names still work.
	if code, _, body := rawDo(t, "GET", d.base+"/servers", "localhost:"+restPort, nil, nil); code != 200 {
		t.Fatalf("localhost Host refused: %d %v", code, body)
	}
	// Give a registration that slipped through every chance to run its command.
	time.Sleep(time.Second)
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("the attack's file exists (%v): the command ran", err)
	}
}

// TestProbesAndRequestLogsE2E: /livez and /readyz answer on both listeners without a token; requests on both
// listeners leave one access line with the same fields; probes are not logged at INFO; /metrics is labelled by
// its route.
func TestProbesAndRequestLogsE2E(t *testing.T) {
	d := newDaemon(t, "")
	d.env = append(d.env, "MCP_AGGREGATOR_ADMIN_TOKENS=ops:"+strings.Repeat("a", 32), "MCP_AGGREGATOR_METRICS_OPEN=true")
	d.start()
	rest := strings.SplitN(d.base, "/api/", 2)[0]
	for _, base := range []string{rest, d.mcp} {
		waitFor(t, 30*time.Second, base+"/readyz", func() bool {
			code, _, _ := rawDo(t, "GET", base+"/readyz", "", nil, nil)
			return code == 200
		})
		if code, _, body := rawDo(t, "GET", base+"/livez", "", nil, nil); code != 200 || body["status"] != "ok" {
			t.Fatalf("%s/livez: %d %v", base, code, body)
		}
	}
	rawDo(t, "GET", rest+"/metrics", "", nil, nil)
	if code, _, _ := rawDo(t, "POST", d.mcp+"/mcp", "", map[string]any{}, map[string]string{"X-Request-ID": "mcp-log-1"}); code != 401 {
		t.Fatalf("/mcp without a token: %d", code)
	}
	code, _, _ := rawDo(t, "GET", d.base+"/servers", "", nil, map[string]string{"Authorization": "Bearer " + strings.Repeat("a", 32), "X-Request-ID": "rest-log-1"})
	if code != 200 {
		t.Fatalf("GET /servers: %d", code)
	}
	_, _, _ = rawDo(t, "GET", rest+"/metrics", "", nil, nil)
	resp, err := http.Get(rest + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metricsText, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !regexp.MustCompile(`mcp_aggregator_http_requests_total\{[^}]*route="/metrics"`).Match(metricsText) {
		t.Errorf("/metrics is not labelled with its route")
	}
	if bytes.Contains(metricsText, []byte("protoactor_")) { // MCP_AGGREGATOR_ACTOR_METRICS is off by default
		t.Errorf("/metrics shows protoactor's instruments, which were not asked for")
	}

	lines := map[string]map[string]any{}
	waitFor(t, 10*time.Second, "both access lines", func() bool {
		sc := bufio.NewScanner(strings.NewReader(d.logs.String()))
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) != nil || m["msg"] != "http request" {
				continue
			}
			if rid, _ := m["request_id"].(string); rid != "" {
				lines[rid] = m
			}
			if m["level"] == "INFO" && (m["route"] == "/readyz" || m["route"] == "/livez" || m["route"] == "/metrics") {
				t.Fatalf("probe logged at INFO: %v", m)
			}
		}
		return lines["mcp-log-1"] != nil && lines["rest-log-1"] != nil
	})
	for _, rid := range []string{"mcp-log-1", "rest-log-1"} {
		for _, k := range []string{"listener", "method", "route", "status", "duration_ms", "request_id", "client", "client_ip", "bytes"} {
			if _, ok := lines[rid][k]; !ok {
				t.Errorf("%s: no %q in %v", rid, k, lines[rid])
			}
		}
	}
	if lines["mcp-log-1"]["route"] != "/mcp" || lines["mcp-log-1"]["status"] != 401.0 || lines["rest-log-1"]["client"] != "ops" {
		t.Errorf("lines: %v / %v", lines["mcp-log-1"], lines["rest-log-1"])
	}
}

// inFlight reads mcp_aggregator_tool_calls_in_flight{server=name} from /metrics (0 when absent).
func inFlight(t *testing.T, rest, name string) string {
	t.Helper()
	resp, err := http.Get(rest + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^mcp_aggregator_tool_calls_in_flight\{server="` + regexp.QuoteMeta(name) + `"\} (\S+)$`).FindSubmatch(raw)
	if m == nil {
		return "0"
	}
	return string(m[1])
}

// TestRESTToolCallCancelledOnDisconnectE2E: a slow tool called over REST whose client closes the connection is
// cancelled at the backend: the in-flight gauge drops back to 0 within seconds, not after the 30 s the call
// would take.
func TestRESTToolCallCancelledOnDisconnectE2E(t *testing.T) {
	d := newDaemon(t, "")
	d.start()
	rest := strings.SplitN(d.base, "/api/", 2)[0]
	cmd, args := peertest.EverythingStdio(t)
	code, s := d.do("POST", "/servers", map[string]any{"name": "everything", "transport_type": "STDIO",
		"connection_config": map[string]any{"command": cmd, "args": args}})
	if code != 201 {
		t.Fatalf("register: %d %v", code, s)
	}
	id := s["id"].(string)
	d.waitStatus(id, "CONNECTED", 60*time.Second)
	// Routable, not only stored: the routing table follows the store by an event.
	waitFor(t, 30*time.Second, "tools routable", func() bool {
		c, _, _ := rawDo(t, "POST", rest+"/api/v1/tools/call", "", map[string]any{"name": "everything.echo", "arguments": map[string]any{"message": "x"}}, nil)
		return c == 200
	})

	conn, err := net.Dial("tcp", strings.TrimPrefix(rest, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	body := `{"name":"everything.trigger-long-running-operation","arguments":{"duration":30,"steps":30}}`
	fmt.Fprintf(conn, "POST /api/v1/tools/call HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		strings.TrimPrefix(rest, "http://"), len(body), body)
	waitFor(t, 20*time.Second, "the call in flight", func() bool { return inFlight(t, rest, "everything") == "1" })
	conn.Close()
	closed := time.Now()
	waitFor(t, 5*time.Second, "the call cancelled after the client left", func() bool { return inFlight(t, rest, "everything") == "0" })
	t.Logf("in-flight back to 0 %v after the client closed", time.Since(closed).Round(10*time.Millisecond))
	if !strings.Contains(d.logs.String(), "client disconnected during a tool call") {
		t.Errorf("no log line for the cancellation")
	}
}

// TestStoreOutageE2E cuts the daemon's PostgreSQL (a TCP proxy between them) and restores it: meanwhile reads and
// registrations answer 503 STORE_UNAVAILABLE with Retry-After (not 500), /readyz is 503 and /livez 200; nothing
// is queued (the refused registration does not appear later); afterwards everything works again.
func TestStoreOutageE2E(t *testing.T) {
	proxy, dbURL := pgtest.NewProxy(t, pgtest.NewDatabase(t))
	d := newDaemon(t, dbURL)
	d.start()
	rest := strings.SplitN(d.base, "/api/", 2)[0]
	waitFor(t, 30*time.Second, "ready", func() bool { c, _, _ := rawDo(t, "GET", rest+"/readyz", "", nil, nil); return c == 200 })

	proxy.Cut()
	reg := map[string]any{"name": "during-outage", "transport_type": "STDIO", "connection_config": map[string]any{"command": "true"}}
	outageEnd := time.Now().Add(7 * time.Second)
	for i := 0; time.Now().Before(outageEnd); i++ {
		code, hdr, body := rawDo(t, "GET", d.base+"/servers", "", nil, nil)
		if code != 503 || body["error_code"] != "STORE_UNAVAILABLE" || hdr.Get("Retry-After") == "" {
			t.Fatalf("GET /servers during the outage: %d %v %v", code, hdr, body)
		}
		if i == 0 {
			code, hdr, body = rawDo(t, "POST", d.base+"/servers", "", reg, nil)
			if code != 503 || body["error_code"] != "STORE_UNAVAILABLE" || hdr.Get("Retry-After") == "" {
				t.Fatalf("register during the outage: %d %v %v", code, hdr, body)
			}
			if c, _, _ := rawDo(t, "GET", rest+"/readyz", "", nil, nil); c != 503 {
				t.Fatalf("/readyz during the outage: %d", c)
			}
			if c, _, _ := rawDo(t, "GET", rest+"/livez", "", nil, nil); c != 200 {
				t.Fatalf("/livez during the outage: %d", c)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}

	proxy.Restore()
	waitFor(t, 30*time.Second, "GET /servers after the restore", func() bool {
		c, _, _ := rawDo(t, "GET", d.base+"/servers", "", nil, nil)
		return c == 200
	})
	if _, list := d.do("GET", "/servers", nil); list["total"] != 0.0 {
		t.Fatalf("the refused registration was queued: %v", list)
	}
	if code, body := d.do("POST", "/servers", reg); code != 201 {
		t.Fatalf("register after the restore: %d %v", code, body)
	}
	if c, _, _ := rawDo(t, "GET", rest+"/readyz", "", nil, nil); c != 200 {
		t.Fatalf("/readyz after the restore: %d", c)
	}
}

// TestAllowedHostConsistentE2E: a host listed in MCP_AGGREGATOR_ALLOWED_HOSTS is served alike by REST, /mcp,
// /sse and /mcp/servers/{name} (the go-sdk's own localhost check, which would refuse it on a loopback socket, is
// off: the listener's guard decides), and a listed origin passes too.
func TestAllowedHostConsistentE2E(t *testing.T) {
	d := newDaemon(t, "")
	d.env = append(d.env, "MCP_AGGREGATOR_ALLOWED_HOSTS=aggregator.example", "MCP_AGGREGATOR_ALLOWED_ORIGINS=https://app.example")
	d.start()
	_, restPort, _ := net.SplitHostPort(strings.TrimPrefix(strings.SplitN(d.base, "/api/", 2)[0], "http://"))
	_, mcpPort, _ := net.SplitHostPort(strings.TrimPrefix(d.mcp, "http://"))
	origin := map[string]string{"Origin": "https://app.example"}
	if code, _, body := rawDo(t, "GET", d.base+"/servers", "aggregator.example:"+restPort, nil, origin); code != 200 {
		t.Fatalf("REST with an allowed host: %d %v", code, body)
	}
	init := map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
		"protocolVersion": "2025-11-25", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "1"}}}
	hdr := map[string]string{"Origin": "https://app.example", "Accept": "application/json, text/event-stream"}
	if code, _, body := rawDo(t, "POST", d.mcp+"/mcp", "aggregator.example:"+mcpPort, init, hdr); code != 200 {
		t.Errorf("/mcp with an allowed host: %d %v", code, body)
	}
	// /mcp/servers/{name} of an unknown server: the proxy's own 404, not a Host refusal.
	if code, _, body := rawDo(t, "POST", d.mcp+"/mcp/servers/nope", "aggregator.example:"+mcpPort, init, hdr); code == 403 {
		t.Errorf("/mcp/servers/{name} refused an allowed host: %d %v", code, body)
	}
	// /sse streams: only the status line matters.
	req, _ := http.NewRequest("GET", d.mcp+"/sse", nil)
	req.Host = "aggregator.example:" + mcpPort
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/sse with an allowed host: %d", resp.StatusCode)
	}
	if code, _, body := rawDo(t, "GET", d.base+"/servers", "other.example:"+restPort, nil, nil); code != 403 || body["error_code"] != "HOST_NOT_ALLOWED" {
		t.Errorf("an unlisted host: %d %v", code, body)
	}
}
