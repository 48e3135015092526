package search

import (
	"cmp"
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/mcpgw/aggregator/internal/rankeval"
	"github.com/mcpgw/aggregator/search/embed"
)

// qualitySet is one fixture of the quality test with its expected size and floors: the engine's figures of
// BENCHMARKS.md minus a margin of 0.01, so that a change that makes ranking worse fails here. Raise them when ranking
// improves.
type qualitySet struct {
	name                      string
	tools, queries            int
	floorRecall5, floorNDCG10 float64
	slow                      bool // the engine only (no baselines) under the race detector
}

var qualitySets = []qualitySet{
	{name: "livemcpbench", tools: 527, queries: 94, floorRecall5: 0.378, floorNDCG10: 0.384},
	{name: "bfcl", tools: 1665, queries: 567, floorRecall5: 0.795, floorNDCG10: 0.700, slow: true},
}

// fixture is a fixture's tools as engine documents (ids in file order), the tools as read, and the queries that
// have gold.
type fixture struct {
	docs    []Doc
	tools   []rankeval.Tool
	ids     map[string]int64
	queries []rankeval.Query
}

func loadFixture(t testing.TB, name string) fixture {
	t.Helper()
	set := rankeval.Load(t, name)
	fx := fixture{ids: make(map[string]int64), tools: set.Tools, queries: set.Queries}
	for i, tl := range set.Tools {
		id := int64(i + 1)
		fx.ids[tl.ID] = id
		fx.docs = append(fx.docs, Doc{
			ID: id, ServerID: tl.Server, Name: tl.Server + "." + tl.Name, OriginalName: tl.Name,
			Description: tl.Description, InputSchema: tl.InputSchema,
		})
	}
	return fx
}

// evaluate runs every query through Engine.Search and measures Recall@5 and nDCG@10.
func evaluate(t testing.TB, e *Engine, fx fixture) rankeval.Quality {
	t.Helper()
	ctx := context.Background()
	return evaluateRanker(t, fx, func(query string) []int64 {
		res, err := e.Search(ctx, Query{Text: query, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]int64, len(res))
		for i, r := range res {
			ids[i] = r.ID
		}
		return ids
	})
}

// evaluateRanker is evaluate for any ranking function returning tool ids best first.
func evaluateRanker(t testing.TB, fx fixture, rank func(query string) []int64) rankeval.Quality {
	t.Helper()
	key := func(g string) (int64, bool) { id, ok := fx.ids[g]; return id, ok }
	return rankeval.Score(t, fx.queries, key, func(i int) []int64 { return rank(fx.queries[i].Query) })
}

