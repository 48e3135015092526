package curation

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

func TestFilterHides(t *testing.T) {
	cases := []struct {
		name   string
		filter persistence.ToolFilter
		tool   string
		hidden bool
	}{
		{"no filter", persistence.ToolFilter{}, "anything", false},
		{"unknown mode hides nothing", persistence.ToolFilter{Mode: "none", Patterns: []string{"*"}}, "x", false},
		{"allow exact", persistence.ToolFilter{Mode: "allow", Patterns: []string{"echo"}}, "echo", false},
		{"allow other", persistence.ToolFilter{Mode: "allow", Patterns: []string{"echo"}}, "add", true},
		{"allow glob", persistence.ToolFilter{Mode: "allow", Patterns: []string{"get_*"}}, "get_weather", false},
		{"allow empty list hides all", persistence.ToolFilter{Mode: "allow"}, "echo", true},
		{"deny glob", persistence.ToolFilter{Mode: "deny", Patterns: []string{"delete_*", "drop?"}}, "delete_file", true},
		{"deny question mark", persistence.ToolFilter{Mode: "deny", Patterns: []string{"drop?"}}, "drops", true},
		{"deny keeps others", persistence.ToolFilter{Mode: "deny", Patterns: []string{"delete_*"}}, "read_file", false},
		{"deny class", persistence.ToolFilter{Mode: "deny", Patterns: []string{"[ab]*"}}, "bash", true},
		{"case sensitive", persistence.ToolFilter{Mode: "deny", Patterns: []string{"Echo"}}, "echo", false},
		{"invalid pattern matches nothing", persistence.ToolFilter{Mode: "deny", Patterns: []string{"[a"}}, "[a", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := NewFilter(c.filter).Hides(c.tool); got != c.hidden {
				t.Fatalf("Hides(%q) = %v, want %v", c.tool, got, c.hidden)
			}
		})
	}
}

func TestCheckPattern(t *testing.T) {
	for _, ok := range []string{"*", "get_*", "a?c", "[a-z]*", `esc\*`} {
		if err := CheckPattern(ok); err != nil {
			t.Errorf("CheckPattern(%q) = %v", ok, err)
		}
	}
	long := make([]byte, MaxPatternLength+1)
	for i := range long {
		long[i] = 'a'
	}
	for _, bad := range []string{"", "[a", `trailing\`, string(long)} {
		if err := CheckPattern(bad); err == nil {
			t.Errorf("CheckPattern(%q) accepted", bad)
		}
	}
}

func TestClientSafe(t *testing.T) {
	for name, want := range map[string]bool{"ok_name-1": true, "": false, "has.dot": false, "sp ace": false,
		"x123456789012345678901234567890123456789012345678901234567890123":  true,
		"x1234567890123456789012345678901234567890123456789012345678901234": false} {
		if got := ClientSafe(name); got != want {
			t.Errorf("ClientSafe(%q) = %v", name, got)
		}
	}
}

func TestApplyDefinition(t *testing.T) {
	yes, no, title := true, false, "Nice"
	cases := []struct {
		name string
		def  string
		o    *persistence.ToolOverride
		want string
	}{
		{"nil override", `{"title":"t"}`, nil, `{"title":"t"}`},
		{"no annotations", `{"title":"t"}`, &persistence.ToolOverride{}, `{"title":"t"}`},
		{"merge", `{"annotations":{"readOnlyHint":false,"openWorldHint":true}}`,
			&persistence.ToolOverride{Annotations: &persistence.ToolAnnotations{ReadOnlyHint: &yes, DestructiveHint: &no}},
			`{"annotations":{"destructiveHint":false,"openWorldHint":true,"readOnlyHint":true}}`},
		{"empty def", ``, &persistence.ToolOverride{Annotations: &persistence.ToolAnnotations{Title: &title}},
			`{"annotations":{"title":"Nice"}}`},
		{"null annotations", `{"annotations":null}`, &persistence.ToolOverride{Annotations: &persistence.ToolAnnotations{IdempotentHint: &yes}},
			`{"annotations":{"idempotentHint":true}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ApplyDefinition(json.RawMessage(c.def), c.o)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Fatalf("got %s, want %s", got, c.want)
			}
		})
	}
	if _, err := ApplyDefinition(json.RawMessage(`[1]`), &persistence.ToolOverride{Annotations: &persistence.ToolAnnotations{}}); err == nil {
		t.Fatal("a definition that is not an object was accepted")
	}
}

