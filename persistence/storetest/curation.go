package storetest

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// testToolPolicy: a policy patch is stored and read back with the server; an empty patch changes nothing;
// pinning on writes the baseline and its time, pinning off clears pending changes; both move pins_version.
func testToolPolicy(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	srv := mustCreate(t, s, "policy")
	if _, err := s.SetToolPolicy(ctx, "00000000-0000-7000-8000-000000000000", persistence.ToolPolicyPatch{
		Pinning: ptr(true)}); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("unknown server: %v, want ErrNotFound", err)
	}
	if _, err := s.SetToolPolicy(ctx, srv.ID, persistence.ToolPolicyPatch{
		Filter: &persistence.ToolFilter{Mode: "sometimes"}}); err == nil || errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("bad filter mode: %v, want a validation error", err)
	}

	got, err := s.SetToolPolicy(ctx, srv.ID, persistence.ToolPolicyPatch{
		Filter: &persistence.ToolFilter{Mode: persistence.FilterDeny, Patterns: []string{"delete_*"}}})
	if err != nil {
		t.Fatalf("SetToolPolicy(filter): %v", err)
	}
	want := persistence.ToolFilter{Mode: persistence.FilterDeny, Patterns: []string{"delete_*"}}
	if !reflect.DeepEqual(got.Policy.Filter, want) || !reflect.DeepEqual(mustGet(t, s, srv.ID).Policy.Filter, want) {
		t.Fatalf("filter %+v (read back %+v), want %+v", got.Policy.Filter, mustGet(t, s, srv.ID).Policy.Filter, want)
	}
	if same, err := s.SetToolPolicy(ctx, srv.ID, persistence.ToolPolicyPatch{}); err != nil ||
		!reflect.DeepEqual(same.Policy, got.Policy) || !same.UpdatedAt.Equal(got.UpdatedAt) {
		t.Fatalf("empty patch: %+v, %v; want the server unchanged", same.Policy, err)
	}

	before := mustPins(t, s, srv.ID).Version
	baseline := []persistence.ToolPin{{OriginalName: "read", ApprovedHash: "h1", ApprovedDef: json.RawMessage(`{"name":"read"}`)}}
	on, err := s.SetToolPolicy(ctx, srv.ID, persistence.ToolPolicyPatch{Pinning: ptr(true), Baseline: baseline,
		PinNewTools: ptr(persistence.PinNewServe)})
	if err != nil {
		t.Fatalf("pinning on: %v", err)
	}
	if !on.Policy.Pinning || on.Policy.PinNewTools != persistence.PinNewServe || on.Policy.PinsBaselineAt == nil {
		t.Fatalf("pinning on: policy %+v", on.Policy)
	}
	pins := mustPins(t, s, srv.ID)
	if pins.Version <= before || len(pins.Pins) != 1 || pins.Pins[0].ApprovedHash != "h1" ||
		!jsonEqual(pins.Pins[0].ApprovedDef, baseline[0].ApprovedDef) || pins.Pins[0].ApprovedAt == nil {
		t.Fatalf("baseline pins %+v (version %d, was %d)", pins.Pins, pins.Version, before)
	}

	pending := pins.Pins
	pending[0].PendingHash, pending[0].PendingDef = "h2", json.RawMessage(`{"name":"read","description":"new"}`)
	if err := s.SaveToolPins(ctx, srv.ID, pins.Version, pending, nil); err != nil {
		t.Fatalf("SaveToolPins: %v", err)
	}
	if _, err := s.SetToolPolicy(ctx, srv.ID, persistence.ToolPolicyPatch{Pinning: ptr(false)}); err != nil {
		t.Fatalf("pinning off: %v", err)
	}
	off := mustPins(t, s, srv.ID)
	if len(off.Pins) != 1 || off.Pins[0].PendingHash != "" || off.Pins[0].PendingDef != nil ||
		off.Pins[0].PendingSince != nil || off.Pins[0].ApprovedHash != "h1" {
		t.Fatalf("pinning off kept a pending change: %+v", off.Pins)
	}
}

func mustPins(t *testing.T, s persistence.Store, id string) persistence.PinSet {
	t.Helper()
	set, err := s.ListToolPins(t.Context(), id)
	if err != nil {
		t.Fatalf("ListToolPins(%q): %v", id, err)
	}
	return set
}

