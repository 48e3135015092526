package actors

import (
	"encoding/json"
	"testing"

	"github.com/mcpgw/aggregator/actors/curation"
	"github.com/mcpgw/aggregator/persistence"
)

// TestPinHashesCache: the cache answers the pin hash of a definition it saw, computes it again when the bytes
// change, answers "" for a definition that cannot be read, and forgets a removed server's tools.
func TestPinHashesCache(t *testing.T) {
	p := newPinHashes()
	def := json.RawMessage(`{"name":"a","description":"x"}`)
	want, _ := curation.PinHash(def)
	tool := &persistence.Tool{ID: 1, SourceServerID: "s1", Definition: def}
	if got := p.of(tool); got != want {
		t.Fatalf("hash %q, want %q", got, want)
	}
	p.m[1] = pinHashEntry{key: p.m[1].key, hash: "cached", server: "s1"} // the cache answers without recomputing
	if got := p.of(tool); got != "cached" {
		t.Fatalf("unchanged definition recomputed: %q", got)
	}
	tool.Definition = json.RawMessage(`{"name":"a","description":"y"}`)
	if got, w2 := p.of(tool), mustPinHash(t, tool.Definition); got != w2 {
		t.Fatalf("changed definition: %q, want %q", got, w2)
	}
	if got := p.of(&persistence.Tool{ID: 2, SourceServerID: "s2", Definition: json.RawMessage(`nope`)}); got != "" {
		t.Fatalf("unreadable definition hashed to %q", got)
	}
	p.forgetServer("s1")
	if _, ok := p.m[1]; ok || len(p.m) != 1 {
		t.Fatalf("forgetServer left %v", p.m)
	}
}

func mustPinHash(t *testing.T, def json.RawMessage) string {
	t.Helper()
	h, err := curation.PinHash(def)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
