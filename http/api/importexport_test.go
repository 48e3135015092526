package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/persistence"
)

func decodeReport(t *testing.T, r response) ImportReport {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var rep ImportReport
	if err := json.Unmarshal(r.body, &rep); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
	return rep
}

const importFile = `{"mcpServers":{
	"Everything Server":{"command":"npx","args":["-y","@modelcontextprotocol/server-everything"],"env":{"API_KEY":"${API_KEY}"}},
	"existing":{"url":"https://h.example/sse"},
	"ws":{"type":"websocket","url":"wss://h.example"},
	"dup":{"command":"a"},
	"DUP":{"command":"b"}}}`

func TestImportServers(t *testing.T) {
	for _, dry := range []bool{true, false} {
		t.Run(fmt.Sprintf("dry_run=%v", dry), func(t *testing.T) {
			e := newEnv(t)
			e.store.put(persistence.Server{Name: "existing", TransportType: persistence.TransportSSE, ConnectionConfig: json.RawMessage(`{"url":"https://other.example/sse"}`)})
			rep := decodeReport(t, e.do(t, "POST", fmt.Sprintf("/api/v1/aggregator/import?dry_run=%v", dry), importFile))
			if rep.DryRun != dry || rep.Format != "mcpServers" {
				t.Errorf("dry_run %v format %q", rep.DryRun, rep.Format)
			}
			want := map[string]string{"Everything Server": ImportCreated, "existing": ImportSkipped, "ws": ImportInvalid,
				"dup": ImportInvalid, "DUP": ImportInvalid}
			if len(rep.Results) != len(want) {
				t.Fatalf("%d results: %+v", len(rep.Results), rep.Results)
			}
			for _, r := range rep.Results {
				if r.Status != want[r.SourceName] {
					t.Errorf("%q: status %q, want %q (%s)", r.SourceName, r.Status, want[r.SourceName], r.Reason)
				}
				if r.Status == ImportInvalid && (r.Reason == "" || len(r.Errors) == 0) {
					t.Errorf("%q: invalid without a reason", r.SourceName)
				}
			}
			if rep.Renamed["Everything Server"] != "everything-server" || rep.Renamed["DUP"] != "dup" || len(rep.Renamed) != 2 {
				t.Errorf("renamed = %v", rep.Renamed)
			}
			if rep.Counts[ImportCreated] != 1 || rep.Counts[ImportSkipped] != 1 || rep.Counts[ImportInvalid] != 3 || rep.Counts[ImportFailed] != 0 {
				t.Errorf("counts = %v", rep.Counts)
			}
			var registers []actors.RegisterRequest
			for _, c := range e.control.Calls() {
				if c.method == "Register" {
					registers = append(registers, c.req)
				}
			}
			if dry {
				if len(registers) != 0 || len(e.store.audit) != 0 {
					t.Errorf("dry run registered %+v / audited %d", registers, len(e.store.audit))
				}
				return
			}
			if len(registers) != 1 || registers[0].Name != "everything-server" || registers[0].TransportType != persistence.TransportSTDIO ||
				!registers[0].AutoConnect || registers[0].Actor == "" {
				t.Fatalf("registered %+v", registers)
			}
			if len(e.store.audit) != 1 || e.store.audit[0].Event != "server.registered" || !strings.Contains(string(e.store.audit[0].Details), "Everything Server") {
				t.Errorf("audit = %+v", e.store.audit)
			}
			// Importing the same file again creates nothing more.
			again := decodeReport(t, e.do(t, "POST", "/api/v1/aggregator/import", importFile))
			if again.Counts[ImportCreated] != 0 || again.Counts[ImportSkipped] != 2 {
				t.Errorf("second import counts = %v", again.Counts)
			}
		})
	}
}

func TestImportBodyFlagAndFailures(t *testing.T) {
	e := newEnv(t)
	rep := decodeReport(t, e.do(t, "POST", "/api/v1/aggregator/import", `{"dry_run":true,"servers":{"a":{"type":"stdio","command":"x"}}}`))
	if !rep.DryRun || rep.Format != "servers" || rep.Counts[ImportCreated] != 1 || len(e.control.Calls()) != 0 {
		t.Errorf("body dry_run: %+v calls %v", rep, e.control.Calls())
	}
	// The daemon refusing a valid entry (here: the server limit) is reported on that entry.
	e.control.err = fmt.Errorf("register: %w", actors.ErrMaxServers)
	rep = decodeReport(t, e.do(t, "POST", "/api/v1/aggregator/import", `{"mcpServers":{"a":{"command":"x"}}}`))
	if rep.Results[0].Status != ImportFailed || !strings.Contains(rep.Results[0].Reason, "Maximum number of servers") {
		t.Errorf("failed entry: %+v", rep.Results[0])
	}
}

