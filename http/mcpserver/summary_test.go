package mcpserver

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestNotifyFailuresSummarised: 300 per-session notification warnings become one line.
func TestNotifyFailuresSummarised(t *testing.T) {
	var buf bytes.Buffer
	h := newSummary(slog.New(slog.NewTextHandler(&buf, nil)), "calling notifications/", "notifying MCP sessions failed")
	log := slog.New(h)
	for range 300 {
		log.Warn("calling notifications/tools/list_changed: session closed")
	}
	log.Warn("something else")
	h.flush()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(buf.String(), "sessions=300") {
		t.Fatalf("want one summary line and the other warning, got %d lines:\n%s", len(lines), buf.String())
	}
}
