package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/gateway/policy"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/search/classify"
)

// The fake control's access policy: the last document put, version counting the puts.

func (f *fakeControl) GetAccessPolicy(context.Context) (policy.Document, persistence.AccessPolicy, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var doc policy.Document
	if len(f.policy.Document) > 0 {
		if err := json.Unmarshal(f.policy.Document, &doc); err != nil {
			return doc, f.policy, err
		}
	}
	s, err := policy.Compile(doc)
	if err != nil {
		return doc, f.policy, err
	}
	return s.Document(), f.policy, nil
}

func (f *fakeControl) PutAccessPolicy(_ context.Context, doc policy.Document) (policy.Document, persistence.AccessPolicy, error) {
	s, err := policy.Compile(doc)
	if err != nil {
		return doc, persistence.AccessPolicy{}, err
	}
	raw, _ := json.Marshal(s.Document())
	f.mu.Lock()
	defer f.mu.Unlock()
	f.policy = persistence.AccessPolicy{Document: raw, Version: f.policy.Version + 1, UpdatedAt: time.Now().UTC()}
	return s.Document(), f.policy, nil
}

func TestAccessPolicyRoutes(t *testing.T) {
	toks, err := auth.Parse("ops:"+testAdminToken, "ci:"+testClientToken, "")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	e.app = New(Deps{Store: e.store, Control: e.control, Curation: e.control, Tokens: toks,
		Logger: slog.New(slog.NewJSONHandler(e.logs, nil))})
	admin := "Authorization: Bearer " + testAdminToken
	path := base + "/policy"

	if r := e.do(t, "GET", path, "", admin); r.status != http.StatusOK ||
		!strings.Contains(string(r.body), `"default":"allow","rules":[],"version":0,"updated_at":null`) {
		t.Fatalf("GET before any write: %d %s", r.status, r.body)
	}
	for _, authz := range []string{"Authorization: Bearer " + testClientToken} {
		if r := e.do(t, "GET", path, "", authz); r.status != http.StatusForbidden {
			t.Fatalf("GET as a client: %d %s", r.status, r.body)
		}
		if r := e.do(t, "PUT", path, `{"rules":[]}`, authz); r.status != http.StatusForbidden {
			t.Fatalf("PUT as a client: %d %s", r.status, r.body)
		}
	}

	bad := []struct{ body, loc, msg string }{
		{`{"rules":[{"name":"a","effect":"deny","when":"subject == "}]}`, `["body","rules",0,"when"]`, "line 1, column 12"},
		{`{"rules":[{"name":"a","effect":"deny","when":"true"},{"name":"b","effect":"deny","when":"sbject == 'x'"}]}`, `["body","rules",1,"when"]`, "undeclared reference to 'sbject'"},
		{`{"rules":[{"name":"a","effect":"maybe","when":"true"}]}`, `["body","rules",0,"effect"]`, "effect"},
		{`{"default":"block"}`, `["body","default"]`, "default"},
		{`{"rules":[],"extra":1}`, `["body"]`, "extra"},
		{`null`, `["body"]`, "object"},
	}
	for _, b := range bad {
		r := e.do(t, "PUT", path, b.body, admin)
		if r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), `"loc":`+b.loc) ||
			!strings.Contains(string(r.body), b.msg) || !strings.Contains(string(r.body), `"error_code":"VALIDATION_ERROR"`) {
			t.Errorf("PUT %s: %d %s; want 422 at %s saying %q", b.body, r.status, r.body, b.loc, b.msg)
		}
	}

	good := `{"default":"allow","rules":[{"name":"ci-read-only","effect":"deny","when":"subject == 'ci' && !annotations.?readOnlyHint.orValue(false)"}]}`
	r := e.do(t, "PUT", path, good, admin)
	if r.status != http.StatusOK || r.json(t)["version"] != float64(1) {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}
	if r := e.do(t, "GET", path, "", admin); r.status != http.StatusOK || !strings.Contains(string(r.body), `"name":"ci-read-only"`) {
		t.Fatalf("GET after PUT: %d %s", r.status, r.body)
	}
	e.store.mu.Lock()
	defer e.store.mu.Unlock()
	if n := len(e.store.audit); n != 1 || e.store.audit[0].Event != "policy.updated" || e.store.audit[0].Actor != "ops" {
		t.Fatalf("audit %+v, want one policy.updated by ops", e.store.audit)
	}
}

// staticPolicy is a gateway.PolicySource holding one compiled set.
type staticPolicy struct{ set *policy.Set }

func (s staticPolicy) AccessPolicy() *policy.Set { return s.set }

// GET /skills counts, for a caller the access policy hides tools from, only the tools it may see: a hidden tool's
// number does not show through the taxonomy.
func TestSkillCountsUnderPolicy(t *testing.T) {
	toks, err := auth.Parse("ops:"+testAdminToken, "ci:"+testClientToken, "")
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.Compile(policy.Document{Rules: []policy.Rule{
		{Name: "ci-no-writes", Effect: policy.Deny, When: `subject == "ci" && tool == "write_file"`}}})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	e.control.routes = routing.NewRouteTable([]routing.ServerEntry{{ID: "id-fs", Name: "fs", Status: persistence.StatusConnected}},
		[]persistence.Tool{
			{ID: 1, Name: "fs.read_file", OriginalName: "read_file", SourceServerID: "id-fs", SkillIDs: []string{"files"}},
			{ID: 2, Name: "fs.write_file", OriginalName: "write_file", SourceServerID: "id-fs", SkillIDs: []string{"files"}},
		}, "__")
	e.control.skills = []actors.SkillInfo{{Skill: classify.Skill{ID: "files", Name: "Files"}, ToolCount: 2}}
	e.app = New(Deps{Store: e.store, Control: e.control, Curation: e.control, Tokens: toks,
		Gateway: gateway.New(e.control, gateway.Options{Policy: &gateway.Rules{Source: staticPolicy{set}}}),
		Logger:  slog.New(slog.NewJSONHandler(e.logs, nil))})
	for _, tc := range []struct {
		token string
		count string
	}{{testAdminToken, `"tool_count":2`}, {testClientToken, `"tool_count":1`}} {
		if r := e.do(t, "GET", "/api/v1/skills", "", "Authorization: Bearer "+tc.token); r.status != http.StatusOK ||
			!strings.Contains(string(r.body), tc.count) {
			t.Errorf("GET /skills as %s: %d %s, want %s", tc.token[:3], r.status, r.body, tc.count)
		}
	}
}