func TestImportFileRefused(t *testing.T) {
	e := newEnv(t)
	for _, body := range []string{`nope`, `{"x":1}`, `{"mcpServers":[]}`} {
		errs := fieldErrors(t, e.do(t, "POST", "/api/v1/aggregator/import", body))
		if errs[0].Loc[0] != "body" {
			t.Errorf("%q: %+v", body, errs)
		}
	}
	fieldErrors(t, e.do(t, "POST", "/api/v1/aggregator/import?dry_run=maybe", `{"mcpServers":{}}`))
	wantError(t, e.do(t, "POST", "/api/v1/aggregator/import", `{"mcpServers":{}}`, "Content-Type: text/plain"), 415, "UNSUPPORTED_MEDIA_TYPE")
	if n := len(e.control.Calls()); n != 0 {
		t.Errorf("control asked %d times", n)
	}
}

func TestExportServers(t *testing.T) {
	e := newEnv(t)
	e.store.put(persistence.Server{Name: "local", TransportType: persistence.TransportSTDIO,
		ConnectionConfig: json.RawMessage(`{"command":"node","args":["srv.js","--token","s3cret"],"env":{"A":"clear-secret","B":"${B}"},"cwd":"/tmp"}`)})
	e.store.put(persistence.Server{Name: "remote", TransportType: persistence.TransportSSE,
		ConnectionConfig: json.RawMessage(`{"url":"https://user:pw@h.example/sse","headers":{"Authorization":"Bearer abc123","X-Trace":"1"}}`)})
	e.store.put(persistence.Server{Name: "web", TransportType: persistence.TransportHTTP,
		ConnectionConfig: json.RawMessage(`{"base_url":"https://h.example/mcp","headers":{"Authorization":"Bearer ${TOKEN}"}}`)})

	r := e.do(t, "GET", "/api/v1/aggregator/export", "")
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	for _, secret := range []string{"clear-secret", "s3cret", "abc123", ":pw@"} {
		if strings.Contains(string(r.body), secret) {
			t.Errorf("export leaks %q: %s", secret, r.body)
		}
	}
	var f ExportFile
	if err := json.Unmarshal(r.body, &f); err != nil {
		t.Fatal(err)
	}
	local, remote, web := f.MCPServers["local"], f.MCPServers["remote"], f.MCPServers["web"]
	if local.Command != "node" || local.Type != "" || local.Env["B"] != "${B}" || local.Env["A"] != "***" || local.Cwd != "/tmp" {
		t.Errorf("local = %+v", local)
	}
	if remote.Type != "sse" || remote.Headers["Authorization"] != "Bearer ***" || remote.Headers["X-Trace"] != "1" {
		t.Errorf("remote = %+v", remote)
	}
	if web.Type != "http" || web.URL != "https://h.example/mcp" || web.Headers["Authorization"] != "Bearer ${TOKEN}" {
		t.Errorf("web = %+v", web)
	}

	// VS Code's format, and a round trip: what is exported imports as the same servers (skipped: they exist).
	r = e.do(t, "GET", "/api/v1/aggregator/export?format=vscode", "")
	var vs ExportFile
	if err := json.Unmarshal(r.body, &vs); err != nil || vs.Servers["local"].Type != "stdio" || vs.MCPServers != nil {
		t.Fatalf("vscode export: %s (%v)", r.body, err)
	}
	rep := decodeReport(t, e.do(t, "POST", "/api/v1/aggregator/import?dry_run=true", string(r.body)))
	for _, res := range rep.Results {
		if res.Status != ImportSkipped {
			t.Errorf("round trip %q: %s %s", res.SourceName, res.Status, res.Reason)
		}
	}
	fieldErrors(t, e.do(t, "GET", "/api/v1/aggregator/export?format=yaml", ""))
}

