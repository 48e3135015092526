package routing

import (
	"encoding/json"
	"testing"

	"github.com/mcpgw/aggregator/persistence"
)

func TestRewriteURIRoundTrip(t *testing.T) {
	tests := []struct{ server, uri string }{
		{"every", "demo://resource/static/document/a.md"},
		{"a-b_1", "file:///tmp/x y"},
		{"srv", "gob://item/{id}"},
		{"odd/name", "https://h/p?q=1#f"},
	}
	for _, tc := range tests {
		got := RewriteURI(tc.server, tc.uri)
		server, orig, ok := ParseRewrittenURI(got)
		if !ok || server != tc.server || orig != tc.uri {
			t.Errorf("ParseRewrittenURI(RewriteURI(%q, %q) = %q) = %q %q %v", tc.server, tc.uri, got, server, orig, ok)
		}
	}
	for _, bad := range []string{"demo://x", RewrittenURIScheme + "://", RewrittenURIScheme + "://srv", RewrittenURIScheme + ":///x", RewrittenURIScheme + "://%zz/x"} {
		if _, _, ok := ParseRewrittenURI(bad); ok {
			t.Errorf("ParseRewrittenURI(%q) accepted", bad)
		}
	}
}

func TestFeatureTableNaming(t *testing.T) {
	servers := map[string]ServerEntry{
		"1": {ID: "1", Name: "a", Status: persistence.StatusConnected},
		"2": {ID: "2", Name: "b", Status: persistence.StatusConnected},
		"3": {ID: "3", Name: "a.x", Status: persistence.StatusDisconnected},
	}
	f := func(id, kind, key string) persistence.Feature {
		return persistence.Feature{ServerID: id, FeatureDef: persistence.FeatureDef{Kind: kind, Key: key, Definition: json.RawMessage(`{}`)}}
	}
	features := map[string][]persistence.Feature{
		"1": {f("1", persistence.FeaturePrompt, "x_p"), f("1", persistence.FeaturePrompt, "x.p"), f("1", persistence.FeaturePrompt, "only-a"), f("1", persistence.FeatureResource, "same://r"),
			f("1", persistence.FeatureResource, "own://a"), f("1", persistence.FeatureResourceTemplate, "t://{x}")},
		"2": {f("2", persistence.FeaturePrompt, "only-a"), f("2", persistence.FeatureResource, "same://r")},
		"3": {f("3", persistence.FeaturePrompt, "p")},
		"9": {f("9", persistence.FeaturePrompt, "orphan")},
	}
	tab := &RouteTable{servers: servers, features: BuildFeatureTable(servers, features, "__", 1)}

	aliases := map[string]string{}
	for _, p := range tab.feat().prompts {
		aliases[p.ServerID+"/"+p.Name] = p.Alias
	}
	// x.p and x_p of a both sanitise to a__x_p: the one that sorts first keeps it, the other gets its hashed alias.
	if aliases["1/x.p"] != "a__x_p" || aliases["1/x_p"] != hashedAlias("a__x_p", "a.x_p") || aliases["1/only-a"] != "a__only-a" ||
		aliases["2/only-a"] != "b__only-a" || aliases["3/p"] != "a_x__p" {
		t.Errorf("aliases %v", aliases)
	}
	if _, ok := tab.Prompt("orphan"); ok {
		t.Error("a prompt of an unknown server is routable")
	}
	if got := len(tab.Prompts()); got != 4 {
		t.Errorf("Prompts() = %d, want the 4 of callable servers", got)
	}
	// Resolution: alias, canonical name, unique backend name; not an ambiguous one.
	for name, want := range map[string]string{"a__x_p": "1", "b.only-a": "2", "x.p": "1", "a.x.p": "1", "only-a": "", "p": ""} {
		p, ok := tab.ResolvePrompt(name)
		if (want == "") == ok || ok && p.ServerID != want {
			t.Errorf("ResolvePrompt(%q) = %+v %v, want server %q", name, p, ok, want)
		}
	}
	// URIs: unique kept, shared rewritten per server and reversible.
	if r, ok := tab.Resource("own://a"); !ok || r.Key != "own://a" {
		t.Errorf("unique URI not kept: %+v %v", r, ok)
	}
	if _, ok := tab.Resource("same://r"); ok {
		t.Error("a URI two servers list is exposed as it is")
	}
	for id, name := range map[string]string{"1": "a", "2": "b"} {
		r, ok := tab.Resource(RewriteURI(name, "same://r"))
		if !ok || r.ServerID != id || tab.ExposedURI(id, "same://r") != RewriteURI(name, "same://r") {
			t.Errorf("shared URI of %s: %+v %v", name, r, ok)
		}
	}
	if tab.ExposedURI("1", "own://a") != "own://a" {
		t.Error("ExposedURI of a unique URI changed it")
	}
	if r, ok := tab.ResourceTemplate("t://{x}"); !ok || r.ServerID != "1" {
		t.Errorf("template: %+v %v", r, ok)
	}
}

