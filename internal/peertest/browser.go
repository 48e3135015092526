package peertest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Chromium returns Debian's chromium binary, for the console's browser test (`make test` installs it); without
// it the test skips, or fails under CI=true.
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	missingTool(t, "chromium")
	return ""
}

// ConsoleScript is the playwright-core script that drives the console (testdata/peers/console.mjs); it needs
// playwright-core from the peers' node_modules.
func ConsoleScript(t testing.TB) string {
	t.Helper()
	root := filepath.Join(RepoRoot(t), "testdata", "peers")
	if _, err := os.Stat(filepath.Join(root, "node_modules", "playwright-core", "package.json")); err != nil {
		missing(t, "playwright-core")
	}
	return filepath.Join(root, "console.mjs")
}

// TSClientScript is testdata/peers/ts-client.mjs, a client built on the TypeScript SDK v2
// (@modelcontextprotocol/client, which speaks both 2025-11-25 and 2026-07-28).
func TSClientScript(t testing.TB) string {
	t.Helper()
	root := filepath.Join(RepoRoot(t), "testdata", "peers")
	if _, err := os.Stat(filepath.Join(root, "node_modules", "@modelcontextprotocol", "client", "package.json")); err != nil {
		missing(t, "@modelcontextprotocol/client")
	}
	return filepath.Join(root, "ts-client.mjs")
}

// ExtTasksClientScript is testdata/peers/ext-tasks-client.mjs, the MCP Tasks client of
// @modelcontextprotocol/ext-tasks on the TypeScript SDK v2 client.
func ExtTasksClientScript(t testing.TB) string {
	t.Helper()
	root := filepath.Join(RepoRoot(t), "testdata", "peers")
	if _, err := os.Stat(filepath.Join(root, "node_modules", "@modelcontextprotocol", "ext-tasks", "package.json")); err != nil {
		missing(t, "@modelcontextprotocol/ext-tasks")
	}
	return filepath.Join(root, "ext-tasks-client.mjs")
}

// ExtTasksInputClientScript is testdata/peers/ext-tasks-input-client.mjs: the ext-tasks client answering a task's
// elicitation while it reads the task from a second connection.
func ExtTasksInputClientScript(t testing.TB) string {
	t.Helper()
	return filepath.Join(filepath.Dir(ExtTasksClientScript(t)), "ext-tasks-input-client.mjs")
}

// ExtTasksV2ClientScript is testdata/peers/ext-tasks-v2-client.mjs: the ext-tasks client over revision 2026-07-28
// (the tasks extension), with a raw request path of its own.
func ExtTasksV2ClientScript(t testing.TB) string {
	t.Helper()
	return filepath.Join(filepath.Dir(ExtTasksClientScript(t)), "ext-tasks-v2-client.mjs")
}

// ExtTasksStdioClientScript is testdata/peers/ext-tasks-stdio-client.mjs: the ext-tasks client over stdio, starting
// its server itself (`aggregator stdio`), answering a task's elicitation and listening for its status.
func ExtTasksStdioClientScript(t testing.TB) string {
	t.Helper()
	return filepath.Join(filepath.Dir(ExtTasksClientScript(t)), "ext-tasks-stdio-client.mjs")
}
