package actors_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/persistence"
)

// waitPins waits until the server's pins satisfy cond.
func waitPins(t *testing.T, st persistence.Store, id string, what string, cond func(persistence.PinSet) bool) persistence.PinSet {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		set, err := st.ListToolPins(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if cond(set) {
			return set
		}
		if time.Now().After(deadline) {
			t.Fatalf("pins never showed %s: %+v", what, set)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ref[T any](v T) *T { return &v }

func pinOf(set persistence.PinSet, name string) *persistence.ToolPin {
	i := slices.IndexFunc(set.Pins, func(p persistence.ToolPin) bool { return p.OriginalName == name })
	if i < 0 {
		return nil
	}
	return &set.Pins[i]
}

// TestCurationFiltersAndOverrides: a filter hides tools from the table (not found, not searched) at once, without
// reconnecting; an override renames a tool and rewrites its description and annotations, which the table and
// search serve; an exposed name that is taken is refused.
func TestCurationFiltersAndOverrides(t *testing.T) {
	t.Parallel()
	r := newRig(t, testConfig())
	_, url := manyTools(t, 20)
	s := r.register("cur", persistence.TransportHTTP, map[string]any{"base_url": url}, nil, true)
	_, url2 := manyTools(t, 2)
	other := r.register("oth", persistence.TransportHTTP, map[string]any{"base_url": url2}, nil, true)
	waitRoutes(t, r.sys, 30*time.Second, "tools", func(rt *routing.RouteTable) bool {
		return hasTool("cur.tool_0019")(rt) && hasTool("oth.tool_0001")(rt)
	})
	ctx := context.Background()

	// Deny list: hidden tools are gone from routing and from search.
	if _, err := r.sys.SetToolPolicy(ctx, s.ID, persistence.ToolPolicyPatch{Filter: &persistence.ToolFilter{Mode: "deny", Patterns: []string{"tool_001*"}}}); err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, r.sys, 5*time.Second, "deny applied", func(rt *routing.RouteTable) bool { return !hasTool("cur.tool_0010")(rt) })
	if _, err := r.sys.Routes().Resolve("cur.tool_0015", ""); !errors.Is(err, routing.ErrToolNotFound) {
		t.Fatalf("a hidden tool resolved: %v", err)
	}
	if !hasTool("cur.tool_0009")(r.sys.Routes()) {
		t.Fatal("a tool the deny list does not match was hidden")
	}
	waitSearch := func(query string, want func([]actors.SearchHit) bool, what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			res, err := r.sys.Search(ctx, actors.SearchRequest{Query: query, IncludeExternal: true, Limit: 50, Strategy: actors.StrategyDirect})
			if err == nil && want(res.Tools) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("search %q never showed %s (err %v)", query, what, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	named := func(hits []actors.SearchHit, name string) bool {
		return slices.ContainsFunc(hits, func(h actors.SearchHit) bool { return h.Tool.Name == name })
	}
	waitSearch("does thing number 15", func(h []actors.SearchHit) bool { return len(h) > 0 && !named(h, "cur.tool_0015") }, "hidden tool left out")

	// Allow list replaces it: only matching tools stay.
	if _, err := r.sys.SetToolPolicy(ctx, s.ID, persistence.ToolPolicyPatch{Filter: &persistence.ToolFilter{Mode: "allow", Patterns: []string{"tool_000?"}}}); err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, r.sys, 5*time.Second, "allow applied", func(rt *routing.RouteTable) bool {
		return hasTool("cur.tool_0005")(rt) && !hasTool("cur.tool_0010")(rt) && !hasTool("cur.tool_0019")(rt)
	})

	// Override: exposed name, description and annotations.
	if _, err := r.sys.PutToolOverride(ctx, persistence.ToolOverride{ServerID: s.ID, OriginalName: "tool_0003",
		ExposedName: ref("forecast_weather"), Description: ref("Weather forecast for a city, curated"),
		Annotations: &persistence.ToolAnnotations{ReadOnlyHint: ref(true)}}); err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, r.sys, 5*time.Second, "override applied", func(rt *routing.RouteTable) bool {
		e, ok := rt.Tool("forecast_weather")
		return ok && e.Name == "cur.tool_0003" && e.Alias == "forecast_weather" && e.Description == "Weather forecast for a city, curated"
	})
	e, _ := r.sys.Routes().Tool("forecast_weather")
	var def struct {
		Annotations map[string]any `json:"annotations"`
	}
	if err := json.Unmarshal(e.Definition, &def); err != nil || def.Annotations["readOnlyHint"] != true {
		t.Fatalf("override annotations not served: %s", e.Definition)
	}
	if old, ok := r.sys.Routes().Tool("cur__tool_0003"); !ok || old.Name != "cur.tool_0003" {
		t.Fatal("the tool's former alias no longer reaches it")
	}
	waitSearch("curated weather forecast", func(h []actors.SearchHit) bool { return len(h) > 0 && h[0].Tool.Name == "cur.tool_0003" }, "override description indexed")
	if stored, err := r.store.GetServer(ctx, s.ID); err != nil || stored.ToolCount != 20 {
		t.Fatalf("the store keeps every tool as the backend lists it: %d %v", stored.ToolCount, err)
	}

	// Taken names are refused: another tool's alias, a meta-tool, another override's exposed name.
	for _, name := range []string{"oth__tool_0001", "search_aggregated_tools", "forecast_weather"} {
		_, err := r.sys.PutToolOverride(ctx, persistence.ToolOverride{ServerID: other.ID, OriginalName: "tool_0000", ExposedName: ref(name)})
		if !errors.Is(err, actors.ErrNameTaken) {
			t.Errorf("exposed name %q: %v, want ErrNameTaken", name, err)
		}
	}
	// Removing the override restores the tool's own name.
	if err := r.sys.DeleteToolOverride(ctx, s.ID, "tool_0003"); err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, r.sys, 5*time.Second, "override removed", func(rt *routing.RouteTable) bool {
		e, ok := rt.Tool("cur.tool_0003")
		_, gone := rt.Tool("forecast_weather")
		return ok && e.Alias == "cur__tool_0003" && e.Description == "does thing number 3" && !gone
	})

	// Deleting the server removes its overrides and pins.
	if _, err := r.sys.PutToolOverride(ctx, persistence.ToolOverride{ServerID: s.ID, OriginalName: "tool_0004", Description: ref("x")}); err != nil {
		t.Fatal(err)
	}
	if err := r.sys.Remove(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if ovs, err := r.store.ListToolOverrides(ctx, ""); err != nil || len(ovs) != 0 {
		t.Fatalf("overrides left after delete: %+v %v", ovs, err)
	}
}

// TestCurationProfiles: a profile holds the tools its selectors match, a scope restricts resolution and search,
// a token bound to profiles is restricted to them, and a profile naming a server not registered yet fills when it
// comes.
func TestCurationProfiles(t *testing.T) {
	t.Parallel()
	r := newRig(t, testConfig())
	_, url := manyTools(t, 5)
	r.register("alpha", persistence.TransportHTTP, map[string]any{"base_url": url}, nil, true)
	waitRoutes(t, r.sys, 30*time.Second, "alpha", hasTool("alpha.tool_0004"))
	ctx := context.Background()
	if _, created, err := r.sys.PutProfile(ctx, persistence.Profile{Name: "team", Clients: []string{"bot"},
		Selectors: []persistence.ProfileSelector{{Server: "alpha", Tools: []string{"tool_000[01]"}}, {Server: "later"}}}); err != nil || !created {
		t.Fatalf("put profile: %v %v", created, err)
	}
	waitRoutes(t, r.sys, 5*time.Second, "profile", func(rt *routing.RouteTable) bool {
		p, ok := rt.Profile("team")
		return ok && p.Count() == 2
	})
	rt := r.sys.Routes()
	if got := rt.BoundProfiles("bot"); !slices.Equal(got, []string{"team"}) {
		t.Fatalf("bound profiles %v", got)
	}
	if _, err := rt.ScopeFor("nope", nil); !errors.Is(err, routing.ErrProfileNotFound) {
		t.Fatalf("unknown profile: %v", err)
	}
	if _, err := rt.ScopeFor("other", []string{"team"}); !errors.Is(err, routing.ErrProfileNotFound) {
		t.Fatalf("unknown profile for a bound client: %v", err)
	}
	scope, err := rt.ScopeFor("", rt.BoundProfiles("bot"))
	if err != nil || !scope.Restricted() {
		t.Fatalf("bound scope %v %v", scope, err)
	}
	if got := len(rt.CallableIn(scope)); got != 2 {
		t.Fatalf("scope lists %d tools, want 2", got)
	}
	if _, err := rt.ResolveIn(scope, "alpha.tool_0003", ""); !errors.Is(err, routing.ErrToolNotFound) {
		t.Fatalf("a tool outside the profile resolved: %v", err)
	}
	if _, err := rt.ResolveIn(scope, "alpha.tool_0001", ""); err != nil {
		t.Fatalf("a tool of the profile: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := r.sys.Search(ctx, actors.SearchRequest{Query: "does thing number", IncludeExternal: true, Limit: 10, Scope: scope})
		if err == nil && len(res.Tools) == 2 && res.ToolsSearched == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("scoped search: %+v %v", res, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A server named by a selector before it existed fills the profile when it is registered.
	_, url2 := manyTools(t, 3)
	r.register("later", persistence.TransportHTTP, map[string]any{"base_url": url2}, nil, true)
	waitRoutes(t, r.sys, 30*time.Second, "later in profile", func(rt *routing.RouteTable) bool {
		p, ok := rt.Profile("team")
		return ok && p.Count() == 5
	})
	// A profile binding clients cannot be deleted; unbound, it can.
	if err := r.sys.DeleteProfile(ctx, "team"); !errors.Is(err, actors.ErrProfileInUse) {
		t.Fatalf("delete of a bound profile: %v", err)
	}
	if _, _, err := r.sys.PutProfile(ctx, persistence.Profile{Name: "team", Selectors: []persistence.ProfileSelector{{Server: "alpha"}}}); err != nil {
		t.Fatal(err)
	}
	if err := r.sys.DeleteProfile(ctx, "team"); err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, r.sys, 5*time.Second, "profile gone", func(rt *routing.RouteTable) bool { _, ok := rt.Profile("team"); return !ok })
}

// TestCurationPinningWithholdsNewTools: with pin_new_tools withhold, a tool added after the baseline is withheld
// (not routed) until approved; a rejected one stays withheld and is not held again.
func TestCurationPinningWithholdsNewTools(t *testing.T) {
	t.Parallel()
	r := newRig(t, testConfig())
	backend, url := manyTools(t, 3)
	raw, _ := json.Marshal(map[string]any{"base_url": url})
	s, err := r.sys.Register(context.Background(), actors.RegisterRequest{Name: "pin", TransportType: persistence.TransportHTTP,
		ConnectionConfig: raw, AutoConnect: true, PinNewTools: persistence.PinNewWithhold})
	if err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, r.sys, 30*time.Second, "baseline", hasTool("pin.tool_0002"))
	ctx := context.Background()
	addTool(backend, "sneaky", "a tool added later")
	addTool(backend, "sneakier", "another tool added later")
	waitPins(t, r.store, s.ID, "new tools held", func(set persistence.PinSet) bool {
		a, b := pinOf(set, "sneaky"), pinOf(set, "sneakier")
		return a != nil && a.PendingHash != "" && b != nil && b.PendingHash != ""
	})
	time.Sleep(200 * time.Millisecond)
	if hasTool("pin.sneaky")(r.sys.Routes()) {
		t.Fatal("a withheld tool is routed")
	}
	if _, err := r.sys.ResolveToolChange(ctx, s.ID, "sneaky", true, "not-the-hash"); !errors.Is(err, persistence.ErrChanged) {
		t.Fatalf("approval of another hash: %v", err)
	}
	if _, err := r.sys.ResolveToolChange(ctx, s.ID, "sneaky", true, ""); err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, r.sys, 5*time.Second, "approved tool", hasTool("pin.sneaky"))
	if _, err := r.sys.ResolveToolChange(ctx, s.ID, "sneakier", false, ""); err != nil {
		t.Fatal(err)
	}
	addTool(backend, "third", "triggers a discovery")
	waitPins(t, r.store, s.ID, "third held, sneakier quiet", func(set persistence.PinSet) bool {
		p, q := pinOf(set, "third"), pinOf(set, "sneakier")
		return p != nil && p.PendingHash != "" && q != nil && q.PendingHash == "" && q.RejectedHash != ""
	})
	if hasTool("pin.sneakier")(r.sys.Routes()) {
		t.Fatal("a rejected tool is routed")
	}
	// Turning pinning off serves everything as listed.
	if _, err := r.sys.SetToolPolicy(ctx, s.ID, persistence.ToolPolicyPatch{Pinning: ref(false)}); err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, r.sys, 5*time.Second, "pinning off", func(rt *routing.RouteTable) bool {
		return hasTool("pin.sneakier")(rt) && hasTool("pin.third")(rt)
	})
}