// FuzzRewrittenURI: ParseRewrittenURI never panics, and reverses RewriteURI for every server name and URI.
func FuzzRewrittenURI(f *testing.F) {
	for _, seed := range [][2]string{{"every", "demo://resource/static/document/a.md"}, {"odd/name", "https://h/p?q=1#f"},
		{"", ""}, {"a", RewrittenURIScheme + "://b/c"}, {"%zz", "x"}, {"s", "{+path}"}} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, server, uri string) {
		_, _, _ = ParseRewrittenURI(uri)
		_, _, _ = ParseRewrittenURI(server)
		if server == "" || uri == "" {
			return
		}
		got, orig, ok := ParseRewrittenURI(RewriteURI(server, uri))
		if !ok || got != server || orig != uri {
			t.Fatalf("ParseRewrittenURI(RewriteURI(%q, %q)) = %q %q %v", server, uri, got, orig, ok)
		}
	})
}

// TestFeatureTableIgnoresReservedURIs: a resource or template stored under the reserved scheme (before discovery
// dropped them) is never routed: the rewritten URI of another server's resource stays that server's.
func TestFeatureTableIgnoresReservedURIs(t *testing.T) {
	servers := map[string]ServerEntry{
		"1": {ID: "1", Name: "ev", Status: persistence.StatusConnected},
		"2": {ID: "2", Name: "zz", Status: persistence.StatusConnected},
	}
	f := func(id, kind, key string) persistence.Feature {
		return persistence.Feature{ServerID: id, FeatureDef: persistence.FeatureDef{Kind: kind, Key: key, Definition: json.RawMessage(`{}`)}}
	}
	captured := RewriteURI("ev", "doc://x")
	features := map[string][]persistence.Feature{
		"1": {f("1", persistence.FeatureResource, "doc://x"), f("1", persistence.FeatureResourceTemplate, "t://{id}")},
		"2": {f("2", persistence.FeatureResource, "doc://x"), f("2", persistence.FeatureResource, captured),
			f("2", persistence.FeatureResource, "MCP-AGGREGATOR://ev/y"), f("2", persistence.FeatureResourceTemplate, RewriteURI("ev", "t://{id}"))},
	}
	tab := &RouteTable{servers: servers, features: BuildFeatureTable(servers, features, "__", 1)}
	if r, ok := tab.Resource(captured); !ok || r.ServerID != "1" {
		t.Errorf("%s routes to %+v %v, want ev", captured, r, ok)
	}
	if _, ok := tab.Resource("MCP-AGGREGATOR://ev/y"); ok {
		t.Error("a reserved URI (any case) is routed")
	}
	if r, ok := tab.ResourceTemplate("t://{id}"); !ok || r.ServerID != "1" || len(tab.ResourceTemplates()) != 1 {
		t.Errorf("templates: %+v %v %d", r, ok, len(tab.ResourceTemplates()))
	}
	for uri, want := range map[string]bool{"mcp-aggregator://a/b": true, "Mcp-Aggregator:x": true, "mcp-aggregators://a": false, "doc://mcp-aggregator://": false, "": false} {
		if got := IsReservedURI(uri); got != want {
			t.Errorf("IsReservedURI(%q) = %v", uri, got)
		}
	}
}
