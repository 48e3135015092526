package search

import (
	"slices"
	"testing"

	"github.com/mcpgw/aggregator/internal/rankeval"
	"github.com/mcpgw/aggregator/search/internal/analysis"
)

// TestDocFieldsThroughOneMemo: the tools of both fixtures analysed in turn through one memo (as Upsert analyses a
// batch) get the very fields they get analysed alone.
func TestDocFieldsThroughOneMemo(t *testing.T) {
	for _, name := range []string{"livemcpbench", "bfcl"} {
		memo := analysis.NewMemo()
		for i, tool := range rankeval.Load(t, name).Tools {
			d := Doc{ID: int64(i), ServerID: "s", Name: "srv." + tool.Name, Description: tool.Description, InputSchema: tool.InputSchema}
			got, want := docFields(d, memo), docFields(d, nil)
			for f := range got {
				if !slices.Equal(got[f], want[f]) {
					t.Fatalf("%s: tool %q, field %d: %q through the memo, %q alone", name, tool.Name, f, got[f], want[f])
				}
			}
		}
	}
}