// TestImportExportCredentialFields: a per_user server exports its credential_mode and user_credential (a shared one
// neither), and the export imports back as the same registration; credential fields that break the registration's
// rules make that entry invalid (422-grade field errors located in the file), the others stand.
func TestImportExportCredentialFields(t *testing.T) {
	e := newEnv(t)
	e.store.put(persistence.Server{Name: "gh", TransportType: persistence.TransportHTTP,
		ConnectionConfig: json.RawMessage(`{"base_url":"https://gh.example/mcp"}`),
		CredentialMode:   persistence.CredentialPerUser, UserCredential: &persistence.UserCredentialSlot{Header: "Authorization", Prefix: "Bearer "}})
	e.store.put(persistence.Server{Name: "jira", TransportType: persistence.TransportSTDIO, ConnectionConfig: json.RawMessage(`{"command":"jira-mcp"}`),
		CredentialMode: persistence.CredentialPerUser, UserCredential: &persistence.UserCredentialSlot{Env: "JIRA_TOKEN"}})
	e.store.put(persistence.Server{Name: "plain", TransportType: persistence.TransportSTDIO, ConnectionConfig: json.RawMessage(`{"command":"x"}`),
		CredentialMode: persistence.CredentialShared})
	r := e.do(t, "GET", "/api/v1/aggregator/export", "")
	if r.status != 200 {
		t.Fatalf("export: %d %s", r.status, r.body)
	}
	var f ExportFile
	if err := json.Unmarshal(r.body, &f); err != nil {
		t.Fatal(err)
	}
	gh, jira, plain := f.MCPServers["gh"], f.MCPServers["jira"], f.MCPServers["plain"]
	if gh.CredentialMode != persistence.CredentialPerUser || gh.UserCredential == nil || *gh.UserCredential != (persistence.UserCredentialSlot{Header: "Authorization", Prefix: "Bearer "}) {
		t.Errorf("gh = %+v", gh)
	}
	if jira.CredentialMode != persistence.CredentialPerUser || jira.UserCredential == nil || jira.UserCredential.Env != "JIRA_TOKEN" {
		t.Errorf("jira = %+v", jira)
	}
	if plain.CredentialMode != "" || plain.UserCredential != nil || strings.Contains(string(r.body), `"plain":{"command":"x","credential`) {
		t.Errorf("plain = %+v", plain)
	}

	// The export, imported into an empty aggregator, registers the same credential settings.
	e2 := newEnv(t)
	rep := decodeReport(t, e2.do(t, "POST", "/api/v1/aggregator/import", string(r.body)))
	if rep.Counts[ImportCreated] != 3 {
		t.Fatalf("import of the export: %+v", rep.Results)
	}
	got := map[string]actors.RegisterRequest{}
	for _, c := range e2.control.Calls() {
		if c.method == "Register" {
			got[c.req.Name] = c.req
		}
	}
	if g := got["gh"]; g.CredentialMode != persistence.CredentialPerUser || g.UserCredential == nil || g.UserCredential.Header != "Authorization" || g.UserCredential.Prefix != "Bearer " {
		t.Errorf("gh registered %+v", g)
	}
	if g := got["jira"]; g.CredentialMode != persistence.CredentialPerUser || g.UserCredential == nil || g.UserCredential.Env != "JIRA_TOKEN" {
		t.Errorf("jira registered %+v", g)
	}
	if g := got["plain"]; g.CredentialMode != persistence.CredentialShared || g.UserCredential != nil {
		t.Errorf("plain registered %+v", g)
	}

	// Bad credential fields: that entry is invalid, located in the file; nothing of it registers.
	bad := []struct {
		name, entry, loc string
	}{
		{"per_user without slot", `{"command":"a","credential_mode":"per_user"}`, "user_credential"},
		{"unknown mode", `{"command":"a","credential_mode":"everyone"}`, "credential_mode"},
		{"header on stdio", `{"command":"a","credential_mode":"per_user","user_credential":{"header":"Authorization"}}`, "user_credential"},
		{"env on http", `{"url":"https://h.example/mcp","credential_mode":"per_user","user_credential":{"env":"K"}}`, "user_credential"},
		{"slot on shared", `{"command":"a","user_credential":{"env":"K"}}`, "user_credential"},
		{"not an object", `{"command":"a","credential_mode":"per_user","user_credential":"K"}`, "user_credential"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			rep := decodeReport(t, e.do(t, "POST", "/api/v1/aggregator/import", `{"mcpServers":{"bad":`+tc.entry+`,"good":{"command":"b"}}}`))
			if len(rep.Results) != 2 || rep.Results[0].Status != ImportInvalid || rep.Results[1].Status != ImportCreated {
				t.Fatalf("results %+v", rep.Results)
			}
			found := false
			for _, fe := range rep.Results[0].Errors {
				if len(fe.Loc) > 3 && fe.Loc[0] == "body" && fe.Loc[1] == "mcpServers" && fe.Loc[2] == "bad" && fe.Loc[3] == tc.loc {
					found = true
				}
			}
			if !found {
				t.Errorf("errors %+v, want one at %s", rep.Results[0].Errors, tc.loc)
			}
			for _, c := range e.control.Calls() {
				if c.method == "Register" && c.req.Name == "bad" {
					t.Errorf("registered %+v", c.req)
				}
			}
		})
	}
}
