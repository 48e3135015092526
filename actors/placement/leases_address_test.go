package placement

import (
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// TestNodeAddress: the addresses a renewal read are what NodeAddress answers (the owner header of a REST call names
// another node by them); a node without an address, or not seen by the last renewal, has none.
func TestNodeAddress(t *testing.T) {
	o := NewLeases(nil, "self", 3*time.Second)
	if _, ok := o.NodeAddress("a"); ok {
		t.Fatal("an address before any renewal")
	}
	o.setOthers([]persistence.Node{{ID: "self", Address: "http://127.0.0.1:1"}, {ID: "a", Address: "http://a:8082"}, {ID: "b"}})
	o.setOthers([]persistence.Node{{ID: "self", Address: "http://127.0.0.1:1"}, {ID: "a", Address: "http://a:8083"}, {ID: "c", Address: "http://c:8082"}})
	for _, tc := range []struct {
		node, want string
		ok         bool
	}{
		{"a", "http://a:8083", true}, // the last renewal's
		{"c", "http://c:8082", true},
		{"self", "http://127.0.0.1:1", true},
		{"b", "", false}, // no longer seen (and never had an address)
		{"", "", false},
	} {
		got, ok := o.NodeAddress(tc.node)
		if got != tc.want || ok != tc.ok {
			t.Errorf("NodeAddress(%q) = %q, %v; want %q, %v", tc.node, got, ok, tc.want, tc.ok)
		}
	}
}
