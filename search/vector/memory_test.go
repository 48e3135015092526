package vector

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"
)

func TestMemoryConformance(t *testing.T) {
	runConformance(t, func(t *testing.T) Index {
		m := NewMemory()
		t.Cleanup(func() { _ = m.Close() })
		return m
	})
}

// TestMemoryParallelScan covers the split scan used above parallelMinWork.
func TestMemoryParallelScan(t *testing.T) {
	const dim = 256
	n := parallelMinWork/dim + 500
	m := NewMemory()
	if _, err := m.Ensure(t.Context(), Spec{Dimension: dim, Model: "m"}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	pts := randomPoints(rng, n, dim)
	mustUpsert(t, m, pts...)
	for _, f := range []Filter{{}, {ServerNames: []string{"beta"}, Classified: ptr(false)}} {
		q := randomPoints(rng, 1, dim)[0].Vector
		for _, limit := range []int{1, 10, 100} {
			checkAgainstReference(t, mustSearch(t, m, q, f, limit), pts, q, f, limit, halfPrecisionError)
		}
	}
}

func TestTopK(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, limit := range []int{1, 2, 5, 50} {
		h := topK{limit: limit}
		var all []scored
		for i := range 200 {
			s := scored{score: float32(rng.IntN(20)), id: uint64(i)}
			all = append(all, s)
			h.offer(s)
		}
		slices.SortFunc(all, func(a, b scored) int {
			if better(a, b) {
				return -1
			}
			return 1
		})
		got := slices.Clone(h.items)
		slices.SortFunc(got, func(a, b scored) int {
			if better(a, b) {
				return -1
			}
			return 1
		})
		if !slices.Equal(got, all[:limit]) {
			t.Fatalf("limit %d: top = %v, want %v", limit, got, all[:limit])
		}
	}
}

// BenchmarkMemorySearch10k measures an unfiltered and a filtered top-20
// search over 10,000 tools. Besides ns/op it reports p50-ms and p95-ms of
// the individual searches. Keep it short on shared machines:
//
//	go test -run '^$' -bench MemorySearch10k -benchtime 200x ./search/vector/
func BenchmarkMemorySearch10k(b *testing.B) {
	const n = 10_000
	for _, dim := range []int{512, 1024} {
		m := NewMemory()
		if _, err := m.Ensure(b.Context(), Spec{Dimension: dim, Model: "bench"}); err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(9, 10))
		pts := randomPoints(rng, n, dim)
		if err := m.Upsert(b.Context(), pts); err != nil {
			b.Fatal(err)
		}
		queries := randomPoints(rng, 64, dim)
		for _, f := range []struct {
			name   string
			filter Filter
		}{
			{"all", Filter{}},
			{"classified", Filter{Classified: ptr(true)}},
		} {
			b.Run(fmt.Sprintf("dim%d/%s", dim, f.name), func(b *testing.B) {
				lat := make([]time.Duration, 0, b.N)
				i := 0
				for b.Loop() {
					start := time.Now()
					hits, err := m.Search(b.Context(), queries[i%len(queries)].Vector, f.filter, 20)
					lat = append(lat, time.Since(start))
					if err != nil || len(hits) != 20 {
						b.Fatalf("search: %d hits, %v", len(hits), err)
					}
					i++
				}
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, "p95-ms")
			})
		}
		_ = m.Close()
	}
}

