package search

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mcpgw/aggregator/search/embed"
)

// Quality floors on the BFCL fixture (the engine's figures minus a margin of 0.01).
const (
	floorBFCLRecall5 = 0.78
	floorBFCLNDCG10  = 0.685
)

// namedFixtureDir finds shared/fixtures/<name> beside the repository root; a missing fixture skips the test, except
// under CI=true where it fails.
func namedFixtureDir(t testing.TB, name string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
	fx := filepath.Join(filepath.Dir(dir), "shared", "fixtures", name)
	if _, err := os.Stat(filepath.Join(fx, "tools.jsonl")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("fixture %s missing under CI: %v", name, err)
		}
		t.Skipf("fixture %s not found: %v", name, err)
	}
	return fx
}

// loadNamedFixture reads shared/fixtures/<name> the way loadFixture reads LiveMCPBench.
func loadNamedFixture(t testing.TB, name string) fixture {
	t.Helper()
	dir := namedFixtureDir(t, name)
	tools := readJSONL[fixtureTool](t, filepath.Join(dir, "tools.jsonl"))
	fx := fixture{ids: make(map[string]int64)}
	for i, tl := range tools {
		id := int64(i + 1)
		fx.ids[tl.ID] = id
		fx.docs = append(fx.docs, Doc{
			ID: id, ServerID: tl.Server, Name: tl.Server + "." + tl.Name, OriginalName: tl.Name,
			Description: tl.Description, InputSchema: tl.InputSchema,
		})
	}
	for _, q := range readJSONL[fixtureQuery](t, filepath.Join(dir, "queries.jsonl")) {
		if len(q.Gold) > 0 {
			fx.queries = append(fx.queries, q)
		}
	}
	return fx
}

// TestQualityBothFixtures measures the lexical baselines and the engine on LiveMCPBench and BFCL, and fails if the
// engine falls below BFCL's floors (LiveMCPBench's are checked by TestQualityLiveMCPBench).
func TestQualityBothFixtures(t *testing.T) {
	with := func(f func(*tuning)) tuning {
		tun := defaultTuning
		f(&tun)
		return tun
	}
	runs := []struct {
		name string
		tun  tuning
		emb  bool
	}{
		{"BM25F (fields, pairs)", with(func(t *tuning) { t.fusion = fuseLexicalOnly; t.srvW = 0 }), false},
		{"BM25F + server", with(func(t *tuning) { t.fusion = fuseLexicalOnly }), false},
		{"hybrid, blend (engine)", defaultTuning, true},
	}
	for _, name := range []string{"livemcpbench", "bfcl"} {
		fx := loadNamedFixture(t, name)
		var engine quality
		for _, r := range runs {
			var emb embed.Embedder
			if r.emb {
				emb = embed.NewHashed(0)
			}
			q := evaluate(t, fixtureEngine(t, fx, r.tun, emb), fx)
			t.Logf("%-13s %-24s Recall@5 %.3f  nDCG@10 %.3f", name, r.name, q.recall5, q.ndcg10)
			engine = q
		}
		if name == "bfcl" && (engine.recall5 < floorBFCLRecall5 || engine.ndcg10 < floorBFCLNDCG10) {
			t.Errorf("bfcl engine Recall@5 %.3f nDCG@10 %.3f, below the floors %.3f and %.3f", engine.recall5,
				engine.ndcg10, floorBFCLRecall5, floorBFCLNDCG10)
		}
	}
}
