package hooks_test

import (
	"fmt"
	"testing"

	"github.com/mcpgw/aggregator/internal/hooks"
)

func TestSetAddCallCancel(t *testing.T) {
	var h hooks.Set[int]
	var a, b []int
	cancelA := h.Add(func(v int) { a = append(a, v) })
	h.Add(func(v int) { b = append(b, v) })
	h.Call(1)
	cancelA()
	h.Call(2)
	if len(a) != 1 || a[0] != 1 || len(b) != 2 {
		t.Fatalf("a = %v, b = %v; want a [1] (cancelled), b [1 2]", a, b)
	}
}

func TestSetFunctionMayCancelItself(t *testing.T) {
	var h hooks.Set[string]
	var cancel func()
	calls := 0
	cancel = h.Add(func(string) { calls++; cancel() }) // would deadlock if called under the lock
	h.Call("x")
	h.Call("y")
	if calls != 1 {
		t.Fatalf("called %d times, want 1", calls)
	}
}

func ExampleSet() {
	var h hooks.Set[string]
	stop := h.Add(func(s string) { fmt.Println("told:", s) })
	h.Call("table 1")
	stop()
	h.Call("table 2")
	// Output: told: table 1
}