// fixtureEngine indexes the fixture with the given tuning; emb nil makes a lexical-only engine.
func fixtureEngine(t testing.TB, fx fixture, tun tuning, emb embed.Embedder) *Engine {
	t.Helper()
	var idx VectorIndex
	if emb != nil {
		idx = newMemIndex()
	}
	e, err := New(emb, idx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.tun = tun
	e.lex = newLexicon(tun.tool, tun.server)
	if err := e.Upsert(context.Background(), fx.docs); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestQuality measures ranking on each fixture (LiveMCPBench: 527 real MCP tools, 94 annotated tasks; BFCL: 1,665
// function documents, 567 requests) through the real search path (Upsert, Search) with the built-in embedder, logs
// the baselines beside it, and fails if the engine falls below its floors.
func TestQuality(t *testing.T) {
	for _, set := range qualitySets {
		t.Run(set.name, func(t *testing.T) { testQuality(t, set) })
	}
}

func testQuality(t *testing.T, set qualitySet) {
	// Under the race detector (make test) the larger set runs the engine only, as -short does: the baselines would
	// take a minute there and check nothing the floors do not.
	engineOnly := testing.Short() || set.slow && raceEnabled
	fx := loadFixture(t, set.name)
	if len(fx.docs) != set.tools || len(fx.queries) != set.queries {
		t.Fatalf("fixture has %d tools and %d queries with gold, want %d and %d", len(fx.docs), len(fx.queries),
			set.tools, set.queries)
	}
	emb := embed.NewHashed(0)
	with := func(f func(*tuning)) tuning {
		tun := defaultTuning
		f(&tun)
		return tun
	}
	runs := []struct {
		name string
		tun  tuning
		emb  embed.Embedder
	}{
		{"BM25 name+desc, analysed", with(func(t *tuning) {
			t.fusion = fuseLexicalOnly
			t.tool.w = [numFields]float64{fieldName: 1, fieldServer: 1, fieldDesc: 1}
			t.tool.b = [numFields]float64{0.75, 0.75, 0.75, 0.75, 0.75}
			t.tool.delta = 0
			t.srvW = 0
		}), nil},
		{"BM25F (fields, pairs)", with(func(t *tuning) { t.fusion = fuseLexicalOnly; t.srvW = 0 }), nil},
		{"BM25F + server", with(func(t *tuning) { t.fusion = fuseLexicalOnly }), nil},
		{"vector only, hashed", with(func(t *tuning) { t.fusion = fuseVectorOnly }), embed.NewHashedMix(0, 0)},
		{"vector only, word vectors", with(func(t *tuning) { t.fusion = fuseVectorOnly }), embed.NewHashedMix(0, 1)},
		{"vector only (built-in)", with(func(t *tuning) { t.fusion = fuseVectorOnly }), emb},
		{"hybrid, blend (engine)", defaultTuning, emb},
	}
	var plain rankeval.Quality
	if engineOnly {
		runs = runs[len(runs)-1:] // the engine only, without the baselines
	} else {
		plain = evaluateRanker(t, fx, newPlainBM25(fx).rank)
		t.Logf("%-26s Recall@5 %.3f  nDCG@10 %.3f", "plain BM25 (README)", plain.Recall5, plain.NDCG10)
	}
	var hybrid rankeval.Quality
	for _, r := range runs {
		q := evaluate(t, fixtureEngine(t, fx, r.tun, r.emb), fx)
		t.Logf("%-26s Recall@5 %.3f  nDCG@10 %.3f", r.name, q.Recall5, q.NDCG10)
		hybrid = q
	}
	if plain.NDCG10 > 0 {
		t.Logf("engine / plain BM25: nDCG@10 x%.2f", hybrid.NDCG10/plain.NDCG10)
	}
	// The last run is the engine exactly as New builds it; check that nothing above diverged from it.
	e, err := New(emb, newMemIndex(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Upsert(context.Background(), fx.docs); err != nil {
		t.Fatal(err)
	}
	if q := evaluate(t, e, fx); q != hybrid {
		t.Fatalf("engine from New measures %+v, the tuned run %+v", q, hybrid)
	}
	checkCalibration(t, e, fx)
	if hybrid.Recall5 < set.floorRecall5 || hybrid.NDCG10 < set.floorNDCG10 {
		t.Errorf("engine Recall@5 %.3f nDCG@10 %.3f, below the floors %.3f and %.3f", hybrid.Recall5, hybrid.NDCG10,
			set.floorRecall5, set.floorNDCG10)
	}
}

// plainBM25 is the baseline the fixtures' READMEs state, computed independently of the engine so that the ratio
// to it is honest: Okapi BM25 (k1 1.2, b 0.75, Lucene's IDF) over each tool's name and description, lower-cased
// runs of letters and digits as words (so "_" and "." split words), no stemming, no stop words.
type plainBM25 struct {
	ids    []int64
	tf     []map[string]int
	length []float64
	df     map[string]int
	avgLen float64
}

func newPlainBM25(fx fixture) *plainBM25 {
	p := &plainBM25{df: make(map[string]int)}
	var total float64
	for i, tl := range fx.tools {
		tf := make(map[string]int)
		words := plainWords(tl.Name + " " + tl.Description)
		for _, w := range words {
			if tf[w] == 0 {
				p.df[w]++
			}
			tf[w]++
		}
		p.ids = append(p.ids, fx.docs[i].ID)
		p.tf = append(p.tf, tf)
		p.length = append(p.length, float64(len(words)))
		total += float64(len(words))
	}
	p.avgLen = total / float64(len(p.ids))
	return p
}

// plainWords lower-cases s and returns its runs of letters and digits.
func plainWords(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// rank returns the ids of the ten best tools for query (ties by file order).
func (p *plainBM25) rank(query string) []int64 {
	const k1, b = 1.2, 0.75
	n := float64(len(p.ids))
	scores := make([]float64, len(p.ids))
	for _, w := range plainWords(query) {
		df := float64(p.df[w])
		if df == 0 {
			continue
		}
		idf := math.Log(1 + (n-df+0.5)/(df+0.5))
		for i, tf := range p.tf {
			if f := float64(tf[w]); f > 0 {
				scores[i] += idf * f * (k1 + 1) / (f + k1*(1-b+b*p.length[i]/p.avgLen))
			}
		}
	}
	order := make([]int, 0, len(scores))
	for i, s := range scores {
		if s > 0 {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(scores[b], scores[a]) })
	out := make([]int64, 0, 10)
	for _, i := range order[:min(len(order), 10)] {
		out = append(out, p.ids[i])
	}
	return out
}

// checkCalibration checks that Score supports a threshold: the best tool of nearly every fixture task scores at
// least 0.3, and text that means nothing scores below 0.25.
func checkCalibration(t *testing.T, e *Engine, fx fixture) {
	t.Helper()
	ctx := context.Background()
	above := 0
	for _, q := range fx.queries {
		rs, err := e.Search(ctx, Query{Text: q.Query, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) > 0 && rs[0].Score >= 0.3 {
			above++
		}
	}
	t.Logf("best result scores >= 0.3 for %d of %d tasks", above, len(fx.queries))
	if above < len(fx.queries)*9/10 {
		t.Errorf("best result scores >= 0.3 for only %d of %d tasks", above, len(fx.queries))
	}
	for _, nonsense := range []string{"asdkjh qwe zxcvb", "the of and", "🙂🙂🙂", "xq9 zz7 ppl0"} {
		rs, err := e.Search(ctx, Query{Text: nonsense, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) > 0 && rs[0].Score >= 0.25 {
			t.Errorf("nonsense %q: best score %.3f, want < 0.25", nonsense, rs[0].Score)
		}
	}
}