func TestHolds(t *testing.T) {
	tool := ToolView{Server: "files", OriginalName: "read_file", Name: "files.read_file", Alias: "files__read_file", Skills: []string{"file-ops"}}
	cases := []struct {
		name string
		sel  []persistence.ProfileSelector
		want bool
	}{
		{"no selectors", nil, false},
		{"empty selector", []persistence.ProfileSelector{{}}, false},
		{"server", []persistence.ProfileSelector{{Server: "files"}}, true},
		{"other server", []persistence.ProfileSelector{{Server: "git"}}, false},
		{"unknown server then match", []persistence.ProfileSelector{{Server: "later"}, {Tools: []string{"read_*"}}}, true},
		{"pattern on namespaced", []persistence.ProfileSelector{{Tools: []string{"files.*"}}}, true},
		{"pattern on alias", []persistence.ProfileSelector{{Tools: []string{"files__*"}}}, true},
		{"server and pattern both", []persistence.ProfileSelector{{Server: "files", Tools: []string{"write_*"}}}, false},
		{"skill", []persistence.ProfileSelector{{Skills: []string{"x", "file-ops"}}}, true},
		{"skill miss", []persistence.ProfileSelector{{Server: "files", Skills: []string{"web"}}}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := &persistence.Profile{Name: "p", Selectors: c.sel}
			if got := Holds(p, tool); got != c.want {
				t.Fatalf("Holds = %v, want %v", got, c.want)
			}
		})
	}
}

