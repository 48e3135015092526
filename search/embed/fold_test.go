package embed

import (
	"cmp"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/internal/rankeval"
)

// referenceFold is fold as it was first written: every feature sorted by (hash, weight), then added bucket by
// bucket in that order. fold must give the very same bits (stored vectors and the HashedModel version rely on it).
func referenceFold(vec []float32, feats []feature) {
	if len(feats) == 0 {
		feats = append(feats, feature{hashFeature('e', ""), 1})
	}
	slices.SortFunc(feats, func(a, b feature) int { return cmp.Or(cmp.Compare(a.hash, b.hash), cmp.Compare(a.weight, b.weight)) })
	dim := uint64(len(vec))
	for i := 0; i < len(feats); {
		f, w := feats[i].hash, 0.0
		for ; i < len(feats) && feats[i].hash == f; i++ {
			w += feats[i].weight
		}
		v := math.Log1p(w)
		if f>>63 == 1 {
			v = -v
		}
		vec[(f&(1<<63-1))%dim] += float32(v)
	}
	Normalize(vec)
	if Validate(vec, len(vec)) != nil {
		clear(vec)
		vec[0] = 1
	}
}

// TestFoldMatchesFullSort: fold gives referenceFold's vector bit for bit, for short and long feature lists, equal
// hashes (one word repeated), hashes that share a bucket, and no feature at all.
func TestFoldMatchesFullSort(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name string
		n    int
		hash func() uint64
	}{
		{"none", 0, rnd.Uint64},
		{"short", 20, rnd.Uint64},
		{"long", 5000, rnd.Uint64},
		{"many equal hashes", 3000, func() uint64 { return uint64(rnd.IntN(50)) << 40 }},
		{"one bucket", 1000, func() uint64 { return uint64(rnd.IntN(1000)) * 412 }},
		{"all equal", 500, func() uint64 { return 42 }},
	} {
		feats := make([]feature, tc.n)
		for i := range feats {
			feats[i] = feature{hash: tc.hash(), weight: float64(rnd.IntN(7))/3 + rnd.Float64()/1e3}
		}
		want, got := make([]float32, 412), make([]float32, 412)
		referenceFold(want, slices.Clone(feats))
		fold(got, feats)
		if !slices.Equal(got, want) {
			t.Errorf("%s: fold differs from the full sort's fold", tc.name)
		}
	}
}

// TestVectorsUnchangedOnFixtures: every tool text of both search fixtures embeds to the vector the full sort gives.
func TestVectorsUnchangedOnFixtures(t *testing.T) {
	h := NewHashed(0)
	n := 0
	for _, name := range []string{"livemcpbench", "bfcl"} {
		for _, tool := range rankeval.Load(t, name).Tools {
			text := "name: " + tool.Name + "\ndescription: " + tool.Description + "\nparameters: " + string(tool.InputSchema)
			if got, want := h.Vector(text), h.vectorWith(text, referenceFold, nil); !slices.Equal(got, want) {
				t.Fatalf("%s: the vector of %q changed", name, tool.Name)
			}
			n++
		}
	}
	if n < 500 {
		t.Fatalf("only %d texts checked", n)
	}
}

// TestBatchVectorsMatchVector: a batch (whose texts share a memo of their words' features) gives every text of
// both fixtures, tools and queries, the vector Vector gives it alone, bit for bit.
func TestBatchVectorsMatchVector(t *testing.T) {
	h := NewHashed(0)
	for _, name := range []string{"livemcpbench", "bfcl"} {
		fx := rankeval.Load(t, name)
		var texts []string
		for _, tool := range fx.Tools {
			texts = append(texts, ToolText(tool.Name, tool.Description, tool.InputSchema))
		}
		for _, q := range fx.Queries {
			texts = append(texts, q.Query)
		}
		memo := newWordMemo()
		for i, text := range texts {
			if got, want := h.vectorWith(text, fold, memo), h.Vector(text); !slices.Equal(got, want) {
				t.Fatalf("%s: text %d embeds differently in a batch", name, i)
			}
		}
		if len(memo.feats) == 0 {
			t.Fatalf("%s: the memo remembered nothing", name)
		}
	}
}

func BenchmarkFold(b *testing.B) {
	rnd := rand.New(rand.NewPCG(1, 2))
	base := make([]feature, 2500)
	for i := range base {
		base[i] = feature{hash: rnd.Uint64(), weight: rnd.Float64()}
	}
	feats := make([]feature, len(base))
	vec := make([]float32, 412)
	for _, impl := range []struct {
		name string
		fold func([]float32, []feature)
	}{{"buckets", fold}, {"full sort", referenceFold}} {
		b.Run(impl.name, func(b *testing.B) {
			for b.Loop() {
				copy(feats, base)
				clear(vec)
				impl.fold(vec, feats)
			}
		})
	}
}

// TestEmbedBatchOnEveryCore: a batch embedded on several goroutines gives each text the vector Vector gives it
// alone, in order; a cancelled context fails the batch.
func TestEmbedBatchOnEveryCore(t *testing.T) {
	h := NewHashed(0)
	texts := make([]string, 300)
	for i := range texts {
		texts[i] = "Name: tool_" + string(rune('a'+i%26)) + "\nDescription: reads record number " + strings.Repeat("x", i%17) + " and reports it"
	}
	got, err := h.Embed(context.Background(), texts)
	if err != nil || len(got) != len(texts) {
		t.Fatalf("Embed: %d vectors, %v", len(got), err)
	}
	for i, text := range texts {
		if !slices.Equal(got[i], h.Vector(text)) {
			t.Fatalf("text %d: the batch's vector differs from Vector's", i)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := h.Embed(ctx, texts); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled batch: %v", err)
	}
}
