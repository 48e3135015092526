package routing

import (
	"encoding/json"
	"testing"

	"github.com/mcpgw/aggregator/actors/curation"
	"github.com/mcpgw/aggregator/persistence"
)

// TestPinHashesCache: the cache answers the pin hash of a definition it saw, computes it again when the bytes
// change, answers "" for a definition that cannot be read, and forgets a removed server's tools. The discovery's
// hash of a definition is the router's and the indexer's: one cache for the process.
func TestPinHashesCache(t *testing.T) {
	p := NewPinHashes()
	def := json.RawMessage(`{"name":"a","description":"x"}`)
	want, _ := curation.PinHash(def)
	tool := &persistence.Tool{ID: 1, SourceServerID: "s1", OriginalName: "a", Definition: def}
	if got := p.Of(tool); got != want {
		t.Fatalf("hash %q, want %q", got, want)
	}
	p.m["s1"]["a"] = pinHashEntry{key: p.m["s1"]["a"].key, hash: "cached"} // the cache answers without recomputing
	if got := p.Of(tool); got != "cached" {
		t.Fatalf("unchanged definition recomputed: %q", got)
	}
	tool.Definition = json.RawMessage(`{"name":"a","description":"y"}`)
	if got, w2 := p.Of(tool), mustPinHash(t, tool.Definition); got != w2 {
		t.Fatalf("changed definition: %q, want %q", got, w2)
	}
	if got := p.Of(&persistence.Tool{ID: 2, SourceServerID: "s2", OriginalName: "b", Definition: json.RawMessage(`nope`)}); got != "" {
		t.Fatalf("unreadable definition hashed to %q", got)
	}
	if got, err := p.Def("s1", "a", tool.Definition); err != nil || got != mustPinHash(t, tool.Definition) {
		t.Fatalf("def of a cached definition: %q %v", got, err)
	}
	if _, err := p.Def("s3", "c", json.RawMessage(`nope`)); err == nil {
		t.Fatal("def of an unreadable definition: no error")
	}
	p.ForgetServer("s1")
	p.ForgetServer("s3")
	if _, ok := p.m["s1"]; ok || len(p.m) != 1 {
		t.Fatalf("ForgetServer left %v", p.m)
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
