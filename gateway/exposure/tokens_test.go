package exposure

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/tiktoken-go/tokenizer"

	"github.com/mcpgw/aggregator/internal/rankeval"
)

// TestTokensAgainstTokenizer measures Tokens against the real o200k_base tokenizer on every tool definition of
// both fixture catalogues, encoded as tools/list serves them: the whole catalogue's estimate must be within 10 % of
// the real count, the mean error per tool at most 10 % and 95 % of the tools within 25 %.
func TestTokensAgainstTokenizer(t *testing.T) {
	enc, err := tokenizer.Get(tokenizer.O200kBase)
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range []string{"livemcpbench", "bfcl"} {
		t.Run(set, func(t *testing.T) {
			fx := rankeval.Load(t, set)
			var real, est, close int
			var absErr float64
			for _, tl := range fx.Tools {
				schema := tl.InputSchema
				if len(schema) == 0 || string(schema) == "null" {
					schema = json.RawMessage(`{"type":"object"}`)
				}
				b, err := json.Marshal(map[string]any{"name": tl.Name, "description": tl.Description, "inputSchema": schema})
				if err != nil {
					t.Fatal(err)
				}
				r, err := enc.Count(string(b))
				if err != nil {
					t.Fatal(err)
				}
				e := Tokens(b)
				real += r
				est += e
				rel := math.Abs(float64(e-r)) / float64(r)
				absErr += rel
				if rel <= 0.25 {
					close++
				}
			}
			total := float64(est-real) / float64(real)
			t.Logf("%s: %d tools, o200k_base %d tokens, estimate %d (%+.1f %%); mean error per tool %.1f %%, within 25 %%: %d (%.0f %%)",
				set, len(fx.Tools), real, est, 100*total, 100*absErr/float64(len(fx.Tools)), close, 100*float64(close)/float64(len(fx.Tools)))
			if math.Abs(total) > 0.10 {
				t.Errorf("catalogue estimate off by %+.1f %%, want within 10 %%", 100*total)
			}
			if mean := absErr / float64(len(fx.Tools)); mean > 0.10 {
				t.Errorf("mean error per tool %.1f %%, want at most 10 %%", 100*mean)
			}
			if float64(close) < 0.95*float64(len(fx.Tools)) {
				t.Errorf("only %d of %d tools estimated within 25 %%", close, len(fx.Tools))
			}
		})
	}
}
