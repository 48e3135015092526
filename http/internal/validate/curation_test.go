package validate

import (
	"reflect"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/persistence"
)

func locs(errs []FieldError) string {
	var parts []string
	for _, e := range errs {
		parts = append(parts, e.Path()+":"+e.Type)
	}
	return strings.Join(parts, ",")
}

func TestToolFilter(t *testing.T) {
	cases := []struct {
		body, wantErr, wantMode string
	}{
		{`{"mode":"deny","patterns":["delete_*","drop"]}`, "", "deny"},
		{`{"mode":"allow","patterns":["*"]}`, "", "allow"},
		{`{"mode":"none"}`, "", ""},
		{`{"mode":"none","patterns":["x"]}`, "", ""},
		{`{"mode":"allow","patterns":[]}`, "body.patterns", ""},
		{`{"mode":"allow"}`, "body.patterns", ""},
		{`{"mode":"maybe","patterns":["x"]}`, "body.mode", ""},
		{`{"patterns":["x"]}`, "body.mode", ""},
		{`{"mode":"deny","patterns":["[a"]}`, "body.patterns.0", ""},
		{`{"mode":"deny","patterns":[""]}`, "body.patterns.0", ""},
		{`{"mode":"deny","patterns":"x"}`, "body.patterns", ""},
		{`{"mode":"deny","patterns":["x"],"extra":1}`, "body.extra", ""},
		{`[]`, "body", ""},
		{`not json`, "body", ""},
	}
	for _, c := range cases {
		f, errs := ToolFilter([]byte(c.body))
		got := locs(errs)
		if c.wantErr == "" && len(errs) > 0 || c.wantErr != "" && !strings.Contains(got, c.wantErr) {
			t.Errorf("%s: errors %q, want %q", c.body, got, c.wantErr)
		}
		if c.wantErr == "" && f.Mode != c.wantMode {
			t.Errorf("%s: mode %q", c.body, f.Mode)
		}
	}
}