func hashOf(t *testing.T, def string) string {
	t.Helper()
	h, err := PinHash(json.RawMessage(def))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestPinHash(t *testing.T) {
	a := hashOf(t, `{"name":"x","description":"d","inputSchema":{"type":"object","properties":{"a":{"type":"number","maximum":1.50}}}}`)
	b := hashOf(t, `{ "inputSchema":{"properties":{"a":{"maximum":1.50,"type":"number"}},"type":"object"},"description":"d","name":"x","_meta":{"k":1},"icons":[]}`)
	if a != b {
		t.Fatal("key order, whitespace or unpinned fields changed the hash")
	}
	for _, changed := range []string{
		`{"name":"y","description":"d","inputSchema":{"type":"object","properties":{"a":{"type":"number","maximum":1.50}}}}`,
		`{"name":"x","description":"d!","inputSchema":{"type":"object","properties":{"a":{"type":"number","maximum":1.50}}}}`,
		`{"name":"x","description":"d","inputSchema":{"type":"object","properties":{"a":{"type":"number","maximum":1.5}}}}`,
		`{"name":"x","title":"T","description":"d","inputSchema":{"type":"object","properties":{"a":{"type":"number","maximum":1.50}}}}`,
		`{"name":"x","description":"d","inputSchema":{"type":"object","properties":{"a":{"type":"number","maximum":1.50}}},"annotations":{"readOnlyHint":true}}`,
		`{"name":"x","description":"d","inputSchema":{"type":"object","properties":{"a":{"type":"number","maximum":1.50}}},"outputSchema":{"type":"object"}}`,
	} {
		if hashOf(t, changed) == a {
			t.Errorf("a change of a pinned field kept the hash: %s", changed)
		}
	}
	if _, err := PinHash(json.RawMessage(`not json`)); err == nil {
		t.Fatal("PinHash accepted a broken definition")
	}
}

func TestDecide(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	on := persistence.ToolPolicy{Pinning: true, PinNewTools: persistence.PinNewWithhold}
	serve := persistence.ToolPolicy{Pinning: true, PinNewTools: persistence.PinNewServe}
	approved := func(name, hash string) persistence.ToolPin {
		return persistence.ToolPin{ServerID: "s", OriginalName: name, ApprovedHash: hash, ApprovedDef: json.RawMessage(`{"name":"` + name + `"}`)}
	}
	l := func(name, hash string) Listed {
		return Listed{Name: name, Hash: hash, Def: json.RawMessage(`{"name":"` + name + `","v":"` + hash + `"}`)}
	}
	type want struct {
		approved, pending, rejected string
	}
	cases := []struct {
		name   string
		policy persistence.ToolPolicy
		set    persistence.PinSet
		listed []Listed
		want   map[string]want
		held   []Held
	}{
		{"baseline approves everything", on, persistence.PinSet{}, []Listed{l("a", "h1"), l("b", "h2")},
			map[string]want{"a": {approved: "h1"}, "b": {approved: "h2"}}, nil},
		{"unchanged", on, persistence.PinSet{Version: 3, Pins: []persistence.ToolPin{approved("a", "h1")}}, []Listed{l("a", "h1")},
			map[string]want{"a": {approved: "h1"}}, nil},
		{"changed is held", on, persistence.PinSet{Version: 3, Pins: []persistence.ToolPin{approved("a", "h1")}}, []Listed{l("a", "h9")},
			map[string]want{"a": {approved: "h1", pending: "h9"}}, []Held{{Name: "a", Kind: ChangeChanged, Hash: "h9"}}},
		{"held change not announced twice", on, persistence.PinSet{Version: 3, Pins: []persistence.ToolPin{{OriginalName: "a", ApprovedHash: "h1", PendingHash: "h9", PendingDef: json.RawMessage(`{}`), PendingSince: &now}}},
			[]Listed{l("a", "h9")}, map[string]want{"a": {approved: "h1", pending: "h9"}}, nil},
		{"changed back drops pending", on, persistence.PinSet{Version: 3, Pins: []persistence.ToolPin{{OriginalName: "a", ApprovedHash: "h1", PendingHash: "h9"}}},
			[]Listed{l("a", "h1")}, map[string]want{"a": {approved: "h1"}}, nil},
		{"rejected change stays quiet", on, persistence.PinSet{Version: 3, Pins: []persistence.ToolPin{{OriginalName: "a", ApprovedHash: "h1", RejectedHash: "h9"}}},
			[]Listed{l("a", "h9")}, map[string]want{"a": {approved: "h1", rejected: "h9"}}, nil},
		{"new tool withheld", on, persistence.PinSet{Version: 1}, []Listed{l("n", "h5")},
			map[string]want{"n": {pending: "h5"}}, []Held{{Name: "n", Kind: ChangeNew, Hash: "h5"}}},
		{"new tool served when set", serve, persistence.PinSet{Version: 1}, []Listed{l("n", "h5")},
			map[string]want{"n": {approved: "h5"}}, nil},
		{"rename is a new tool", on, persistence.PinSet{Version: 2, Pins: []persistence.ToolPin{approved("old", "h1")}}, []Listed{l("new", "h1")},
			map[string]want{"old": {approved: "h1"}, "new": {pending: "h1"}}, []Held{{Name: "new", Kind: ChangeNew, Hash: "h1"}}},
		{"gone withheld tool dropped", on, persistence.PinSet{Version: 2, Pins: []persistence.ToolPin{{OriginalName: "n", PendingHash: "h5"}}}, nil,
			map[string]want{}, nil},
		{"gone approved tool kept without pending", on, persistence.PinSet{Version: 2, Pins: []persistence.ToolPin{{OriginalName: "a", ApprovedHash: "h1", PendingHash: "h2"}}}, nil,
			map[string]want{"a": {approved: "h1"}}, nil},
		{"duplicate listing counted once", on, persistence.PinSet{Version: 1}, []Listed{l("n", "h5"), l("n", "h6")},
			map[string]want{"n": {pending: "h5"}}, []Held{{Name: "n", Kind: ChangeNew, Hash: "h5"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(now, "s", c.policy, c.set, c.listed)
			got := map[string]want{}
			for _, p := range d.Pins {
				got[p.OriginalName] = want{approved: p.ApprovedHash, pending: p.PendingHash, rejected: p.RejectedHash}
				if p.PendingHash != "" && (p.PendingSince == nil || len(p.PendingDef) == 0) {
					t.Errorf("%s: pending without its definition or time", p.OriginalName)
				}
			}
			if len(got) != len(c.want) {
				t.Fatalf("pins %v, want %v", got, c.want)
			}
			for k, w := range c.want {
				if got[k] != w {
					t.Errorf("%s: %+v, want %+v", k, got[k], w)
				}
			}
			if len(d.Held) != len(c.held) {
				t.Fatalf("held %v, want %v", d.Held, c.held)
			}
			for i := range c.held {
				if d.Held[i] != c.held[i] {
					t.Errorf("held[%d] = %+v, want %+v", i, d.Held[i], c.held[i])
				}
			}
		})
	}
}

func TestServe(t *testing.T) {
	on := persistence.ToolPolicy{Pinning: true, PinNewTools: persistence.PinNewWithhold}
	cases := []struct {
		name   string
		policy persistence.ToolPolicy
		set    persistence.PinSet
		pin    *persistence.ToolPin
		hash   string
		want   Verdict
	}{
		{"pinning off", persistence.ToolPolicy{}, persistence.PinSet{Version: 4}, nil, "h", ServeCurrent},
		{"before baseline", on, persistence.PinSet{}, nil, "h", ServeCurrent},
		{"undecided new", on, persistence.PinSet{Version: 1}, nil, "h", Withhold},
		{"undecided new, serve", persistence.ToolPolicy{Pinning: true, PinNewTools: persistence.PinNewServe}, persistence.PinSet{Version: 1}, nil, "h", ServeCurrent},
		{"approved", on, persistence.PinSet{Version: 1}, &persistence.ToolPin{ApprovedHash: "h"}, "h", ServeCurrent},
		{"held", on, persistence.PinSet{Version: 1}, &persistence.ToolPin{ApprovedHash: "a", ApprovedDef: json.RawMessage(`{}`), PendingHash: "h"}, "h", ServeApproved},
		{"rejected new", on, persistence.PinSet{Version: 1}, &persistence.ToolPin{RejectedHash: "h"}, "h", Withhold},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Serve(c.policy, &c.set, c.pin, c.hash); got != c.want {
				t.Fatalf("Serve = %v, want %v", got, c.want)
			}
		})
	}
}

