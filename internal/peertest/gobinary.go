package peertest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// binaries caches the binaries GoBinary built, per test process: a hostile backend is built once however many tests
// start it.
type binaries struct {
	mu    sync.Mutex
	paths map[string]string
	dir   string
}

// built is the per-process cache of GoBinary. It is test-only state of a test helper package.
var built = &binaries{paths: map[string]string{}}

// GoBinary builds the main package at pkg (a path relative to the module root, such as
// "./testdata/hostile/flood") once per test process and returns the binary's path. The small real servers that
// play hostile backends live under testdata/, which `go build ./...` ignores, so tests build them on demand.
func GoBinary(t testing.TB, pkg string) string {
	t.Helper()
	built.mu.Lock()
	defer built.mu.Unlock()
	if p, ok := built.paths[pkg]; ok {
		return p
	}
	if built.dir == "" {
		dir, err := os.MkdirTemp("", "peertest-bin-")
		if err != nil {
			t.Fatalf("temp dir: %v", err)
		}
		built.dir = dir
	}
	out := filepath.Join(built.dir, strings.NewReplacer("/", "_", ".", "_").Replace(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = RepoRoot(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	built.paths[pkg] = out
	return out
}
