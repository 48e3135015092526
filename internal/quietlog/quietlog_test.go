package quietlog_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/internal/quietlog"
)

func TestNewDropsRecordsBelowMin(t *testing.T) {
	var buf bytes.Buffer
	log := quietlog.New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), slog.LevelWarn).
		With("lib", "x").WithGroup("g")
	log.Info("routine")
	log.Warn("trouble", "k", "v")
	out := buf.String()
	if strings.Contains(out, "routine") || !strings.Contains(out, "trouble") || !strings.Contains(out, "lib=x") || !strings.Contains(out, "g.k=v") {
		t.Fatalf("logged %q; want only the warning, with its attributes and group", out)
	}
}

func ExampleNew() {
	log := quietlog.New(slog.Default(), slog.LevelWarn)
	log.Info("not logged")
	// Output:
}