func TestDiff(t *testing.T) {
	from := json.RawMessage(`{"name":"x","description":"old","inputSchema":{"type":"object","properties":{"a/b":{"type":"string"},"gone":{}}},"_meta":{"x":1}}`)
	to := json.RawMessage(`{"name":"x","description":"new","inputSchema":{"type":"object","properties":{"a/b":{"type":"number"},"c":{}}},"_meta":{"x":2}}`)
	d, err := Diff(from, to)
	if err != nil {
		t.Fatal(err)
	}
	want := []DiffEntry{
		{Path: "/description", Op: "replace", From: "old", To: "new"},
		{Path: "/inputSchema/properties/a~1b/type", Op: "replace", From: "string", To: "number"},
		{Path: "/inputSchema/properties/c", Op: "add", To: map[string]any{}},
		{Path: "/inputSchema/properties/gone", Op: "remove", From: map[string]any{}},
	}
	if len(d) != len(want) {
		t.Fatalf("diff %+v, want %+v", d, want)
	}
	for i := range want {
		if d[i].Path != want[i].Path || d[i].Op != want[i].Op {
			t.Errorf("entry %d: %+v, want %+v", i, d[i], want[i])
		}
	}
	if d, _ := Diff(from, from); len(d) != 0 {
		t.Fatalf("identical definitions differ: %+v", d)
	}
}

func FuzzFilter(f *testing.F) {
	f.Add("allow", "get_*", "get_x")
	f.Add("deny", "[a-", "a")
	f.Add("deny", `\`, `\`)
	f.Fuzz(func(t *testing.T, mode, pattern, name string) {
		flt := NewFilter(persistence.ToolFilter{Mode: mode, Patterns: []string{pattern}})
		hidden := flt.Hides(name)
		if CheckPattern(pattern) != nil && mode == persistence.FilterDeny && hidden {
			t.Fatalf("an invalid pattern %q hid %q", pattern, name)
		}
		if mode != persistence.FilterAllow && mode != persistence.FilterDeny && hidden {
			t.Fatalf("mode %q hid a tool", mode)
		}
	})
}