func TestPinningBody(t *testing.T) {
	if p, errs := Pinning([]byte(`{"enabled":true,"pin_new_tools":"withhold"}`)); len(errs) > 0 || !*p.Pinning || *p.PinNewTools != "withhold" {
		t.Fatalf("%+v %v", p, errs)
	}
	for _, bad := range []string{`{}`, `{"enabled":"yes"}`, `{"pin_new_tools":"maybe"}`, `{"x":1}`} {
		if _, errs := Pinning([]byte(bad)); len(errs) == 0 {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestOverride(t *testing.T) {
	o, errs := Override([]byte(`{"exposed_name":"get_weather","description":"Forecast","annotations":{"readOnlyHint":true,"title":"W"}}`))
	if len(errs) > 0 || *o.ExposedName != "get_weather" || *o.Description != "Forecast" || !*o.Annotations.ReadOnlyHint || *o.Annotations.Title != "W" {
		t.Fatalf("%+v %v", o, errs)
	}
	cases := map[string]string{
		`{}`:                         "body.exposed_name",
		`{"exposed_name":"has.dot"}`: "body.exposed_name",
		`{"exposed_name":"search_aggregated_tools"}`: "body.exposed_name",
		`{"exposed_name":""}`:                        "body.exposed_name",
		`{"description":"   "}`:                      "body.description",
		`{"annotations":{"readOnlyHint":"yes"}}`:     "body.annotations.readOnlyHint",
		`{"annotations":{"other":true}}`:             "body.annotations.other",
		`{"annotations":[]}`:                         "body.annotations",
		`{"name":"x"}`:                               "body.name",
	}
	for body, want := range cases {
		if _, errs := Override([]byte(body)); !strings.Contains(locs(errs), want) {
			t.Errorf("%s: errors %q, want %q", body, locs(errs), want)
		}
	}
}

func TestProfileBody(t *testing.T) {
	p, errs := Profile("team-a", []byte(`{"description":"d","selectors":[{"server":"files","tools":["read_*"]},{"skills":["web"]}],"clients":["bot"]}`))
	if len(errs) > 0 || len(p.Selectors) != 2 || p.Selectors[0].Server != "files" || p.Clients[0] != "bot" {
		t.Fatalf("%+v %v", p, errs)
	}
	cases := []struct{ name, body, want string }{
		{"bad name", `{"selectors":[{"server":"x"}]}`, "path.name"},
		{"team-a", `{}`, "body.selectors"},
		{"team-a", `{"selectors":[{}]}`, "body.selectors.0"},
		{"team-a", `{"selectors":[{"tools":["[x"]}]}`, "body.selectors.0.tools.0"},
		{"team-a", `{"selectors":[{"server":"x","bogus":1}]}`, "body.selectors.0.bogus"},
		{"team-a", `{"selectors":"x"}`, "body.selectors"},
		{"team-a", `{"selectors":[{"server":"x"}],"clients":[""]}`, "body.clients.0"},
		{"team-a", `{"selectors":[{"server":"x"}],"bindings":{"subject":"a"}}`, "body.bindings"},
		{"team-a", `{"selectors":[{"server":"x"}],"bindings":["alice"]}`, "body.bindings.0"},
		{"team-a", `{"selectors":[{"server":"x"}],"bindings":[{}]}`, "body.bindings.0"},
		{"team-a", `{"selectors":[{"server":"x"}],"bindings":[{"subject":""}]}`, "body.bindings.0.subject"},
		{"team-a", `{"selectors":[{"server":"x"}],"bindings":[{"subject":1}]}`, "body.bindings.0.subject"},
		{"team-a", `{"selectors":[{"server":"x"}],"bindings":[{"subject":"a","claim":"groups","value":"eng"}]}`, "body.bindings.0"},
		{"team-a", `{"selectors":[{"server":"x"}],"bindings":[{"subject":"a"},{"claim":"groups"}]}`, "body.bindings.1"},
		{"team-a", `{"selectors":[{"server":"x"}],"bindings":[{"value":"eng"}]}`, "body.bindings.0"},
		{"team-a", `{"selectors":[{"server":"x"}],"bindings":[{"claim":"groups","value":"eng","op":"in"}]}`, "body.bindings.0.op"},
		{"team-a", `{"selectors":[{"server":"x"}],"bindings":[{"claim":"groups","value":"` + strings.Repeat("x", 257) + `"}]}`, "body.bindings.0.value"},
	}
	for _, c := range cases {
		name := c.name
		if name == "bad name" {
			name = "bad name"
		}
		if _, errs := Profile(name, []byte(c.body)); !strings.Contains(locs(errs), c.want) {
			t.Errorf("%s %s: errors %q, want %q", c.name, c.body, locs(errs), c.want)
		}
	}
}

func TestProfileBindings(t *testing.T) {
	p, errs := Profile("team-a", []byte(`{"selectors":[{"server":"files"}],"bindings":[{"subject":"alice"},{"claim":"groups","value":"eng"}]}`))
	want := []persistence.ProfileBinding{{Subject: "alice"}, {Claim: "groups", Value: "eng"}}
	if len(errs) > 0 || !reflect.DeepEqual(p.Bindings, want) {
		t.Fatalf("bindings %+v, errors %v", p.Bindings, errs)
	}
	if p, errs := Profile("team-a", []byte(`{"selectors":[{"server":"files"}],"bindings":null}`)); len(errs) > 0 || p.Bindings != nil {
		t.Fatalf("null bindings: %+v %v", p.Bindings, errs)
	}
}

func TestDecision(t *testing.T) {
	h := strings.Repeat("a", 64)
	if got, errs := Decision([]byte(`{"hash":"` + h + `"}`)); got != h || len(errs) > 0 {
		t.Fatalf("%q %v", got, errs)
	}
	if got, errs := Decision(nil); got != "" || len(errs) > 0 {
		t.Fatalf("empty body: %q %v", got, errs)
	}
	for _, bad := range []string{`{"hash":"short"}`, `{"hash":1}`, `{"x":1}`, `[`} {
		if _, errs := Decision([]byte(bad)); len(errs) == 0 {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestSearchAndCallProfile(t *testing.T) {
	if r, errs := Search([]byte(`{"query":"x","profile":"team"}`)); len(errs) > 0 || r.Profile != "team" {
		t.Fatalf("%+v %v", r, errs)
	}
	if _, errs := Search([]byte(`{"query":"x","profile":"a b"}`)); !strings.Contains(locs(errs), "body.profile") {
		t.Fatalf("bad profile accepted: %v", errs)
	}
	if r, errs := Call([]byte(`{"name":"x","profile":"team"}`), RESTCall); len(errs) > 0 || r.Profile != "team" {
		t.Fatalf("%+v %v", r, errs)
	}
	if _, errs := Call([]byte(`{"name":"x","profile":5}`), RESTCall); !strings.Contains(locs(errs), "body.profile") {
		t.Fatalf("bad profile accepted: %v", errs)
	}
}

// FuzzCuration: no curation body makes a validator panic, and whatever one accepts is within the limits.
func FuzzCuration(f *testing.F) {
	for _, s := range []string{`{"mode":"deny","patterns":["a*"]}`, `{"exposed_name":"x","annotations":{"title":"t"}}`,
		`{"selectors":[{"server":"s","tools":["*"],"skills":["k"]}],"clients":["c"]}`, `{"enabled":true}`, `{"hash":""}`, `[`, `{"patterns":[1]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if flt, errs := ToolFilter(body); len(errs) == 0 {
			if flt.Mode != "" && len(flt.Patterns) == 0 {
				t.Fatalf("an allow/deny filter without patterns accepted: %s", body)
			}
		}
		if o, errs := Override(body); len(errs) == 0 && o.ExposedName != nil && ProfileName(*o.ExposedName) != "" {
			t.Fatalf("an unsafe exposed name accepted: %q", *o.ExposedName)
		}
		_, _ = Pinning(body)
		_, _ = Profile("p", body)
		_, _ = Decision(body)
	})
}

// TestProfileTokenBudgetBody: token_budget is an integer from 0 to MaxProfileTokenBudget; absent or null leaves it
// unset (the endpoint's budget).
func TestProfileTokenBudgetBody(t *testing.T) {
	for _, tc := range []struct {
		body string
		want *int
		loc  string
	}{
		{`{"selectors":[{"server":"x"}],"token_budget":12000}`, ptr(12000), ""},
		{`{"selectors":[{"server":"x"}],"token_budget":0}`, ptr(0), ""},
		{`{"selectors":[{"server":"x"}],"token_budget":null}`, nil, ""},
		{`{"selectors":[{"server":"x"}]}`, nil, ""},
		{`{"selectors":[{"server":"x"}],"token_budget":-1}`, nil, "body.token_budget"},
		{`{"selectors":[{"server":"x"}],"token_budget":1000000001}`, nil, "body.token_budget"},
		{`{"selectors":[{"server":"x"}],"token_budget":1.5}`, nil, "body.token_budget"},
		{`{"selectors":[{"server":"x"}],"token_budget":"20000"}`, nil, "body.token_budget"},
	} {
		p, errs := Profile("team-a", []byte(tc.body))
		if tc.loc != "" {
			if !strings.Contains(locs(errs), tc.loc) {
				t.Errorf("%s: errors %q, want %q", tc.body, locs(errs), tc.loc)
			}
			continue
		}
		if len(errs) > 0 || (p.TokenBudget == nil) != (tc.want == nil) || tc.want != nil && *p.TokenBudget != *tc.want {
			t.Errorf("%s: token budget %v, errors %v", tc.body, p.TokenBudget, errs)
		}
	}
}
