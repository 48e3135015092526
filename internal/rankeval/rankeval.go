// Package rankeval reads the tool-retrieval fixtures beside the repository (../shared/fixtures/<name>:
// tools.jsonl and queries.jsonl) and scores rankings against their gold: Recall@5 and nDCG@10 with binary
// relevance. The engine's quality test (search) and the daemon's (actors) both measure with it, so that their
// figures are computed the same way. It is test support: it takes a testing.TB, and nothing outside this module
// may import it.
package rankeval

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/mcpgw/aggregator/internal/peertest"
)

// Tool is one line of a fixture's tools.jsonl.
type Tool struct {
	ID          string          `json:"id"`
	Name        string          `json:"name"`
	Server      string          `json:"server"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// Query is one line of a fixture's queries.jsonl: a request and the ids of the tools that answer it.
type Query struct {
	QID   string   `json:"qid"`
	Query string   `json:"query"`
	Gold  []string `json:"gold"`
}

// Fixture is a fixture's tools in file order and its queries that have gold.
type Fixture struct {
	Tools   []Tool
	Queries []Query
}

// Load reads ../shared/fixtures/<name> beside the repository root. A missing fixture skips the test, except
// under CI=true where it fails: CI must never pass by skipping its measurements.
func Load(t testing.TB, name string) Fixture {
	t.Helper()
	dir := filepath.Join(filepath.Dir(peertest.RepoRoot(t)), "shared", "fixtures", name)
	if _, err := os.Stat(filepath.Join(dir, "tools.jsonl")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("fixture %s missing under CI: %v", name, err)
		}
		t.Skipf("fixture %s not found: %v", name, err)
	}
	fx := Fixture{Tools: ReadJSONL[Tool](t, filepath.Join(dir, "tools.jsonl"))}
	for _, q := range ReadJSONL[Query](t, filepath.Join(dir, "queries.jsonl")) {
		if len(q.Gold) > 0 {
			fx.Queries = append(fx.Queries, q)
		}
	}
	return fx
}

// ReadJSONL decodes a file of one JSON value per line.
func ReadJSONL[T any](t testing.TB, path string) []T {
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

// Quality is the average over a fixture's queries of Recall@5 (the share of the gold in the top 5) and nDCG@10.
type Quality struct{ Recall5, NDCG10 float64 }

// Score measures rankings: ranked(i) is the answer to queries[i], best first, as keys of type K (engine ids,
// namespaced names), and key maps a gold tool id of the fixture to its key; a gold id it does not know fails the
// test.
func Score[K comparable](t testing.TB, queries []Query, key func(goldID string) (K, bool), ranked func(i int) []K) Quality {
	t.Helper()
	var q Quality
	for i, fq := range queries {
		gold := make(map[K]bool, len(fq.Gold))
		for _, g := range fq.Gold {
			k, ok := key(g)
			if !ok {
				t.Fatalf("query %s: gold %s is not a tool of the fixture", fq.QID, g)
			}
			gold[k] = true
		}
		res := ranked(i)
		var hit5 int
		var dcg, idcg float64
		for r, k := range res[:min(len(res), 10)] {
			if gold[k] {
				if r < 5 {
					hit5++
				}
				dcg += 1 / math.Log2(float64(r+2))
			}
		}
		for r := range min(len(gold), 10) {
			idcg += 1 / math.Log2(float64(r+2))
		}
		q.Recall5 += float64(hit5) / float64(len(gold))
		q.NDCG10 += dcg / idcg
	}
	n := float64(len(queries))
	q.Recall5 /= n
	q.NDCG10 /= n
	return q
}
