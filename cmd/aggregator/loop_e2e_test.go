package main

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// The daemon refuses itself as a backend: its own /mcp by address or loopback name at registration (422), the
// same through a ${VAR} host at connect time (ERROR, LOOP_DETECTED), and a request carrying its own instance id in
// the hop header on any MCP route (508).
func TestDaemonRefusesItself(t *testing.T) {
	d := newDaemon(t, "")
	mcpHostPort := strings.TrimPrefix(d.mcp, "http://")
	d.env = append(d.env, "SELF_MCP="+mcpHostPort, "MCP_AGGREGATOR_OUTBOUND_DENY=10.66.0.0/16")
	d.start()
	port := mcpHostPort[strings.LastIndex(mcpHostPort, ":"):]
	for _, u := range []string{d.mcp + "/mcp", "http://localhost" + port + "/mcp", "http://2130706433" + port + "/mcp",
		"http://169.254.169.254/mcp", "http://0xA9FEA9FE/mcp", "https://10.66.1.1/mcp"} {
		code, body := d.do("POST", "/servers", map[string]any{"name": "self", "transport_type": "HTTP",
			"connection_config": map[string]any{"base_url": u, "allow_insecure_http": true}})
		if code != http.StatusUnprocessableEntity {
			t.Errorf("register %s: %d %v, want 422", u, code, body)
		}
	}
	code, s := d.do("POST", "/servers", map[string]any{"name": "self", "transport_type": "HTTP",
		"connection_config": map[string]any{"base_url": "http://${SELF_MCP}/mcp"}})
	if code != http.StatusCreated {
		t.Fatalf("register through ${SELF_MCP}: %d %v", code, s)
	}
	id, _ := s["id"].(string)
	d.waitStatus(id, "ERROR", 30*time.Second)
	_, got := d.do("GET", "/servers/"+id, nil)
	if msg, _ := got["error_message"].(string); !strings.Contains(msg, "LOOP_DETECTED") {
		t.Errorf("error_message %q does not say LOOP_DETECTED", msg)
	}

	// The hop header: learn the instance id from initialize, then send it back.
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	post := func(path, via string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, d.mcp+path, strings.NewReader(init))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if via != "" {
			req.Header.Set("Mcp-Aggregator-Via", via)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil || strings.Contains(b.String(), "instance_id") {
				break
			}
		}
		return resp.StatusCode, b.String()
	}
	_, body := post("/mcp", "")
	const key = `"io.mcpgw.aggregator/instance_id":"`
	i := strings.Index(body, key)
	if i < 0 {
		t.Fatalf("initialize does not report the instance id: %s", body)
	}
	instance := body[i+len(key):]
	instance = instance[:strings.Index(instance, `"`)]
	for _, path := range []string{"/mcp", "/sse", "/mcp/servers/self"} {
		if code, body := post(path, "other, "+instance); code != http.StatusLoopDetected || !strings.Contains(body, `"error_code":"LOOP_DETECTED"`) {
			t.Errorf("%s with our own id in the hop header: %d %s", path, code, body)
		}
	}
}
