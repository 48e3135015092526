package search

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"

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
	{name: "livemcpbench", tools: 527, queries: 94, floorRecall5: 0.373, floorNDCG10: 0.377},
	{name: "bfcl", tools: 1665, queries: 567, floorRecall5: 0.790, floorNDCG10: 0.697, slow: true},
}

type fixtureTool struct {
	ID          string          `json:"id"`
	Name        string          `json:"name"`
	Server      string          `json:"server"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type fixtureQuery struct {
	QID   string   `json:"qid"`
	Query string   `json:"query"`
	Gold  []string `json:"gold"`
}

// fixtureDir finds shared/fixtures/{name} beside the repository root (the directory holding go.mod). A
// missing fixture skips the test, except under CI=true where it fails.
func fixtureDir(t testing.TB, name string) string {
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

func readJSONL[T any](t testing.TB, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// fixture is a fixture's tools as engine documents (ids in file order), the tools as read, and the queries that
// have gold.
type fixture struct {
	docs    []Doc
	tools   []fixtureTool
	ids     map[string]int64
	queries []fixtureQuery
}

func loadFixture(t testing.TB, name string) fixture {
	t.Helper()
	dir := fixtureDir(t, name)
	tools := readJSONL[fixtureTool](t, filepath.Join(dir, "tools.jsonl"))
	fx := fixture{ids: make(map[string]int64), tools: tools}
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

type quality struct{ recall5, ndcg10 float64 }

// evaluate runs every query through Engine.Search and averages Recall@5 (share of the gold in the top 5) and
// nDCG@10 with binary relevance.
func evaluate(t testing.TB, e *Engine, fx fixture) quality {
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
func evaluateRanker(t testing.TB, fx fixture, rank func(query string) []int64) quality {
	t.Helper()
	var q quality
	for _, fq := range fx.queries {
		gold := make(map[int64]bool)
		for _, g := range fq.Gold {
			id, ok := fx.ids[g]
			if !ok {
				t.Fatalf("query %s: gold %s is not a tool of the fixture", fq.QID, g)
			}
			gold[id] = true
		}
		res := rank(fq.Query)
		var hit5 int
		var dcg, idcg float64
		for i, id := range res[:min(len(res), 10)] {
			if gold[id] {
				if i < 5 {
					hit5++
				}
				dcg += 1 / math.Log2(float64(i+2))
			}
		}
		for i := range min(len(gold), 10) {
			idcg += 1 / math.Log2(float64(i+2))
		}
		q.recall5 += float64(hit5) / float64(len(gold))
		q.ndcg10 += dcg / idcg
	}
	n := float64(len(fx.queries))
	q.recall5 /= n
	q.ndcg10 /= n
	return q
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
	var plain quality
	if engineOnly {
		runs = runs[len(runs)-1:] // the engine only, without the baselines
	} else {
		plain = evaluateRanker(t, fx, newPlainBM25(fx).rank)
		t.Logf("%-26s Recall@5 %.3f  nDCG@10 %.3f", "plain BM25 (README)", plain.recall5, plain.ndcg10)
	}
	var hybrid quality
	for _, r := range runs {
		q := evaluate(t, fixtureEngine(t, fx, r.tun, r.emb), fx)
		t.Logf("%-26s Recall@5 %.3f  nDCG@10 %.3f", r.name, q.recall5, q.ndcg10)
		hybrid = q
	}
	if plain.ndcg10 > 0 {
		t.Logf("engine / plain BM25: nDCG@10 x%.2f", hybrid.ndcg10/plain.ndcg10)
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
	if hybrid.recall5 < set.floorRecall5 || hybrid.ndcg10 < set.floorNDCG10 {
		t.Errorf("engine Recall@5 %.3f nDCG@10 %.3f, below the floors %.3f and %.3f", hybrid.recall5, hybrid.ndcg10,
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
