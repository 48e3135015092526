package actors_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors/curation"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
)

// TestStdioListingThroughTheHop: a stdio server's two pages of tools are listed through the stdio hop (its schemas
// stored in the backend's own key order) and, with NoFastHop, through the go-sdk (keys sorted); both store the same
// tools with the same definition hashes and pin hashes, so a daemon upgraded across the change holds nothing.
func TestStdioListingThroughTheHop(t *testing.T) {
	bin := peertest.GoBinary(t, "./testdata/rawlist")
	type stored struct{ schema, defHash, pinHash string }
	got := map[bool]map[string]stored{}
	for _, off := range []bool{false, true} {
		cfg := testConfig()
		cfg.NoFastHop = off
		r := newRig(t, cfg)
		s := r.register("rawlist", persistence.TransportSTDIO, map[string]any{"command": bin}, nil, true)
		r.waitStatus(s.ID, persistence.StatusConnected, 20*time.Second)
		var tools []persistence.Tool
		deadline := time.Now().Add(20 * time.Second)
		for len(tools) < 2 {
			if time.Now().After(deadline) {
				t.Fatalf("NoFastHop=%v: %d tools stored, want the 2 of both pages", off, len(tools))
			}
			time.Sleep(50 * time.Millisecond)
			var err error
			if tools, _, err = r.store.ListTools(context.Background(), persistence.ListToolsFilter{ServerID: s.ID}); err != nil {
				t.Fatal(err)
			}
		}
		got[off] = map[string]stored{}
		for _, tool := range tools {
			ph, err := curation.PinHash(tool.Definition)
			if err != nil {
				t.Fatal(err)
			}
			got[off][tool.OriginalName] = stored{string(tool.InputSchema), tool.DefinitionHash, ph}
		}
		r.stop()
	}
	hop, sdk := got[false], got[true]
	if !strings.HasPrefix(hop["first"].schema, `{"type":"object"`) {
		t.Errorf("through the hop the schema should keep the backend's key order: %s", hop["first"].schema)
	}
	if !strings.HasPrefix(sdk["first"].schema, `{"properties"`) {
		t.Errorf("through the go-sdk the schema's keys are sorted: %s", sdk["first"].schema)
	}
	for _, name := range []string{"first", "second"} {
		if hop[name].defHash != sdk[name].defHash || hop[name].pinHash != sdk[name].pinHash {
			t.Errorf("%s: hop %+v, go-sdk %+v: the hashes must agree", name, hop[name], sdk[name])
		}
	}
	if !strings.Contains(hop["first"].schema, `"default":1,`) || !strings.Contains(hop["first"].schema, `"maximum":1000`) {
		t.Errorf("numbers as the go-sdk's float64s: %s", hop["first"].schema)
	}
}
