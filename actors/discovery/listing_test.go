package discovery

import (
	"errors"
	"slices"
	"testing"

	"github.com/mcpgw/aggregator/actors/curation"
	"github.com/mcpgw/aggregator/persistence"
)

func raws(s ...string) [][]byte {
	out := make([][]byte, len(s))
	for i, v := range s {
		out[i] = []byte(v)
	}
	return out
}

func TestSplitKey(t *testing.T) {
	for _, tc := range []struct {
		key      string
		id       string
		features bool
	}{
		{"s1", "s1", false},
		{FeaturesKey("s1"), "s1", true},
		{"features:", "", true},
		{"xfeatures:s1", "xfeatures:s1", false},
	} {
		id, features := SplitKey(tc.key)
		if id != tc.id || features != tc.features {
			t.Errorf("SplitKey(%q) = %q, %v; want %q, %v", tc.key, id, features, tc.id, tc.features)
		}
	}
}

func TestTools(t *testing.T) {
	for _, tc := range []struct {
		name      string
		listed    [][]byte
		limit     int
		names     []string
		schemas   []string
		unnamed   int
		looped    []string
		truncated int
	}{
		{name: "empty", names: []string{}},
		{
			name:    "schema defaults to an object",
			listed:  raws(`{"name":"a","inputSchema":{"type":"object","properties":{"x":{}}}}`, `{"name":"b"}`, `{"name":"c","inputSchema":null}`),
			names:   []string{"a", "b", "c"},
			schemas: []string{`{"type":"object","properties":{"x":{}}}`, `{"type":"object"}`, `{"type":"object"}`},
		},
		{
			name:    "unusable names are skipped",
			listed:  raws(`{"name":""}`, `not json`, `{"description":"no name"}`, `{"name":"ok"}`),
			names:   []string{"ok"},
			unnamed: 3,
		},
		{
			name: "tools that passed through this daemon are dropped",
			listed: raws(`{"name":"mine","_meta":{"io.mcpgw.aggregator/via":["other","me"]}}`,
				`{"name":"theirs","_meta":{"io.mcpgw.aggregator/via":["other"]}}`),
			names:  []string{"theirs"},
			looped: []string{"mine"},
		},
		{
			name:      "the first ones are kept beyond the cap",
			listed:    raws(`{"name":"a"}`, `{"name":"b"}`, `{"name":"c"}`),
			limit:     2,
			names:     []string{"a", "b"},
			truncated: 1,
		},
		{
			name:   "no cap at 0",
			listed: raws(`{"name":"a"}`, `{"name":"b"}`),
			names:  []string{"a", "b"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := Tools(tc.listed, "me", tc.limit)
			var names []string
			for i, d := range l.Defs {
				names = append(names, d.OriginalName)
				if string(d.Definition) == "" {
					t.Errorf("tool %s: definition not kept", d.OriginalName)
				}
				if tc.schemas != nil && string(d.InputSchema) != tc.schemas[i] {
					t.Errorf("tool %s: schema %s, want %s", d.OriginalName, d.InputSchema, tc.schemas[i])
				}
			}
			if !slices.Equal(names, tc.names) && !(len(names) == 0 && len(tc.names) == 0) {
				t.Errorf("names %v, want %v", names, tc.names)
			}
			if l.Unnamed != tc.unnamed || l.Truncated != tc.truncated || !slices.Equal(l.Looped, tc.looped) {
				t.Errorf("unnamed %d, truncated %d, looped %v; want %d, %d, %v", l.Unnamed, l.Truncated, l.Looped, tc.unnamed, tc.truncated, tc.looped)
			}
			if len(tc.looped) > 0 && !slices.Equal(l.LoopPath, []string{"other", "me"}) {
				t.Errorf("loop path %v", l.LoopPath)
			}
		})
	}
}

