package served_test

import (
	"context"
	"slices"
	"testing"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/search/classify"
	"github.com/mcpgw/aggregator/search/embed"
	"github.com/mcpgw/aggregator/search/served"
	"github.com/mcpgw/aggregator/search/toolsearch"
	"github.com/mcpgw/aggregator/search/vector"
)

func row(id int64, name, hash string, skills ...string) routing.ServedTool {
	return routing.ServedTool{Tool: &persistence.Tool{ID: id, SourceServerID: "s1", Name: name, OriginalName: name,
		Description: "does " + name, DefinitionHash: hash, SkillIDs: skills}}
}

func delta(version uint64, full bool, added, changed []routing.ServedTool, removed ...int64) *routing.ServedDelta {
	return &routing.ServedDelta{ServerID: "s1", ServerName: "one", Version: version, Full: full, Added: added,
		Changed: changed, Removed: removed}
}

func TestIndexApply(t *testing.T) {
	ctx := context.Background()
	skill := classify.DefaultTaxonomy().Skills[0].ID
	tests := []struct {
		name     string
		deltas   []*routing.ServedDelta
		outcomes []served.Outcome
		tools    int // held after the last delta
		version  uint64
	}{
		{"added", []*routing.ServedDelta{delta(1, false, []routing.ServedTool{row(1, "a", "h1"), row(2, "b", "h2")}, nil)},
			[]served.Outcome{served.Applied}, 2, 1},
		{"stale skipped", []*routing.ServedDelta{
			delta(2, true, []routing.ServedTool{row(1, "a", "h1")}, nil),
			delta(2, false, []routing.ServedTool{row(2, "b", "h2")}, nil),
			delta(1, false, []routing.ServedTool{row(3, "c", "h3")}, nil),
		}, []served.Outcome{served.Applied, served.Stale, served.Stale}, 1, 2},
		{"gap not applied", []*routing.ServedDelta{
			delta(1, false, []routing.ServedTool{row(1, "a", "h1")}, nil),
			delta(3, false, []routing.ServedTool{row(2, "b", "h2")}, nil),
		}, []served.Outcome{served.Applied, served.Gap}, 1, 1},
		{"full after a gap applied", []*routing.ServedDelta{
			delta(1, false, []routing.ServedTool{row(1, "a", "h1")}, nil),
			delta(5, true, []routing.ServedTool{row(2, "b", "h2")}, nil),
		}, []served.Outcome{served.Applied, served.Applied}, 1, 5},
		{"removed", []*routing.ServedDelta{
			delta(1, false, []routing.ServedTool{row(1, "a", "h1"), row(2, "b", "h2")}, nil),
			delta(2, false, nil, nil, 1),
		}, []served.Outcome{served.Applied, served.Applied}, 1, 2},
		{"changed and classified", []*routing.ServedDelta{
			delta(1, false, []routing.ServedTool{row(1, "a", "h1")}, nil),
			delta(2, false, nil, []routing.ServedTool{row(1, "a2", "h9", skill)}),
			delta(3, false, nil, []routing.ServedTool{row(1, "a2", "h9")}),
		}, []served.Outcome{served.Applied, served.Applied, served.Applied}, 1, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			engine, err := toolsearch.New(ctx, toolsearch.Config{})
			if err != nil {
				t.Fatal(err)
			}
			x := served.NewIndex(engine, nil, nil)
			var got []served.Outcome
			for _, d := range tt.deltas {
				got = append(got, x.Apply(ctx, d))
			}
			if !slices.Equal(got, tt.outcomes) {
				t.Errorf("outcomes = %v, want %v", got, tt.outcomes)
			}
			if x.Len() != tt.tools || engine.Len() != tt.tools {
				t.Errorf("index holds %d tools, engine %d, want %d", x.Len(), engine.Len(), tt.tools)
			}
			if v := x.Version("s1"); v != tt.version {
				t.Errorf("version = %d, want %d", v, tt.version)
			}
		})
	}
}

// A skill's vector follows its tools: it moves off its description while the skill has tools, and back when the
// last one leaves (removed, reclassified, or its server removed).
func TestIndexSkillCentroids(t *testing.T) {
	ctx := context.Background()
	skill := classify.DefaultTaxonomy().Skills[0].ID
	tests := []struct {
		name  string
		leave func(x *served.Index)
	}{
		{"tool removed", func(x *served.Index) { x.Apply(ctx, delta(2, false, nil, nil, 1)) }},
		{"tool reclassified", func(x *served.Index) {
			x.Apply(ctx, delta(2, false, nil, []routing.ServedTool{row(1, "a", "h1")}))
		}},
		{"server removed", func(x *served.Index) { x.RemoveServer(ctx, "s1") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			emb := embed.NewHashed(0)
			engine, err := toolsearch.New(ctx, toolsearch.Config{Embedder: emb})
			if err != nil {
				t.Fatal(err)
			}
			second, err := classify.NewSkillSpace(ctx, emb, classify.DefaultTaxonomy())
			if err != nil {
				t.Fatal(err)
			}
			x := served.NewIndex(engine, second, nil)
			desc, _ := engine.SkillSpace().DescriptionVector(skill)
			x.Apply(ctx, delta(1, false, []routing.ServedTool{row(1, "a", "h1", skill)}, nil))
			moved, _ := engine.SkillSpace().SkillVector(skill)
			if slices.Equal(moved, desc) {
				t.Fatal("the skill vector did not move to its tool's centroid")
			}
			if v, _ := second.SkillVector(skill); !slices.Equal(v, moved) {
				t.Error("the second skill space was not told the centroid")
			}
			tt.leave(x)
			back, _ := engine.SkillSpace().SkillVector(skill)
			if !slices.Equal(back, desc) {
				t.Error("the emptied skill did not fall back to its description")
			}
		})
	}
}

