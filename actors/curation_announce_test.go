package actors_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/internal/syncbuf"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/actors/curation"
	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

// TestPinningAnnouncesHeldChanges: each change that definition pinning holds is announced by a warning (server,
// tool, kind, the approve route) and counted in mcp_aggregator_tool_changes_held_total{server,kind}, with
// mcp_aggregator_tool_changes_pending{server} set; a changed definition of an approved tool is held as "changed"
// while the approved one is still served; deleting the server deletes its pins.
func TestPinningAnnouncesHeldChanges(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(context.Background(), t.TempDir()+"/agg.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var logs syncbuf.Buffer
	m := metrics.New(nil)
	sys, err := actors.Start(context.Background(), actors.Deps{Store: st, Config: testConfig(), Metrics: m,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = sys.Shutdown(ctx)
	})
	backend, url := manyTools(t, 2)
	raw, _ := json.Marshal(map[string]any{"base_url": url})
	ctx := context.Background()
	s, err := sys.Register(ctx, actors.RegisterRequest{Name: "ann", TransportType: persistence.TransportHTTP,
		ConnectionConfig: raw, AutoConnect: true, PinNewTools: persistence.PinNewWithhold})
	if err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, sys, 30*time.Second, "baseline", hasTool("ann.tool_0001"))

	addTool(backend, "late", "a tool added after approval")
	addTool(backend, "tool_0000", "the first tool, described anew") // replaces the approved definition
	waitPins(t, st, s.ID, "both held", func(set persistence.PinSet) bool {
		a, b := pinOf(set, "late"), pinOf(set, "tool_0000")
		return a != nil && a.PendingHash != "" && b != nil && b.PendingHash != ""
	})
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(m.ToolChangesPending.WithLabelValues("ann")) != 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := testutil.ToFloat64(m.ToolChangesPending.WithLabelValues("ann")); got != 2 {
		t.Errorf("pending changes gauge = %v, want 2", got)
	}
	for kind, want := range map[string]float64{curation.ChangeNew: 1, curation.ChangeChanged: 1} {
		if got := testutil.ToFloat64(m.ToolChangesHeld.WithLabelValues("ann", kind)); got != want {
			t.Errorf("held changes of kind %s = %v, want %v", kind, got, want)
		}
	}
	out := logs.String()
	for _, want := range []string{"held for approval", "tool=late", "kind=" + curation.ChangeNew, "tool=tool_0000",
		"kind=" + curation.ChangeChanged, "/servers/" + s.ID + "/tools/changes/late/approve"} {
		if !strings.Contains(out, want) {
			t.Errorf("the warnings lack %q:\n%s", want, out)
		}
	}
	// The approved definition is still served; the new tool is withheld.
	rt := sys.Routes()
	if e, ok := rt.Tool("ann.tool_0000"); !ok || e.Description == "the first tool, described anew" {
		t.Errorf("held change served instead of the approved definition: %+v", e)
	}
	if hasTool("ann.late")(rt) {
		t.Error("a withheld new tool is routed")
	}

	if err := sys.Remove(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	set, err := st.ListToolPins(ctx, s.ID)
	if err != nil && !errors.Is(err, persistence.ErrNotFound) {
		t.Fatal(err)
	}
	if len(set.Pins) != 0 {
		t.Errorf("a deleted server's pins remain: %+v", set.Pins)
	}
}
