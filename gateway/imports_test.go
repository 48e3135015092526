package gateway_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The use-case layer must not depend on a front end's framework or on the actor runtime, directly or through any
// package it imports: the front ends call it, and the actor system is reached through its interfaces only.
func TestImportsNoFrameworkNorActorRuntime(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/mcpgw/aggregator/gateway").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps answered only %q", deps)
	}
	for _, dep := range deps {
		// The actor system itself; its leaf packages (routing, ...) are allowed as long as they stay free of the
		// runtime, which the prefixes check.
		if dep == "github.com/mcpgw/aggregator/actors" ||
			strings.HasPrefix(dep, "github.com/gofiber/") || strings.HasPrefix(dep, "github.com/asynkron/") {
			t.Errorf("gateway depends on %s", dep)
		}
	}
}
