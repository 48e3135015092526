package search

import (
	"math"
	"testing"
)

func TestComponentScores(t *testing.T) {
	tests := []struct {
		name      string
		got, want float64
	}{
		{"lexical share", lexicalScore(2, 8), 0.25},
		{"lexical capped", lexicalScore(9, 8), 1},
		{"lexical without reachable score", lexicalScore(1, 0), 0},
		{"lexical zero", lexicalScore(0, 8), 0},
		{"vector", vectorScore(0.55), 0.5},
		{"vector at the floor", vectorScore(0.1), 0},
		{"vector negative", vectorScore(-0.3), 0},
		{"vector above 1", vectorScore(1.0000001), 1},
		{"vector NaN", vectorScore(math.NaN()), 0},
		{"rrf rank 1", rrf(1, 60), 1},
		{"rrf rank 2", rrf(2, 60), 61.0 / 62},
		{"rrf absent", rrf(0, 60), 0},
	}
	for _, tt := range tests {
		if math.Abs(tt.got-tt.want) > 1e-12 {
			t.Errorf("%s = %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}

func TestBlend(t *testing.T) {
	tun := defaultTuning
	full := candidate{lex: 1, vecCos: 1, server: 1}
	if s := tun.blend(full, true); math.Abs(s-1) > 1e-12 {
		t.Errorf("perfect evidence blends to %v, want 1", s)
	}
	if s := tun.blend(full, false); math.Abs(s-1) > 1e-12 {
		t.Errorf("perfect lexical evidence without vectors blends to %v, want 1", s)
	}
	if s := tun.blend(candidate{}, true); s != 0 {
		t.Errorf("no evidence blends to %v", s)
	}
	a := tun.blend(candidate{lex: 0.5, vecCos: 0.2}, true)
	b := tun.blend(candidate{lex: 0.5, vecCos: 0.6}, true)
	if a >= b {
		t.Errorf("more vector similarity should score higher: %v >= %v", a, b)
	}
}

func TestFuse(t *testing.T) {
	cands := func() []candidate {
		return []candidate{
			{id: 1, lex: 0.1, vecCos: 0.2, lexRank: 3, vecRank: 3},
			{id: 2, lex: 0.9, vecCos: 0.5, lexRank: 1, vecRank: 2},
			{id: 3, lex: 0.5, vecCos: 0.9, lexRank: 2, vecRank: 1},
			{id: 4, lex: 0.5, vecCos: 0.9, lexRank: 2, vecRank: 1}, // tie with 3: lower id first
			{id: 5}, // no evidence: never returned
		}
	}
	ids := func(rs []Result) []int64 {
		var out []int64
		for _, r := range rs {
			out = append(out, r.ID)
		}
		return out
	}
	tests := []struct {
		name     string
		mode     fusionMode
		limit    int
		minScore float64
		want     []int64
	}{
		{"blend", fuseBlend, 10, 0, []int64{2, 3, 4, 1}},
		{"blend limit", fuseBlend, 2, 0, []int64{2, 3}},
		{"blend threshold", fuseBlend, 10, 0.785, []int64{2}},
		{"lexical only", fuseLexicalOnly, 10, 0, []int64{2, 3, 4, 1}},
		{"vector only", fuseVectorOnly, 10, 0, []int64{3, 4, 2, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tun := defaultTuning
			tun.fusion = tt.mode
			got := tun.fuse(cands(), true, tt.limit, tt.minScore)
			if g := ids(got); len(g) != len(tt.want) || func() bool {
				for i := range g {
					if g[i] != tt.want[i] {
						return true
					}
				}
				return false
			}() {
				t.Errorf("fuse = %v, want %v", g, tt.want)
			}
			for i, r := range got {
				if r.Score <= 0 || r.Score > 1 || r.Score < tt.minScore {
					t.Errorf("result %d score %v", i, r.Score)
				}
				if i > 0 && r.Score > got[i-1].Score {
					t.Errorf("not sorted at %d", i)
				}
			}
		})
	}
}

func TestFuseRRFUsesServerEvidence(t *testing.T) {
	tun := defaultTuning
	tun.fusion = fuseRRF
	// Equal lexical scores: the server evidence decides the lexical rank.
	cands := []candidate{
		{id: 1, lex: 0.4, server: 0},
		{id: 2, lex: 0.4, server: 0.9},
	}
	got := tun.fuse(cands, true, 10, 0)
	if len(got) != 2 || got[0].ID != 2 || got[0].LexicalRank != 1 {
		t.Errorf("fuse = %+v", got)
	}
}
