package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/internal/peertest"
)

// TestImportCommandEndToEnd: `aggregator import FILE` against a running daemon registers a Claude Desktop file's
// stdio server (a real server-everything), which connects and lists its tools; an entry with an unknown transport
// and two entries that share a name are reported invalid and registered not at all; a dry run registers nothing;
// importing again skips; GET /export writes the server back without the secret of its env in clear.
func TestImportCommandEndToEnd(t *testing.T) {
	node, args := peertest.EverythingStdio(t)
	d := newDaemon(t, "")
	d.start()

	file := map[string]any{"mcpServers": map[string]any{
		"Everything Server": map[string]any{"command": node, "args": args, "env": map[string]string{"SECRET_THING": "hunter2-clear"}},
		"ws":                map[string]any{"type": "websocket", "url": "wss://h.example"},
		"twin":              map[string]any{"command": node},
		"Twin":              map[string]any{"command": node},
	}}
	raw, _ := json.Marshal(file)
	path := filepath.Join(t.TempDir(), "claude_desktop_config.json")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}

	code, out := runBinary(t, d, time.Minute, nil, "import", "-dry-run", path)
	if code != 1 || !strings.Contains(out, "dry run: 1 created, 0 skipped, 3 invalid, 0 failed") {
		t.Fatalf("dry run: exit %d\n%s", code, out)
	}
	if _, list := d.do("GET", "/servers", nil); list["total"] != float64(0) {
		t.Fatalf("dry run registered: %v", list)
	}

	code, out = runBinary(t, d, time.Minute, nil, "import", path)
	t.Logf("import:\n%s", out)
	for _, want := range []string{"created  everything-server  Everything Server  STDIO", "Unknown transport \"websocket\"",
		"Duplicate server name \"twin\"", "1 created, 0 skipped, 3 invalid, 0 failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("import output lacks %q", want)
		}
	}
	if code != 1 {
		t.Errorf("exit %d with invalid entries, want 1", code)
	}
	_, list := d.do("GET", "/servers", nil)
	servers, _ := list["servers"].([]any)
	if len(servers) != 1 {
		t.Fatalf("servers after import: %v", list)
	}
	id := servers[0].(map[string]any)["id"].(string)
	d.waitStatus(id, "CONNECTED", 30*time.Second)
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, srv := d.do("GET", "/servers/"+id, nil)
		if n, _ := srv["tool_count"].(float64); n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no tools discovered: %v", srv)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, audit := d.do("GET", "/audit", nil)
	if recs, _ := audit["records"].([]any); len(recs) != 1 || recs[0].(map[string]any)["event"] != "server.registered" {
		t.Errorf("audit: %v", audit)
	}

	code, out = runBinary(t, d, time.Minute, nil, "import", "-json", path)
	var rep map[string]any
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 || rep["counts"].(map[string]any)["skipped"] != float64(1) {
		t.Errorf("second import: exit %d, %v\n%s", code, err, out)
	}

	status, export := d.do("GET", "/export", nil)
	b, _ := json.Marshal(export)
	if status != 200 || strings.Contains(string(b), "hunter2") || !strings.Contains(string(b), `"SECRET_THING":"***"`) ||
		!strings.Contains(string(b), `"everything-server"`) {
		t.Errorf("export %d: %s", status, b)
	}

	code, out = runBinary(t, d, time.Minute, nil, "import", "/nonexistent/file.json")
	if code != 1 || !strings.Contains(out, "no such file") {
		t.Errorf("missing file: exit %d\n%s", code, out)
	}
}