// TestMemoryEachVector checks that the stored vectors come back unit-length (to half precision), for the ids asked in their order,
// skipping unknown ids, and that an index not ensured refuses.
func TestMemoryEachVector(t *testing.T) {
	m := NewMemory()
	var got []uint64
	if err := m.EachVector([]uint64{1}, func(id uint64, v []float32) { got = append(got, id) }); err == nil {
		t.Fatal("EachVector before Ensure succeeded")
	}
	if _, err := m.Ensure(t.Context(), Spec{Dimension: 2, Model: "m"}); err != nil {
		t.Fatal(err)
	}
	mustUpsert(t, m, Point{ID: 1, Vector: []float32{3, 4}, Payload: Payload{SourceServerID: "a"}},
		Point{ID: 2, Vector: []float32{0, 2}, Payload: Payload{SourceServerID: "a"}})
	want := map[uint64][]float32{1: {0.6, 0.8}, 2: {0, 1}}
	err := m.EachVector([]uint64{2, 7, 1}, func(id uint64, v []float32) {
		got = append(got, id)
		if !slices.EqualFunc(v, want[id], func(a, b float32) bool { return math.Abs(float64(a-b)) <= halfPrecisionError }) {
			t.Errorf("vector %d = %v, want %v", id, v, want[id])
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []uint64{2, 1}) {
		t.Errorf("ids %v, want [2 1]", got)
	}
}

// TestMemoryChunksAfterDeletes fills several chunks, deletes rows across them (the last row moves into each hole,
// emptied chunks are dropped), replaces some vectors, and checks searches and EachVector against the survivors.
func TestMemoryChunksAfterDeletes(t *testing.T) {
	const dim = 8
	m := NewMemory()
	if _, err := m.Ensure(t.Context(), Spec{Dimension: dim, Model: "m"}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 10))
	pts := randomPoints(rng, 3*chunkRows+7, dim)
	mustUpsert(t, m, pts...)
	var keep []Point
	var gone []uint64
	for i, p := range pts {
		if i%3 == 0 || i >= 2*chunkRows { // empties the last chunk and a half
			gone = append(gone, p.ID)
			continue
		}
		keep = append(keep, p)
	}
	if err := m.Delete(t.Context(), gone); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(keep); i += 5 {
		keep[i].Vector = randomPoints(rng, 1, dim)[0].Vector
		mustUpsert(t, m, keep[i])
	}
	if n, _ := m.Count(t.Context()); n != len(keep) {
		t.Fatalf("count %d, want %d", n, len(keep))
	}
	if want := (len(keep) + chunkRows - 1) / chunkRows; len(m.chunks) != want {
		t.Errorf("%d chunks for %d rows, want %d", len(m.chunks), len(keep), want)
	}
	for range 5 {
		q := randomPoints(rng, 1, dim)[0].Vector
		checkAgainstReference(t, mustSearch(t, m, q, Filter{}, 20), keep, q, Filter{}, 20, halfPrecisionError)
	}
	ids := make([]uint64, len(keep))
	for i, p := range keep {
		ids[i] = p.ID
	}
	seen := 0
	if err := m.EachVector(ids, func(id uint64, v []float32) {
		if v := v[:cap(v)]; len(v) != dim {
			t.Errorf("vector %d has capacity %d", id, len(v))
		}
		seen++
	}); err != nil || seen != len(keep) {
		t.Errorf("EachVector saw %d of %d: %v", seen, len(keep), err)
	}
}

// TestMemoryPayloadsShareStrings checks that stored payloads equal what was given, share the strings that repeat
// across tools, keep nothing of the caller's, and that the shared table starts afresh instead of growing without
// end.
func TestMemoryPayloadsShareStrings(t *testing.T) {
	var ps payloadStrings
	in := func(i int) Payload {
		return Payload{ToolName: fmt.Sprintf("srv.tool%d", i), OriginalName: fmt.Sprintf("tool%d", i),
			SourceServerID: strings.Repeat("a", 36), SourceServerName: "srv", IsClassified: true,
			SkillIDs: []string{"web", "utilities"}, PrimarySkillID: "web"}
	}
	a, b := ps.keep(in(1), 0), ps.keep(in(2), 1)
	if !reflect.DeepEqual(a, in(1).clone()) || !reflect.DeepEqual(b, in(2).clone()) {
		t.Fatalf("kept payloads differ: %+v %+v", a, b)
	}
	if unsafe.StringData(a.SourceServerID) != unsafe.StringData(b.SourceServerID) || &a.SkillIDs[0] != &b.SkillIDs[0] {
		t.Error("repeated strings and skill lists are not shared")
	}
	if unsafe.StringData(a.OriginalName) != unsafe.StringData(a.ToolName[len("srv."):]) {
		t.Error("the original name is not the tool name's suffix")
	}
	caller := in(3)
	kept := ps.keep(caller, 2)
	caller.SkillIDs[0] = "changed"
	if kept.SkillIDs[0] != "web" {
		t.Error("a kept payload shares the caller's skill list")
	}
	if e := ps.keep(Payload{ToolName: "s.x", SkillIDs: []string{}}, 3); e.SkillIDs != nil {
		t.Errorf("an empty skill list is kept as %#v, as clone: nil", e.SkillIDs)
	}
	for i := range 3 * sharedSlack {
		ps.keep(Payload{ToolName: "s.x", SourceServerID: fmt.Sprint("server-", i)}, 4)
	}
	if n := len(ps.strs) + len(ps.sets); n > 4+sharedSlack+8 {
		t.Errorf("the shared table holds %d entries for 4 rows", n)
	}
}
