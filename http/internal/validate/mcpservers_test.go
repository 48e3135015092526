package validate

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/persistence"
)

func TestNormalizeName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"github", "github"},
		{"my-server_2", "my-server_2"},
		{"GitHub", "github"},
		{"My Server", "my-server"},
		{"@modelcontextprotocol/server-everything", "modelcontextprotocol-server-everything"},
		{"  spaced  out  ", "spaced-out"},
		{"123abc", "mcp-123abc"},
		{"_x", "x"},
		{"ünïcode", "n-code"},
		{"!!!", ""},
		{"", ""},
		{strings.Repeat("A", 300), strings.Repeat("a", MaxNameLength)},
	} {
		got := NormalizeName(tc.in)
		if got != tc.want {
			t.Errorf("NormalizeName(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if got != "" && (!nameRe.MatchString(got) || len(got) > MaxNameLength) {
			t.Errorf("NormalizeName(%q) = %q breaks the name rule", tc.in, got)
		}
	}
}

func TestImportEntries(t *testing.T) {
	type want struct {
		name, transport string
		config          string // the registered connection_config, when valid
		errPath         string // a location among the entry's errors, when invalid
		errMsg          string
	}
	for _, tc := range []struct {
		desc, file string
		want       []want
	}{
		{"claude stdio and url kinds", `{"mcpServers":{
			"everything":{"command":"npx","args":["-y","@modelcontextprotocol/server-everything"],"env":{"K":"${K}"}},
			"Remote SSE":{"url":"https://h.example/sse","headers":{"Authorization":"Bearer ${T}"}},
			"remote-http":{"url":"https://h.example/mcp"},
			"typed":{"type":"sse","url":"https://h.example/events"},
			"streamable":{"type":"streamable-http","url":"https://h.example/x"}}}`,
			[]want{
				{name: "everything", transport: "STDIO", config: `{"args":["-y","@modelcontextprotocol/server-everything"],"command":"npx","env":{"K":"${K}"}}`},
				{name: "remote-sse", transport: "SSE", config: `{"headers":{"Authorization":"Bearer ${T}"},"url":"https://h.example/sse"}`},
				{name: "remote-http", transport: "HTTP", config: `{"base_url":"https://h.example/mcp"}`},
				{name: "typed", transport: "SSE", config: `{"url":"https://h.example/events"}`},
				{name: "streamable", transport: "HTTP", config: `{"base_url":"https://h.example/x"}`},
			}},
		{"vscode servers with env refs", `{"inputs":[{"id":"tok","type":"promptString"}],"servers":{
			"fs":{"type":"stdio","command":"node","args":["srv.js"],"env":{"HOME_DIR":"${env:HOME_DIR}"}},
			"web":{"type":"http","url":"https://h.example/mcp","headers":{"X-Key":"${env:KEY}"}}}}`,
			[]want{
				{name: "fs", transport: "STDIO", config: `{"args":["srv.js"],"command":"node","env":{"HOME_DIR":"${HOME_DIR}"}}`},
				{name: "web", transport: "HTTP", config: `{"base_url":"https://h.example/mcp","headers":{"X-Key":"${KEY}"}}`},
			}},
		{"vscode input variables cannot be resolved", `{"servers":{
			"a":{"type":"http","url":"https://h/mcp","headers":{"Authorization":"Bearer ${input:tok}"}},
			"b":{"command":"x","env":{"K":"${config:k}"}}}}`,
			[]want{
				{name: "a", errPath: "body.servers.a.headers", errMsg: "${input:tok} is a VS Code variable"},
				{name: "b", errPath: "body.servers.b.env", errMsg: "${config:k} is a VS Code variable"},
			}},
		{"vscode settings.json", `{"mcp":{"servers":{"a":{"command":"x"}}}}`,
			[]want{{name: "a", transport: "STDIO", config: `{"command":"x"}`}}},
		{"bad entries stand alone", `{"mcpServers":{
			"ws":{"type":"websocket","url":"wss://h"},
			"nothing":{},
			"mixed":{"command":"x","url":"https://h"},
			"notobj":[1],
			"badurl":{"url":"ftp://h/sse"},
			"ok":{"command":"x"}}}`,
			[]want{
				{name: "ws", errPath: "body.mcpServers.ws.type", errMsg: "Unknown transport"},
				{name: "nothing", errPath: "body.mcpServers.nothing", errMsg: `needs "command"`},
				{name: "mixed", errPath: "body.mcpServers.mixed.url", errMsg: "not used by a stdio server"},
				{name: "notobj", errPath: "body.mcpServers.notobj", errMsg: "JSON object"},
				{name: "badurl", errPath: "body.mcpServers.badurl.url"},
				{name: "ok", transport: "STDIO", config: `{"command":"x"}`},
			}},
		{"duplicates by key and by normalisation", `{"mcpServers":{"a":{"command":"x"},"a":{"command":"y"},"B c":{"command":"x"},"b-c":{"command":"y"}}}`,
			[]want{
				{name: "a", errPath: "body.mcpServers.a", errMsg: "Duplicate server name"},
				{name: "a", errPath: "body.mcpServers.a", errMsg: "Duplicate server name"},
				{name: "b-c", errPath: "body.mcpServers.B c", errMsg: "Duplicate server name"},
				{name: "b-c", errPath: "body.mcpServers.b-c", errMsg: "Duplicate server name"},
			}},
		{"disabled and description", `{"mcpServers":{"d":{"command":"x","disabled":true,"description":"hi","autoApprove":[]}}}`,
			[]want{{name: "d", transport: "STDIO", config: `{"command":"x"}`}}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			f, errs := Import([]byte(tc.file), Outbound(nil))
			if errs != nil {
				t.Fatalf("file errors: %+v", errs)
			}
			if len(f.Entries) != len(tc.want) {
				t.Fatalf("%d entries, want %d: %+v", len(f.Entries), len(tc.want), f.Entries)
			}
			for i, w := range tc.want {
				e := f.Entries[i]
				if e.Name != w.name {
					t.Errorf("entry %d name %q, want %q", i, e.Name, w.name)
				}
				if w.errPath == "" {
					if len(e.Errors) > 0 {
						t.Errorf("entry %q: unexpected errors %+v", e.SourceName, e.Errors)
						continue
					}
					if e.Request.TransportType != w.transport || e.TransportType != w.transport {
						t.Errorf("entry %q transport %q, want %q", e.SourceName, e.Request.TransportType, w.transport)
					}
					var got, exp any
					_ = json.Unmarshal(e.Request.ConnectionConfig, &got)
					_ = json.Unmarshal([]byte(w.config), &exp)
					gb, _ := json.Marshal(got)
					eb, _ := json.Marshal(exp)
					if string(gb) != string(eb) {
						t.Errorf("entry %q config %s, want %s", e.SourceName, gb, eb)
					}
					continue
				}
				if e.Request.Name != "" {
					t.Errorf("invalid entry %q carries a request", e.SourceName)
				}
				found := false
				for _, fe := range e.Errors {
					if fe.Path() == w.errPath && strings.Contains(fe.Msg, w.errMsg) {
						found = true
					}
				}
				if !found {
					t.Errorf("entry %q: no error at %s containing %q in %+v", e.SourceName, w.errPath, w.errMsg, e.Errors)
				}
				if e.Reason() == "" {
					t.Errorf("entry %q: empty reason", e.SourceName)
				}
			}
		})
	}
}

