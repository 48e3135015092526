package embed

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestSortFeatures: the radix sort orders features as the comparison sort by (hash, weight) does, so vectors stay
// bit for bit what they were, for short and long texts, equal hashes and hashes sharing bytes.
func TestSortFeatures(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name string
		n    int
		hash func() uint64
	}{
		{"short", 20, rnd.Uint64},
		{"long", 5000, rnd.Uint64},
		{"many equal hashes", 3000, func() uint64 { return uint64(rnd.IntN(50)) << 40 }},
		{"high byte only", 1000, func() uint64 { return uint64(rnd.IntN(256)) << 56 }},
		{"all equal", 500, func() uint64 { return 42 }},
	} {
		feats := make([]feature, tc.n)
		for i := range feats {
			feats[i] = feature{hash: tc.hash(), weight: float64(rnd.IntN(7)) / 3}
		}
		want := slices.Clone(feats)
		slices.SortFunc(want, func(a, b feature) int { return cmp.Or(cmp.Compare(a.hash, b.hash), cmp.Compare(a.weight, b.weight)) })
		sortFeatures(feats)
		if !slices.Equal(feats, want) {
			t.Errorf("%s: radix order differs from (hash, weight) order", tc.name)
		}
	}
}

func BenchmarkSortFeatures(b *testing.B) {
	rnd := rand.New(rand.NewPCG(1, 2))
	base := make([]feature, 2500)
	for i := range base {
		base[i] = feature{hash: rnd.Uint64(), weight: rnd.Float64()}
	}
	feats := make([]feature, len(base))
	b.Run("radix", func(b *testing.B) {
		for b.Loop() {
			copy(feats, base)
			sortFeatures(feats)
		}
	})
	b.Run("comparison", func(b *testing.B) {
		for b.Loop() {
			copy(feats, base)
			slices.SortFunc(feats, func(a, b feature) int { return cmp.Or(cmp.Compare(a.hash, b.hash), cmp.Compare(a.weight, b.weight)) })
		}
	})
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