func TestIndexHealth(t *testing.T) {
	got, err := served.IndexHealth(context.Background(), vector.NewMemory())
	if err != nil || got != "in_process" {
		t.Errorf("IndexHealth(memory) = %q, %v", got, err)
	}
}

// TestIndexApplyAllMatchesOneByOne: deltas applied together (the indexer's batches) leave the index as applying them
// one by one does: the same outcomes, versions, tools, vectors and skill vectors, with several servers in a run,
// a second delta of a server in the same call, a removal, a reclassification, a full delta and a gap.
func TestIndexApplyAllMatchesOneByOne(t *testing.T) {
	ctx := context.Background()
	skills := classify.DefaultTaxonomy().Skills
	on := func(server string, d *routing.ServedDelta) *routing.ServedDelta {
		d.ServerID, d.ServerName = server, server
		for _, list := range [][]routing.ServedTool{d.Added, d.Changed} {
			for _, st := range list {
				st.Tool.SourceServerID = server
			}
		}
		return d
	}
	deltas := func() []*routing.ServedDelta {
		return []*routing.ServedDelta{
			on("s1", delta(1, false, []routing.ServedTool{row(1, "alpha", "h1", skills[0].ID), row(2, "beta", "h2")}, nil)),
			on("s2", delta(1, false, []routing.ServedTool{row(3, "gamma", "h3", skills[1].ID)}, nil)),
			on("s1", delta(2, false, nil, []routing.ServedTool{row(2, "beta", "h9", skills[1].ID)}, 1)),
			on("s2", delta(2, true, []routing.ServedTool{row(4, "delta", "h4", skills[0].ID)}, nil)),
			on("s3", delta(1, false, []routing.ServedTool{row(5, "epsilon", "h5")}, nil)),
			on("s1", delta(4, false, []routing.ServedTool{row(6, "zeta", "h6")}, nil)), // a gap
			on("s3", delta(1, false, []routing.ServedTool{row(7, "eta", "h7")}, nil)),  // stale
		}
	}
	build := func(apply func(x *served.Index, ds []*routing.ServedDelta) []served.Outcome) (*served.Index, *toolsearch.Searcher, []served.Outcome) {
		engine, err := toolsearch.New(ctx, toolsearch.Config{Embedder: embed.NewHashed(0)})
		if err != nil {
			t.Fatal(err)
		}
		x := served.NewIndex(engine, nil, nil)
		return x, engine, apply(x, deltas())
	}
	one, oneEngine, oneOut := build(func(x *served.Index, ds []*routing.ServedDelta) []served.Outcome {
		var out []served.Outcome
		for _, d := range ds {
			out = append(out, x.Apply(ctx, d))
		}
		return out
	})
	all, allEngine, allOut := build(func(x *served.Index, ds []*routing.ServedDelta) []served.Outcome {
		return x.ApplyAll(ctx, ds)
	})
	want := []served.Outcome{served.Applied, served.Applied, served.Applied, served.Applied, served.Applied, served.Gap, served.Stale}
	if !slices.Equal(oneOut, want) || !slices.Equal(allOut, want) {
		t.Fatalf("outcomes one by one %v, together %v, want %v", oneOut, allOut, want)
	}
	if one.Len() != 3 || all.Len() != 3 || oneEngine.Len() != 3 || allEngine.Len() != 3 {
		t.Fatalf("tools held: %d/%d (engines %d/%d), want 3", one.Len(), all.Len(), oneEngine.Len(), allEngine.Len())
	}
	for _, s := range []string{"s1", "s2", "s3"} {
		if one.Version(s) != all.Version(s) {
			t.Errorf("version of %s: %d one by one, %d together", s, one.Version(s), all.Version(s))
		}
	}
	vectors := func(e *toolsearch.Searcher) map[uint64][]float32 {
		got := map[uint64][]float32{}
		src := e.Index().(vector.VectorSource)
		if err := src.EachVector([]uint64{1, 2, 3, 4, 5, 6, 7}, func(id uint64, v []float32) { got[id] = slices.Clone(v) }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	vo, va := vectors(oneEngine), vectors(allEngine)
	if len(vo) != 3 || len(va) != len(vo) {
		t.Fatalf("vectors held: %d one by one, %d together, want 3", len(vo), len(va))
	}
	for id, v := range vo {
		if !slices.Equal(v, va[id]) {
			t.Errorf("vector of tool %d differs", id)
		}
	}
	for _, s := range skills {
		a, _ := oneEngine.SkillSpace().SkillVector(s.ID)
		b, _ := allEngine.SkillSpace().SkillVector(s.ID)
		if !slices.Equal(a, b) {
			t.Errorf("skill %s: vector differs", s.ID)
		}
	}
}