// testToolPins: pins round-trip with their definitions and times, are ordered by name, are written only from the
// version they were read at and only under a current fence; a pending change is approved or rejected once.
func testToolPins(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	srv := mustCreate(t, s, "pins")
	if _, err := s.ListToolPins(ctx, "00000000-0000-7000-8000-000000000000"); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("unknown server: %v, want ErrNotFound", err)
	}
	since := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
	pins := []persistence.ToolPin{
		{OriginalName: "write", ApprovedHash: "w1", ApprovedDef: json.RawMessage(`{"name":"write"}`),
			PendingHash: "w2", PendingDef: json.RawMessage(`{"name":"write","description":"changed"}`), PendingSince: &since},
		{OriginalName: "B-upper", ApprovedHash: "b1", ApprovedDef: json.RawMessage(`{"name":"B-upper"}`)},
		{OriginalName: "read", ApprovedHash: "r1", ApprovedDef: json.RawMessage(`{"name":"read","inputSchema":{"type":"object"}}`),
			RejectedHash: "r0"},
	}
	v0 := mustPins(t, s, srv.ID).Version
	if err := s.SaveToolPins(ctx, srv.ID, v0, pins, nil); err != nil {
		t.Fatalf("SaveToolPins: %v", err)
	}
	if err := s.SaveToolPins(ctx, srv.ID, v0, pins, nil); !errors.Is(err, persistence.ErrChanged) {
		t.Fatalf("save from a stale version: %v, want ErrChanged", err)
	}
	set := mustPins(t, s, srv.ID)
	if set.Version != v0+1 {
		t.Fatalf("version %d after one save from %d", set.Version, v0)
	}
	var names []string
	for _, p := range set.Pins {
		names = append(names, p.OriginalName)
		if p.ServerID != srv.ID || p.ApprovedAt == nil {
			t.Errorf("pin %q: server %q, approved at %v", p.OriginalName, p.ServerID, p.ApprovedAt)
		}
	}
	if !reflect.DeepEqual(names, []string{"B-upper", "read", "write"}) {
		t.Fatalf("pins ordered %v, want byte order", names)
	}
	w := set.Pins[2]
	if !jsonEqual(w.ApprovedDef, pins[0].ApprovedDef) || !jsonEqual(w.PendingDef, pins[0].PendingDef) ||
		w.PendingHash != "w2" || w.PendingSince == nil || !w.PendingSince.Equal(since) || w.PendingSince.Location() != time.UTC {
		t.Fatalf("pin read back %+v", w)
	}
	if r := set.Pins[1]; r.RejectedHash != "r0" || r.PendingDef != nil || r.PendingSince != nil {
		t.Fatalf("pin without a pending change read back %+v", r)
	}

	// Resolve: a mismatched hash, no pending change, then approve once.
	if _, err := s.ResolveToolChange(ctx, srv.ID, "write", true, "other"); !errors.Is(err, persistence.ErrChanged) {
		t.Fatalf("resolve with another hash: %v, want ErrChanged", err)
	}
	if _, err := s.ResolveToolChange(ctx, srv.ID, "read", true, ""); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("resolve without a pending change: %v, want ErrNotFound", err)
	}
	if _, err := s.ResolveToolChange(ctx, srv.ID, "nope", true, ""); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("resolve of an unknown tool: %v, want ErrNotFound", err)
	}
	approved, err := s.ResolveToolChange(ctx, srv.ID, "write", true, "w2")
	if err != nil {
		t.Fatalf("approve: %v", err)
	}
	after := mustPins(t, s, srv.ID)
	stored := after.Pins[2]
	if approved.ApprovedHash != "w2" || stored.ApprovedHash != "w2" || !jsonEqual(stored.ApprovedDef, pins[0].PendingDef) ||
		stored.PendingHash != "" || stored.PendingDef != nil || after.Version != set.Version+1 {
		t.Fatalf("approved pin %+v (version %d)", stored, after.Version)
	}

	// A save of a subset deletes the others; a lapsed fence writes nothing.
	if err := s.SaveToolPins(ctx, srv.ID, after.Version, after.Pins[:1], nil); err != nil {
		t.Fatalf("SaveToolPins(subset): %v", err)
	}
	if got := mustPins(t, s, srv.ID); len(got.Pins) != 1 || got.Pins[0].OriginalName != "B-upper" {
		t.Fatalf("after saving a subset: %+v", got.Pins)
	}
	lease, err := s.AcquireLease(ctx, srv.ID, "node-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseLease(ctx, lease); err != nil {
		t.Fatal(err)
	}
	cur := mustPins(t, s, srv.ID)
	if err := s.SaveToolPins(ctx, srv.ID, cur.Version, nil, &lease); !errors.Is(err, persistence.ErrLeaseLost) {
		t.Fatalf("save under a released lease: %v, want ErrLeaseLost", err)
	}
	if got := mustPins(t, s, srv.ID); got.Version != cur.Version || len(got.Pins) != 1 {
		t.Fatalf("a refused save wrote: %+v", got)
	}
}