func TestImportDisabledAndIgnored(t *testing.T) {
	f, _ := Import([]byte(`{"mcpServers":{"d":{"command":"x","disabled":true,"description":"hi","autoApprove":[],"timeout":5}}}`), Outbound(nil))
	e := f.Entries[0]
	if e.Request.AutoConnect || e.Request.Description == nil || *e.Request.Description != "hi" {
		t.Errorf("disabled/description not carried: %+v", e.Request)
	}
	if strings.Join(e.Ignored, ",") != "autoApprove,timeout" {
		t.Errorf("ignored = %v", e.Ignored)
	}
	if e.Request.TransportType != persistence.TransportSTDIO {
		t.Errorf("transport %q", e.Request.TransportType)
	}
}

func TestImportFileErrors(t *testing.T) {
	for _, tc := range []struct{ file, path string }{
		{``, "body"},
		{`not json`, "body"},
		{`[]`, "body"},
		{`{"other":{}}`, "body.mcpServers"},
		{`{"mcpServers":[]}`, "body.mcpServers"},
		{`{"mcpServers":{},"dry_run":"yes"}`, "body.dry_run"},
		{`{"mcpServers":{},"mcpServers":{}}`, "body.mcpServers"},
	} {
		f, errs := Import([]byte(tc.file), Outbound(nil))
		if len(errs) == 0 || f.Entries != nil {
			t.Errorf("%q: errs %v entries %v", tc.file, errs, f.Entries)
			continue
		}
		if errs[0].Path() != tc.path {
			t.Errorf("%q: error at %s, want %s (%+v)", tc.file, errs[0].Path(), tc.path, errs)
		}
	}
	big := `{"mcpServers":{` + strings.Repeat(`"a":{},`, MaxImportEntries) + `"z":{}}}`
	if _, errs := Import([]byte(big), Outbound(nil)); len(errs) == 0 {
		t.Errorf("a file over %d servers was accepted", MaxImportEntries)
	}
	f, errs := Import([]byte(`{"dry_run":true,"mcpServers":{}}`), Outbound(nil))
	if errs != nil || !f.DryRun || f.Format != "mcpServers" {
		t.Errorf("dry_run flag: %+v %v", f, errs)
	}
}

