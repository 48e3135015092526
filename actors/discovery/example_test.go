package discovery_test

import (
	"fmt"

	"github.com/mcpgw/aggregator/actors/discovery"
)

// A server's tools/list read into the rows discovery stores: the unnamed tool is skipped, the tool that already
// passed through this daemon ("me") is dropped, and with a cap of 1 only the first usable tool is kept.
func ExampleTools() {
	listed := [][]byte{
		[]byte(`{"name":""}`),
		[]byte(`{"name":"echo","description":"says it back"}`),
		[]byte(`{"name":"loop","_meta":{"io.mcpgw.aggregator/via":["me"]}}`),
		[]byte(`{"name":"add"}`),
	}
	l := discovery.Tools(listed, "me", 1)
	for _, d := range l.Defs {
		fmt.Println(d.OriginalName, string(d.InputSchema))
	}
	fmt.Println("unnamed", l.Unnamed, "looped", l.Looped, "truncated", l.Truncated)
	// Output:
	// echo {"type":"object"}
	// unnamed 1 looped [loop] truncated 1
}

// The key of a server's feature discovery, apart from its tool discovery (keyed by the id).
func ExampleSplitKey() {
	fmt.Println(discovery.SplitKey("s1"))
	fmt.Println(discovery.SplitKey(discovery.FeaturesKey("s1")))
	// Output:
	// s1 false
	// s1 true
}
