package api

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/mcpgw/aggregator/persistence"
)

// update rewrites the golden files instead of comparing with them: go test ./http/api -run Golden -update.
var update = flag.Bool("update", false, "rewrite testdata/*.golden with what the code produces")

// checkGolden compares a JSON body, indented (the body's bytes but for whitespace: key order and values as
// served), with testdata/name; -update rewrites the file.
func checkGolden(t *testing.T, name string, body []byte) {
	t.Helper()
	var got bytes.Buffer
	if err := json.Indent(&got, body, "", "  "); err != nil {
		t.Fatalf("%s: body is not JSON: %v: %s", name, err, body)
	}
	got.WriteByte('\n')
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run Golden -update to create it)", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("%s differs from what is served (if the change is meant, rerun with -update and review the diff):\n%s",
			path, lineDiff(want, got.Bytes()))
	}
}

// lineDiff shows the first lines where want and got part.
func lineDiff(want, got []byte) string {
	w, g := bytes.Split(want, []byte("\n")), bytes.Split(got, []byte("\n"))
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl []byte
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if !bytes.Equal(wl, gl) {
			return "line " + strconv.Itoa(i+1) + ":\n- " + string(wl) + "\n+ " + string(gl)
		}
	}
	return "(same lines)"
}

// TestOpenAPIGolden pins the OpenAPI document the daemon serves (default configuration): clients are generated
// from it, so a change must be deliberate.
func TestOpenAPIGolden(t *testing.T) {
	e := newEnv(t)
	r := e.do(t, "GET", OpenAPIPath, "")
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	checkGolden(t, "openapi.golden", r.body)
}

// TestExportGolden pins both client file formats GET /export writes (desktop clients read them as they are),
// for one server of each transport, secrets masked.
func TestExportGolden(t *testing.T) {
	e := newEnv(t)
	e.store.put(persistence.Server{Name: "local", TransportType: persistence.TransportSTDIO,
		ConnectionConfig: json.RawMessage(`{"command":"node","args":["srv.js","--token","s3cret"],"env":{"A":"clear-secret","B":"${B}"},"cwd":"/tmp"}`)})
	e.store.put(persistence.Server{Name: "remote", TransportType: persistence.TransportSSE,
		ConnectionConfig: json.RawMessage(`{"url":"https://user:pw@h.example/sse","headers":{"Authorization":"Bearer abc123","X-Trace":"1"}}`)})
	e.store.put(persistence.Server{Name: "web", TransportType: persistence.TransportHTTP,
		ConnectionConfig: json.RawMessage(`{"base_url":"https://h.example/mcp","headers":{"Authorization":"Bearer ${TOKEN}"}}`)})
	for _, tc := range []struct{ query, golden string }{
		{"", "export_mcpservers.golden"},
		{"?format=vscode", "export_vscode.golden"},
	} {
		r := e.do(t, "GET", "/api/v1/aggregator/export"+tc.query, "")
		if r.status != 200 {
			t.Fatalf("%s: status %d: %s", tc.golden, r.status, r.body)
		}
		checkGolden(t, tc.golden, r.body)
	}
}