// testToolOverrides: overrides are upserted, listed per server or all, refused for an unknown server or a taken
// exposed name, and deleted once.
func testToolOverrides(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	a, b := mustCreate(t, s, "ov-a"), mustCreate(t, s, "ov-b")
	if _, err := s.PutToolOverride(ctx, persistence.ToolOverride{ServerID: "00000000-0000-7000-8000-000000000000",
		OriginalName: "x"}); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("unknown server: %v, want ErrNotFound", err)
	}
	o := persistence.ToolOverride{ServerID: a.ID, OriginalName: "search", ExposedName: ptr("find"),
		Description: ptr("Find things"), Annotations: &persistence.ToolAnnotations{ReadOnlyHint: ptr(true)}}
	got, err := s.PutToolOverride(ctx, o)
	if err != nil {
		t.Fatalf("PutToolOverride: %v", err)
	}
	if got.ServerID != a.ID || *got.ExposedName != "find" || *got.Description != "Find things" ||
		got.Annotations == nil || !*got.Annotations.ReadOnlyHint || got.UpdatedAt.IsZero() || got.UpdatedAt.Location() != time.UTC {
		t.Fatalf("stored override %+v", got)
	}
	if _, err := s.PutToolOverride(ctx, persistence.ToolOverride{ServerID: b.ID, OriginalName: "other",
		ExposedName: ptr("find")}); !errors.Is(err, persistence.ErrAlreadyExists) {
		t.Fatalf("taken exposed name: %v, want ErrAlreadyExists", err)
	}
	o.Description, o.Annotations = nil, nil // replace: cleared fields read back nil
	if got, err = s.PutToolOverride(ctx, o); err != nil || got.Description != nil || got.Annotations != nil {
		t.Fatalf("replace: %+v, %v", got, err)
	}
	if _, err := s.PutToolOverride(ctx, persistence.ToolOverride{ServerID: b.ID, OriginalName: "zeta"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutToolOverride(ctx, persistence.ToolOverride{ServerID: a.ID, OriginalName: "Alpha"}); err != nil {
		t.Fatal(err)
	}
	only, err := s.ListToolOverrides(ctx, a.ID)
	if err != nil || len(only) != 2 || only[0].OriginalName != "Alpha" || only[1].OriginalName != "search" {
		t.Fatalf("overrides of one server: %+v, %v", only, err)
	}
	all, err := s.ListToolOverrides(ctx, "")
	if err != nil || len(all) != 3 {
		t.Fatalf("every override: %+v, %v", all, err)
	}
	if _, err := s.ListToolOverrides(ctx, "00000000-0000-7000-8000-000000000000"); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("overrides of an unknown server: %v, want ErrNotFound", err)
	}
	if err := s.DeleteToolOverride(ctx, a.ID, "search"); err != nil {
		t.Fatalf("DeleteToolOverride: %v", err)
	}
	if err := s.DeleteToolOverride(ctx, a.ID, "search"); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
}

// testProfiles: a profile is created, replaced keeping its creation time, listed by name, read and deleted once.
func testProfiles(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	p := persistence.Profile{Name: "ops", Description: ptr("operations"),
		Selectors: []persistence.ProfileSelector{{Server: "github", Tools: []string{"create_*"}}}, Clients: []string{"ci"},
		Bindings: []persistence.ProfileBinding{{Subject: "alice"}, {Claim: "groups", Value: "eng"}}, TokenBudget: ptr(0)}
	got, created, err := s.PutProfile(ctx, p)
	if err != nil || !created {
		t.Fatalf("PutProfile: created %v, %v", created, err)
	}
	if got.Name != "ops" || *got.Description != "operations" || !reflect.DeepEqual(got.Selectors, p.Selectors) ||
		!reflect.DeepEqual(got.Clients, p.Clients) || !reflect.DeepEqual(got.Bindings, p.Bindings) || got.TokenBudget == nil || *got.TokenBudget != 0 || got.CreatedAt.IsZero() || got.CreatedAt.Location() != time.UTC {
		t.Fatalf("stored profile %+v", got)
	}
	if got, err := s.GetProfile(ctx, "ops"); err != nil || got.TokenBudget == nil || *got.TokenBudget != 0 {
		t.Fatalf("GetProfile: token budget %v, %v; want 0", got.TokenBudget, err)
	}
	p.TokenBudget = ptr(12_000)
	if got, _, err := s.PutProfile(ctx, p); err != nil || got.TokenBudget == nil || *got.TokenBudget != 12_000 {
		t.Fatalf("replace the token budget: %+v, %v", got, err)
	}
	if _, _, err := s.PutProfile(ctx, persistence.Profile{Name: "neg", TokenBudget: ptr(-1)}); err == nil {
		t.Fatal("a negative token budget was stored")
	}
	p.Description, p.Clients, p.Bindings, p.TokenBudget = nil, nil, nil, nil
	again, created, err := s.PutProfile(ctx, p)
	if err != nil || created || !again.CreatedAt.Equal(got.CreatedAt) || again.Description != nil || again.TokenBudget != nil ||
		again.Clients == nil || len(again.Clients) != 0 || again.Bindings == nil || len(again.Bindings) != 0 {
		t.Fatalf("replace: %+v, created %v, %v", again, created, err)
	}
	if _, _, err := s.PutProfile(ctx, persistence.Profile{Name: "Dev"}); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListProfiles(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "Dev" || list[1].Name != "ops" {
		t.Fatalf("ListProfiles: %+v, %v", list, err)
	}
	if one, err := s.GetProfile(ctx, "ops"); err != nil || !reflect.DeepEqual(one, again) {
		t.Fatalf("GetProfile: %+v, %v; want %+v", one, err, again)
	}
	if err := s.DeleteProfile(ctx, "ops"); err != nil {
		t.Fatalf("DeleteProfile: %v", err)
	}
	if err := s.DeleteProfile(ctx, "ops"); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
	if _, err := s.GetProfile(ctx, "ops"); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("GetProfile after delete: %v, want ErrNotFound", err)
	}
}