// FuzzImport: on any input Import must not panic; it answers either file errors and no entries, or entries each
// of which is either valid (a request that obeys the name and transport rules) or carries well-formed errors.
func FuzzImport(f *testing.F) {
	for _, s := range []string{
		`{"mcpServers":{"everything":{"command":"npx","args":["-y","x"],"env":{"A":"1"}}}}`,
		`{"servers":{"w":{"type":"http","url":"https://h/mcp","headers":{"X":"${env:K}"}}}}`,
		`{"mcp":{"servers":{"a":{"type":"sse","url":"http://127.0.0.1:1/sse"}}}}`,
		`{"mcpServers":{"A B":{"command":"x"},"a-b":{"command":"y"},"":{},"1":{"url":"x"}}}`,
		`{"mcpServers":{"x":{"type":"websocket"},"y":[],"z":{"command":1,"disabled":"no"}}}`,
		`{"mcpServers":{"x":{"serverUrl":"https://h/sse","transport":"sse"}},"dry_run":true}`,
		``, `{`, `[]`, `null`, `{"mcpServers":null}`, "\xff{}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		file, errs := Import(body, Outbound(nil))
		checkFieldErrors(t, errs)
		if len(errs) > 0 {
			if file.Entries != nil {
				t.Fatalf("file errors and entries")
			}
			return
		}
		for _, e := range file.Entries {
			checkFieldErrors(t, e.Errors)
			if len(e.Errors) > 0 {
				if e.Request.Name != "" {
					t.Fatalf("invalid entry with a request")
				}
				continue
			}
			if e.Request.Name != e.Name || !nameRe.MatchString(e.Name) || len(e.Name) > MaxNameLength {
				t.Fatalf("valid entry with name %q (request %q)", e.Name, e.Request.Name)
			}
			if e.Request.TransportType != e.TransportType || len(e.Request.ConnectionConfig) == 0 {
				t.Fatalf("valid entry without transport or config: %+v", e)
			}
		}
	})
}
