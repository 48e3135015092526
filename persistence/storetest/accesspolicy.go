package storetest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/mcpgw/aggregator/persistence"
)

// testAccessPolicy: none at first, then each write replaces the document and bumps the version.
func testAccessPolicy(t *testing.T, s persistence.Store) {
	ctx := context.Background()
	p, err := s.GetAccessPolicy(ctx)
	if err != nil || p.Version != 0 || p.Document != nil {
		t.Fatalf("fresh store: %+v, %v; want none", p, err)
	}
	doc1 := json.RawMessage(`{"default":"allow","rules":[{"name":"a","effect":"deny","when":"subject == \"x\""}]}`)
	p1, err := s.PutAccessPolicy(ctx, doc1)
	if err != nil || p1.Version != 1 || p1.UpdatedAt.IsZero() {
		t.Fatalf("first put: %+v, %v", p1, err)
	}
	doc2 := json.RawMessage(`{"default":"deny","rules":[]}`)
	if p2, err := s.PutAccessPolicy(ctx, doc2); err != nil || p2.Version != 2 {
		t.Fatalf("second put: %+v, %v", p2, err)
	}
	got, err := s.GetAccessPolicy(ctx)
	if err != nil || got.Version != 2 {
		t.Fatalf("get: %+v, %v", got, err)
	}
	var d struct {
		Default string `json:"default"`
		Rules   []any  `json:"rules"`
	}
	if err := json.Unmarshal(got.Document, &d); err != nil || d.Default != "deny" || d.Rules == nil || len(d.Rules) != 0 {
		t.Fatalf("document %s (%v)", got.Document, err)
	}
	if _, err := s.PutAccessPolicy(ctx, json.RawMessage(`{"default":`)); err == nil {
		t.Fatal("a document that is not JSON was stored")
	}
}