func TestFeatures(t *testing.T) {
	for _, tc := range []struct {
		name                         string
		prompts, resources, template [][]byte
		keys                         []string
		unusable                     int
		reserved                     map[string]int
	}{
		{name: "none", reserved: map[string]int{}},
		{
			name:      "each kind by its key",
			prompts:   raws(`{"name":"p"}`),
			resources: raws(`{"uri":"file:///a"}`),
			template:  raws(`{"uriTemplate":"file:///{x}"}`),
			keys:      []string{"prompt:p", "resource:file:///a", "resource_template:file:///{x}"},
			reserved:  map[string]int{},
		},
		{
			name:      "missing keys are unusable",
			prompts:   raws(`{"uri":"p"}`, `[]`),
			resources: raws(`{"name":"r"}`, `{"uri":""}`),
			unusable:  4,
			reserved:  map[string]int{},
		},
		{
			name:      "the reserved scheme is dropped from resources, not from prompts",
			prompts:   raws(`{"name":"mcp-aggregator://x"}`),
			resources: raws(`{"uri":"mcp-aggregator://s/file/a"}`),
			template:  raws(`{"uriTemplate":"mcp-aggregator://s/{x}"}`),
			keys:      []string{"prompt:mcp-aggregator://x"},
			reserved:  map[string]int{persistence.FeatureResource: 1, persistence.FeatureResourceTemplate: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := Features(tc.prompts, tc.resources, tc.template)
			var keys []string
			for _, d := range l.Defs {
				keys = append(keys, d.Kind+":"+d.Key)
			}
			if !slices.Equal(keys, tc.keys) {
				t.Errorf("keys %v, want %v", keys, tc.keys)
			}
			if l.Unusable != tc.unusable {
				t.Errorf("unusable %d, want %d", l.Unusable, tc.unusable)
			}
			if len(l.Reserved) != len(tc.reserved) {
				t.Errorf("reserved %v, want %v", l.Reserved, tc.reserved)
			}
			for k, n := range tc.reserved {
				if l.Reserved[k] != n {
					t.Errorf("reserved %v, want %v", l.Reserved, tc.reserved)
				}
			}
		})
	}
}

func TestListedLeavesOutUnhashable(t *testing.T) {
	defs := []persistence.ToolDef{{OriginalName: "a", Definition: []byte(`{"name":"a"}`)}, {OriginalName: "bad"}, {OriginalName: "c"}}
	hash := func(server, name string, def []byte) (string, error) {
		if server != "s1" {
			t.Errorf("hashed for server %q", server)
		}
		if name == "bad" {
			return "", errors.New("unreadable")
		}
		return "h-" + name, nil
	}
	got := Listed("s1", defs, hash)
	want := []curation.Listed{{Name: "a", Def: []byte(`{"name":"a"}`), Hash: "h-a"}, {Name: "c", Hash: "h-c"}}
	if len(got) != len(want) {
		t.Fatalf("listed %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Name != want[i].Name || got[i].Hash != want[i].Hash || string(got[i].Def) != string(want[i].Def) {
			t.Errorf("listed[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestPinCounts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		d       curation.Decision
		pending int
		held    map[string]int
	}{
		{name: "nothing", held: map[string]int{}},
		{
			name: "pending and held by kind",
			d: curation.Decision{
				Pins: []persistence.ToolPin{{OriginalName: "a", PendingHash: "x"}, {OriginalName: "b"}, {OriginalName: "c", PendingHash: "y"}},
				Held: []curation.Held{{Name: "a", Kind: "changed"}, {Name: "c", Kind: "new"}, {Name: "d", Kind: "changed"}},
			},
			pending: 2,
			held:    map[string]int{"changed": 2, "new": 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pending, held := PinCounts(tc.d)
			if pending != tc.pending || len(held) != len(tc.held) {
				t.Fatalf("pending %d, held %v; want %d, %v", pending, held, tc.pending, tc.held)
			}
			for k, n := range tc.held {
				if held[k] != n {
					t.Errorf("held %v, want %v", held, tc.held)
				}
			}
		})
	}
}
