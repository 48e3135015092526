package search

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mcpgw/aggregator/search/embed"
)

// sampleDocs is a small catalogue over three servers.
func sampleDocs() []Doc {
	return []Doc{
		{ID: 1, ServerID: "s-weather", Name: "weather.get_forecast", OriginalName: "get_forecast",
			Description: "Weather forecast for the next days in a city",
			InputSchema: []byte(`{"type":"object","properties":{"city":{"type":"string","description":"City name"}}}`)},
		{ID: 2, ServerID: "s-weather", Name: "weather.get_alerts", OriginalName: "get_alerts",
			Description: "Severe weather alerts for a US state"},
		{ID: 3, ServerID: "s-github", Name: "github.create_issue", OriginalName: "create_issue",
			Description: "Create a new issue in a GitHub repository",
			InputSchema: []byte(`{"type":"object","properties":{"repo":{"type":"string"},"title":{"type":"string"}}}`)},
		{ID: 4, ServerID: "s-github", Name: "github.list_pull_requests", OriginalName: "list_pull_requests",
			Description: "List open pull requests of a repository"},
		{ID: 5, ServerID: "s-files", Name: "files.write_file", OriginalName: "write_file",
			Description: "Write text content to a file on disk"},
		{ID: 6, ServerID: "s-files", Name: "files.read_file", OriginalName: "read_file",
			Description: "读取文件内容 (read a file)"},
	}
}

