package storetest

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/mcpgw/aggregator/persistence"
)

func feature(kind, key, def string) persistence.FeatureDef {
	return persistence.FeatureDef{Kind: kind, Key: key, Definition: json.RawMessage(def)}
}

func mustFeatures(t *testing.T, s persistence.Store, id string) []persistence.Feature {
	t.Helper()
	fs, err := s.ListFeatures(t.Context(), id)
	if err != nil {
		t.Fatalf("ListFeatures(%q): %v", id, err)
	}
	return fs
}

// testReplaceServerFeatures: a replace makes the stored features exactly the given ones, in listing order per kind,
// later duplicates skipped; invalid input writes nothing; a deleted server takes its features along.
func testReplaceServerFeatures(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	a, b := mustCreate(t, s, "fa"), mustCreate(t, s, "fb")
	defs := []persistence.FeatureDef{
		feature(persistence.FeatureResource, "file:///z", `{"uri":"file:///z","name":"z"}`),
		feature(persistence.FeaturePrompt, "greet", `{"name":"greet","arguments":[{"name":"who"}]}`),
		feature(persistence.FeatureResource, "file:///a", `{"uri":"file:///a","name":"a"}`),
		feature(persistence.FeatureResourceTemplate, "file:///{path}", `{"uriTemplate":"file:///{path}","name":"files"}`),
		feature(persistence.FeaturePrompt, "greet", `{"name":"greet","description":"duplicate"}`),
	}
	if err := s.ReplaceServerFeatures(ctx, a.ID, defs, nil); err != nil {
		t.Fatalf("ReplaceServerFeatures: %v", err)
	}
	if err := s.ReplaceServerFeatures(ctx, b.ID, defs[1:2], nil); err != nil {
		t.Fatalf("ReplaceServerFeatures: %v", err)
	}
	got := mustFeatures(t, s, a.ID)
	want := []struct {
		kind, key string
		pos       int
	}{
		{persistence.FeaturePrompt, "greet", 0},
		{persistence.FeatureResource, "file:///z", 0},
		{persistence.FeatureResource, "file:///a", 1},
		{persistence.FeatureResourceTemplate, "file:///{path}", 0},
	}
	if len(got) != len(want) {
		t.Fatalf("ListFeatures: %d features, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.ServerID != a.ID || g.Kind != w.kind || g.Key != w.key || g.Position != w.pos || g.UpdatedAt.IsZero() {
			t.Errorf("feature %d = %+v, want %s %s at %d of %s", i, g, w.kind, w.key, w.pos, a.ID)
		}
	}
	var def map[string]any
	if err := json.Unmarshal(got[0].Definition, &def); err != nil || def["description"] != nil || def["name"] != "greet" {
		t.Errorf("prompt definition = %s (%v), want the first listing's", got[0].Definition, err)
	}
	if all := mustFeatures(t, s, ""); len(all) != 5 {
		t.Errorf("ListFeatures(all) = %d, want 5", len(all))
	}

	invalid := []struct {
		name string
		defs []persistence.FeatureDef
	}{
		{"unknown kind", []persistence.FeatureDef{feature("tool", "x", `{}`)}},
		{"empty key", []persistence.FeatureDef{feature(persistence.FeaturePrompt, "", `{}`)}},
		{"not an object", []persistence.FeatureDef{feature(persistence.FeaturePrompt, "p", `[1]`)}},
		{"broken JSON", []persistence.FeatureDef{feature(persistence.FeaturePrompt, "ok", `{}`), feature(persistence.FeaturePrompt, "p", `{"a":`)}},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.ReplaceServerFeatures(t.Context(), a.ID, tc.defs, nil); err == nil {
				t.Fatal("ReplaceServerFeatures succeeded, want an error")
			}
			if n := len(mustFeatures(t, s, a.ID)); n != 4 {
				t.Errorf("after a refused replace: %d features, want the 4 kept", n)
			}
		})
	}

	// Replacing with fewer removes the rest; with none, all.
	if err := s.ReplaceServerFeatures(ctx, a.ID, defs[2:3], nil); err != nil {
		t.Fatal(err)
	}
	if got := mustFeatures(t, s, a.ID); len(got) != 1 || got[0].Key != "file:///a" || got[0].Position != 0 {
		t.Errorf("after replacing with one: %+v", got)
	}
	if err := s.ReplaceServerFeatures(ctx, a.ID, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := mustFeatures(t, s, a.ID); len(got) != 0 {
		t.Errorf("after replacing with none: %+v", got)
	}

	if err := s.DeleteServer(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ListFeatures(ctx, b.ID); !errors.Is(err, persistence.ErrNotFound) {
		t.Errorf("ListFeatures(deleted server) = %v, want ErrNotFound", err)
	}
	if all := mustFeatures(t, s, ""); len(all) != 0 {
		t.Errorf("features left after the delete: %+v", all)
	}
	for _, id := range []string{b.ID, "not-a-uuid"} {
		if err := s.ReplaceServerFeatures(ctx, id, defs[:1], nil); !errors.Is(err, persistence.ErrNotFound) {
			t.Errorf("ReplaceServerFeatures(%q) = %v, want ErrNotFound", id, err)
		}
	}
}

// testFencedFeatures: a write fenced by a lease that is no longer current is refused and changes nothing.
func testFencedFeatures(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	srv := mustCreate(t, s, "ff")
	l, err := s.AcquireLease(ctx, srv.ID, "node-a", 60e9)
	if err != nil {
		t.Fatal(err)
	}
	one := []persistence.FeatureDef{feature(persistence.FeaturePrompt, "p", `{"name":"p"}`)}
	if err := s.ReplaceServerFeatures(ctx, srv.ID, one, &l); err != nil {
		t.Fatalf("fenced by the current lease: %v", err)
	}
	if err := s.ReleaseLease(ctx, l); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireLease(ctx, srv.ID, "node-b", 60e9); err != nil {
		t.Fatal(err)
	}
	if err := s.ReplaceServerFeatures(ctx, srv.ID, nil, &l); !errors.Is(err, persistence.ErrLeaseLost) {
		t.Fatalf("fenced by a stale lease: %v, want ErrLeaseLost", err)
	}
	if got := mustFeatures(t, s, srv.ID); len(got) != 1 {
		t.Errorf("a stale owner's write changed the features: %+v", got)
	}
}