func newTestEngine(t *testing.T) (*Engine, *memIndex) {
	t.Helper()
	idx := newMemIndex()
	e, err := New(embed.NewHashed(256), idx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Upsert(context.Background(), sampleDocs()); err != nil {
		t.Fatal(err)
	}
	return e, idx
}

func resultIDs(rs []Result) []int64 {
	out := make([]int64, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

func search(t *testing.T, e *Engine, q Query) []Result {
	t.Helper()
	rs, err := e.Search(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func TestEngineSearch(t *testing.T) {
	e, idx := newTestEngine(t)
	if e.Len() != 6 || idx.len() != 6 {
		t.Fatalf("Len %d, vectors %d", e.Len(), idx.len())
	}
	tests := []struct {
		query string
		top   int64
	}{
		{"weather forecast for Paris", 1},
		{"open a GitHub issue", 3},
		{"createIssue", 3},
		{"pull requests", 4},
		{"save text into a file", 5},
		{"读取文件", 6},
		{"severe alerts", 2},
	}
	for _, tt := range tests {
		rs := search(t, e, Query{Text: tt.query})
		if len(rs) == 0 || rs[0].ID != tt.top {
			t.Errorf("%q: got %v, want %d first", tt.query, resultIDs(rs), tt.top)
			continue
		}
		for _, r := range rs {
			for _, v := range []float64{r.Score, r.Lexical, r.Vector, r.Server} {
				if v < 0 || v > 1 || math.IsNaN(v) {
					t.Errorf("%q: result %+v has a component outside 0..1", tt.query, r)
				}
			}
		}
		if rs[0].LexicalRank == 0 && rs[0].VectorRank == 0 {
			t.Errorf("%q: top result without any rank: %+v", tt.query, rs[0])
		}
	}
	if m, d, ok := e.Model(); !ok || m != embed.HashedModel || d != 256 {
		t.Errorf("Model() = %s %d %v", m, d, ok)
	}
}

func TestEngineQueryOptions(t *testing.T) {
	e, _ := newTestEngine(t)
	rs := search(t, e, Query{Text: "weather issue file repository", ServerIDs: []string{"s-github"}})
	if len(rs) == 0 {
		t.Fatal("no result within the server filter")
	}
	for _, r := range rs {
		if r.ServerID != "s-github" {
			t.Errorf("result %d from %s outside the filter", r.ID, r.ServerID)
		}
	}
	allowOdd := func(id int64) bool { return id%2 == 1 }
	rs = search(t, e, Query{Text: "weather issue file repository", Allow: allowOdd})
	if len(rs) == 0 {
		t.Fatal("no result within Allow")
	}
	for _, r := range rs {
		if !allowOdd(r.ID) {
			t.Errorf("result %d outside Allow", r.ID)
		}
	}
	if rs := search(t, e, Query{Text: "weather forecast", Allow: func(id int64) bool { return id == 4 }}); len(rs) > 1 || len(rs) == 1 && rs[0].ID != 4 {
		t.Errorf("Allow of one tool answered %v", resultIDs(rs))
	}
	if rs := search(t, e, Query{Text: "weather issue file repository", Limit: 2}); len(rs) != 2 {
		t.Errorf("Limit 2 gave %d results", len(rs))
	}
	all := search(t, e, Query{Text: "weather forecast"})
	cut := search(t, e, Query{Text: "weather forecast", MinScore: all[0].Score})
	if len(cut) == 0 || len(cut) >= len(all) {
		t.Errorf("MinScore %v kept %d of %d", all[0].Score, len(cut), len(all))
	}
	if rs := search(t, e, Query{Text: "weather", MinScore: 1.01}); len(rs) != 0 {
		t.Errorf("MinScore above 1 kept %v", resultIDs(rs))
	}
	if rs := search(t, e, Query{Text: "weather", ServerIDs: []string{"nope"}}); len(rs) != 0 {
		t.Errorf("unknown server kept %v", resultIDs(rs))
	}
	for _, q := range []string{"", "   \n"} {
		if _, err := e.Search(context.Background(), Query{Text: q}); !errors.Is(err, ErrEmptyQuery) {
			t.Errorf("query %q: err %v", q, err)
		}
	}
	long := strings.Repeat("天气 weather ", 1000)
	if rs := search(t, e, Query{Text: long}); len(rs) == 0 || rs[0].ServerID != "s-weather" {
		t.Errorf("long query: %v", resultIDs(rs))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Search(ctx, Query{Text: "weather"}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled search: %v", err)
	}
}

func TestEngineUpdateAndRemove(t *testing.T) {
	e, idx := newTestEngine(t)
	ctx := context.Background()
	if err := e.Remove(ctx, []int64{1, 99}); err != nil {
		t.Fatal(err)
	}
	for _, r := range search(t, e, Query{Text: "weather forecast"}) {
		if r.ID == 1 {
			t.Error("removed tool still found")
		}
	}
	if e.Len() != 5 || idx.len() != 5 {
		t.Errorf("after remove: Len %d vectors %d", e.Len(), idx.len())
	}
	// Tool 5 changes what it does.
	d := sampleDocs()[4]
	d.Description = "Translate a sentence into French"
	if err := e.Upsert(ctx, []Doc{d}); err != nil {
		t.Fatal(err)
	}
	if rs := search(t, e, Query{Text: "translate to french"}); len(rs) == 0 || rs[0].ID != 5 {
		t.Errorf("updated tool not found by its new text: %v", resultIDs(rs))
	}
	if e.Len() != 5 {
		t.Errorf("update changed Len to %d", e.Len())
	}
	// A server whose last tool goes disappears from the server index.
	if err := e.Remove(ctx, []int64{5, 6}); err != nil {
		t.Fatal(err)
	}
	if e.lex.servers.n != 2 || slices.ContainsFunc(e.lex.servers.slots, func(d lexDoc) bool { return d.serverID == "s-files" }) {
		t.Errorf("server documents after removing s-files: %d", e.lex.servers.n)
	}
	// A vector left in the index for a tool the engine no longer has is ignored.
	_ = idx.Upsert(ctx, []VectorPoint{{ID: 77, ServerID: "s-ghost", Vector: embed.NewHashed(256).Vector("weather")}})
	for _, r := range search(t, e, Query{Text: "weather"}) {
		if r.ID == 77 {
			t.Error("a vector without a tool was returned")
		}
	}
}

func TestEngineLexicalOnly(t *testing.T) {
	e, err := New(nil, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Upsert(context.Background(), sampleDocs()); err != nil {
		t.Fatal(err)
	}
	rs := search(t, e, Query{Text: "github issue"})
	if len(rs) == 0 || rs[0].ID != 3 || rs[0].Vector != 0 {
		t.Errorf("lexical-only: %+v", rs)
	}
	if _, _, ok := e.Model(); ok {
		t.Error("lexical-only engine reports a model")
	}
	if _, err := New(embed.NewHashed(8), nil, Options{}); err == nil {
		t.Error("embedder without index accepted")
	}
	if _, err := New(nil, newMemIndex(), Options{}); err == nil {
		t.Error("index without embedder accepted")
	}
}

// badEmbedder returns what it is told to.
type badEmbedder struct {
	dim  int
	mode string // "fail", "nan", "zero", "short", "count", "ok"
	next embed.Embedder
}

func (b *badEmbedder) Model() string  { return "bad-" + b.mode }
func (b *badEmbedder) Dimension() int { return b.dim }
func (b *badEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if b.mode == "fail" {
		return nil, errors.New("service unavailable")
	}
	out, err := b.next.Embed(ctx, texts)
	if err != nil {
		return nil, err
	}
	switch b.mode {
	case "nan":
		out[len(out)-1][0] = float32(math.NaN())
	case "zero":
		clear(out[0])
	case "short":
		out[0] = out[0][:b.dim-1]
	case "count":
		out = out[:len(out)-1]
	}
	return out, nil
}

func TestEngineNeverStoresInvalidVectors(t *testing.T) {
	for _, mode := range []string{"fail", "nan", "zero", "short", "count"} {
		t.Run(mode, func(t *testing.T) {
			idx := newMemIndex()
			emb := &badEmbedder{dim: 64, mode: "ok", next: embed.NewHashed(64)}
			e, err := New(emb, idx, Options{})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := e.Upsert(ctx, sampleDocs()[:2]); err != nil {
				t.Fatal(err)
			}
			emb.mode = mode
			err = e.Upsert(ctx, sampleDocs())
			if err == nil {
				t.Fatal("Upsert accepted a bad embedding")
			}
			if mode != "fail" && !errors.Is(err, embed.ErrInvalidVector) {
				t.Errorf("err = %v, want ErrInvalidVector", err)
			}
			// Nothing of the failed batch is in the vector index, not even the old vectors of tools 1 and 2 ...
			if idx.len() != 0 {
				t.Errorf("%d vectors stored after a failed batch", idx.len())
			}
			// ... but every tool is still found lexically.
			emb.mode = "ok"
			if rs := search(t, e, Query{Text: "github issue"}); len(rs) == 0 || rs[0].ID != 3 {
				t.Errorf("lexical fallback: %v", resultIDs(rs))
			}
			if e.Len() != 6 {
				t.Errorf("Len %d", e.Len())
			}
		})
	}
}

func TestEngineQueryEmbeddingFailureFallsBack(t *testing.T) {
	var logs bytes.Buffer
	idx := newMemIndex()
	emb := &badEmbedder{dim: 64, mode: "ok", next: embed.NewHashed(64)}
	e, err := New(emb, idx, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Upsert(context.Background(), sampleDocs()); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"fail", "nan", "zero", "short"} {
		emb.mode = mode
		logs.Reset()
		rs := search(t, e, Query{Text: "weather forecast"})
		if len(rs) == 0 || rs[0].ID != 1 || rs[0].Vector != 0 {
			t.Errorf("%s: %+v", mode, rs)
		}
		if !strings.Contains(logs.String(), "vector search failed") {
			t.Errorf("%s: no warning logged", mode)
		}
	}
	emb.mode = "ok"
	idx.failAt = func(op string) error { return errors.New("index down") }
	if rs := search(t, e, Query{Text: "weather forecast"}); len(rs) == 0 || rs[0].ID != 1 {
		t.Errorf("index down: %v", resultIDs(rs))
	}
}

func TestEngineConcurrent(t *testing.T) {
	e, _ := newTestEngine(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := range 30 {
				id := int64(100 + w*1000 + i)
				d := Doc{ID: id, ServerID: fmt.Sprintf("s-%d", i%3), Name: fmt.Sprintf("srv.tool_%d", id),
					Description: "weather tool number " + fmt.Sprint(i)}
				if err := e.Upsert(ctx, []Doc{d}); err != nil {
					t.Error(err)
				}
				if i%2 == 0 {
					if err := e.Remove(ctx, []int64{id}); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	for range 3 {
		wg.Go(func() {
			for range 50 {
				rs, err := e.Search(ctx, Query{Text: "weather forecast", Limit: 5})
				if err != nil || len(rs) == 0 {
					t.Errorf("search during updates: %v, %d results", err, len(rs))
				}
			}
		})
	}
	wg.Wait()
	if e.Len() != 6+30 {
		t.Errorf("Len %d, want 36", e.Len())
	}
}

// countingEmbedder counts the texts it embeds.
type countingEmbedder struct {
	embed.Embedder
	texts atomic.Int64
}

func (c *countingEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	c.texts.Add(int64(len(texts)))
	return c.Embedder.Embed(ctx, texts)
}

// TestQueryVectorIsNotEmbeddedAgain checks that a caller's query embedding is used as is (one embedding call per
// search when the caller also matched skills with it), and that a vector of the wrong size is not.
func TestQueryVectorIsNotEmbeddedAgain(t *testing.T) {
	ctx := context.Background()
	emb := &countingEmbedder{Embedder: embed.NewHashed(64)}
	e, err := New(emb, newMemIndex(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	docs := []Doc{
		{ID: 1, ServerID: "s", Name: "s.send_email", Description: "Send an email message to a recipient"},
		{ID: 2, ServerID: "s", Name: "s.get_weather", Description: "Current weather for a city"},
	}
	if err := e.Upsert(ctx, docs); err != nil {
		t.Fatal(err)
	}
	q := "  send a mail to Bob \n"
	vecs, err := emb.Embed(ctx, []string{QueryText(q)})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		vector    []float32
		wantEmbed int64
	}{
		{"caller's vector", vecs[0], 0},
		{"no vector", nil, 1},
		{"wrong size", vecs[0][:10], 1},
	}
	var first []Result
	for _, tt := range tests {
		before := emb.texts.Load()
		rs, err := e.Search(ctx, Query{Text: q, Vector: tt.vector})
		if err != nil {
			t.Fatal(err)
		}
		if got := emb.texts.Load() - before; got != tt.wantEmbed {
			t.Errorf("%s: %d texts embedded, want %d", tt.name, got, tt.wantEmbed)
		}
		if first == nil {
			first = rs
		} else if !slices.Equal(first, rs) {
			t.Errorf("%s: results %+v, with the caller's vector %+v", tt.name, rs, first)
		}
	}
	if len(first) == 0 || first[0].ID != 1 {
		t.Errorf("results %+v, want send_email first", first)
	}
}

// TestQueryTextDropsAsking: the words of asking that stand alone leave the query's text (what is embedded), a text
// of nothing else stays, and an identifier holding one is kept whole.
func TestQueryTextDropsAsking(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"  Please, I need the weather in Paris. Thanks!  ", "I the weather in Paris."},
		{"like_post for me", "like_post for me"},
		{"please", "please"},
		{"Hello", "Hello"},
		{"send an email", "send an email"},
	} {
		if got := QueryText(tc.in); got != tc.want {
			t.Errorf("QueryText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
