package vector

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"
)

// factory returns a fresh, empty, not yet ensured Index; it registers its own
// cleanup.
type factory func(t *testing.T) Index

// runConformance is the contract every Index implementation must meet. It is
// run against NewMemory and against NewQdrant talking to the fake server.
func runConformance(t *testing.T, newIndex factory) {
	tests := []struct {
		name string
		fn   func(t *testing.T, newIndex factory)
	}{
		{"NotEnsured", testNotEnsured},
		{"InvalidSpec", testInvalidSpec},
		{"EnsureCreatesKeepsAndRecreates", testEnsure},
		{"UpsertSearchOrdering", testUpsertSearchOrdering},
		{"PayloadRoundTrip", testPayloadRoundTrip},
		{"MatchesBruteForce", testMatchesBruteForce},
		{"Filters", testFilters},
		{"Delete", testDelete},
		{"DeleteByServer", testDeleteByServer},
		{"SetPayload", testSetPayload},
		{"InvalidVectorsRejected", testInvalidVectorsRejected},
		{"InvalidPayloadRejected", testInvalidPayloadRejected},
		{"SearchArguments", testSearchArguments},
		{"ContextCanceled", testContextCanceled},
		{"ConcurrentUse", testConcurrentUse},
		{"Close", testClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newIndex) })
	}
}

func ensured(t *testing.T, newIndex factory, spec Spec) Index {
	t.Helper()
	idx := newIndex(t)
	if _, err := idx.Ensure(t.Context(), spec); err != nil {
		t.Fatalf("Ensure(%+v): %v", spec, err)
	}
	return idx
}

func mustUpsert(t *testing.T, idx Index, points ...Point) {
	t.Helper()
	if err := idx.Upsert(t.Context(), points); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
}

func mustCount(t *testing.T, idx Index, want int) {
	t.Helper()
	n, err := idx.Count(t.Context())
	if err != nil {
		t.Fatalf("Count: %v", err)
	}
	if n != want {
		t.Fatalf("Count = %d, want %d", n, want)
	}
}

func mustSearch(t *testing.T, idx Index, q []float32, f Filter, limit int) []Hit {
	t.Helper()
	hits, err := idx.Search(t.Context(), q, f, limit)
	if err != nil {
		t.Fatalf("Search: %v", err)
	}
	return hits
}

func hitIDs(hits []Hit) []uint64 {
	ids := make([]uint64, len(hits))
	for i, h := range hits {
		ids[i] = h.ID
	}
	return ids
}

func pt(id uint64, server string, v ...float32) Point {
	return Point{ID: id, Vector: v, Payload: Payload{
		ToolName:         fmt.Sprintf("%s.tool%d", server, id),
		OriginalName:     fmt.Sprintf("tool%d", id),
		SourceServerID:   "id-" + server,
		SourceServerName: server,
		IsExternal:       true,
	}}
}

func ptr[T any](v T) *T { return &v }

var spec4 = Spec{Dimension: 4, Model: "test-model-a"}

func testNotEnsured(t *testing.T, newIndex factory) {
	idx := newIndex(t)
	ctx := t.Context()
	q := []float32{1, 0, 0, 0}
	checks := map[string]error{
		"Upsert":         idx.Upsert(ctx, []Point{pt(1, "s", 1, 0, 0, 0)}),
		"Delete":         idx.Delete(ctx, []uint64{1}),
		"DeleteByServer": idx.DeleteByServer(ctx, "id-s"),
		"SetPayload":     idx.SetPayload(ctx, 1, Payload{}),
	}
	_, checks["Search"] = idx.Search(ctx, q, Filter{}, 5)
	_, checks["Count"] = idx.Count(ctx)
	for name, err := range checks {
		if !errors.Is(err, ErrNotEnsured) {
			t.Errorf("%s before Ensure: err = %v, want ErrNotEnsured", name, err)
		}
	}
}

func testInvalidSpec(t *testing.T, newIndex factory) {
	idx := newIndex(t)
	for _, spec := range []Spec{
		{Dimension: 0, Model: "m"},
		{Dimension: -3, Model: "m"},
		{Dimension: MaxDimension + 1, Model: "m"},
		{Dimension: 4, Model: ""},
		{Dimension: 4, Model: "bad\xff"},
	} {
		if _, err := idx.Ensure(t.Context(), spec); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("Ensure(%+v): err = %v, want ErrInvalidSpec", spec, err)
		}
	}
	// A failed Ensure leaves the index unusable, not half-configured.
	if _, err := idx.Count(t.Context()); !errors.Is(err, ErrNotEnsured) {
		t.Errorf("Count after invalid Ensure: err = %v, want ErrNotEnsured", err)
	}
	// Even when an earlier Ensure had succeeded: the caller wanted another
	// embedder, so the old vectors must not be used by mistake.
	if _, err := idx.Ensure(t.Context(), spec4); err != nil {
		t.Fatal(err)
	}
	mustUpsert(t, idx, pt(1, "s", 1, 0, 0, 0))
	if _, err := idx.Ensure(t.Context(), Spec{Dimension: 4}); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("Ensure without model: err = %v", err)
	}
	if _, err := idx.Search(t.Context(), []float32{1, 0, 0, 0}, Filter{}, 1); !errors.Is(err, ErrNotEnsured) {
		t.Errorf("Search after failed re-Ensure: err = %v, want ErrNotEnsured", err)
	}
	if rebuild, err := idx.Ensure(t.Context(), spec4); err != nil || rebuild {
		t.Fatalf("Ensure back to the original spec = %v, %v; want false (content kept)", rebuild, err)
	}
	mustCount(t, idx, 1)
}

func testEnsure(t *testing.T, newIndex factory) {
	idx := newIndex(t)
	ctx := t.Context()
	steps := []struct {
		spec    Spec
		rebuild bool
		count   int // points expected right after Ensure
	}{
		{spec4, true, 0},  // created
		{spec4, false, 0}, // same spec: kept
	}
	for i, st := range steps {
		rebuild, err := idx.Ensure(ctx, st.spec)
		if err != nil || rebuild != st.rebuild {
			t.Fatalf("step %d Ensure(%+v) = %v, %v; want %v", i, st.spec, rebuild, err, st.rebuild)
		}
		mustCount(t, idx, st.count)
	}
	mustUpsert(t, idx, pt(1, "s", 1, 0, 0, 0), pt(2, "s", 0, 1, 0, 0))

	// Same spec again: content kept.
	if rebuild, err := idx.Ensure(ctx, spec4); err != nil || rebuild {
		t.Fatalf("Ensure(same) = %v, %v; want false", rebuild, err)
	}
	mustCount(t, idx, 2)

	// New dimension: recreated empty, old-size vectors now refused.
	spec8 := Spec{Dimension: 8, Model: spec4.Model}
	if rebuild, err := idx.Ensure(ctx, spec8); err != nil || !rebuild {
		t.Fatalf("Ensure(dim 8) = %v, %v; want true", rebuild, err)
	}
	mustCount(t, idx, 0)
	if err := idx.Upsert(ctx, []Point{pt(1, "s", 1, 0, 0, 0)}); !errors.Is(err, ErrInvalidVector) {
		t.Fatalf("Upsert 4-dim into 8-dim index: err = %v, want ErrInvalidVector", err)
	}
	if _, err := idx.Search(ctx, []float32{1, 0, 0, 0}, Filter{}, 3); !errors.Is(err, ErrInvalidVector) {
		t.Fatalf("Search with 4-dim query in 8-dim index: err = %v, want ErrInvalidVector (never a silent empty result)", err)
	}
	mustUpsert(t, idx, pt(3, "s", 1, 0, 0, 0, 0, 0, 0, 0))
	mustCount(t, idx, 1)

	// Same dimension, new model: vectors are not comparable, recreated.
	specB := Spec{Dimension: 8, Model: "test-model-b"}
	if rebuild, err := idx.Ensure(ctx, specB); err != nil || !rebuild {
		t.Fatalf("Ensure(model b) = %v, %v; want true", rebuild, err)
	}
	mustCount(t, idx, 0)
	if hits := mustSearch(t, idx, []float32{1, 0, 0, 0, 0, 0, 0, 0}, Filter{}, 3); len(hits) != 0 {
		t.Fatalf("search after model change = %v, want none", hitIDs(hits))
	}
}

func testUpsertSearchOrdering(t *testing.T, newIndex factory) {
	idx := ensured(t, newIndex, spec4)
	// Angles to the query (1,0,0,0): 0, 45, 60, 90 and 180 degrees; the
	// magnitudes differ to show that only direction counts.
	mustUpsert(t, idx,
		pt(10, "s", 0, 1, 0, 0),                     // 90 deg  -> 0
		pt(11, "s", 100, 100, 0, 0),                 // 45 deg  -> 0.7071
		pt(12, "s", 0.5, 0, 0, 0),                   // 0 deg   -> 1
		pt(13, "s", 1, float32(math.Sqrt(3)), 0, 0), // 60 deg -> 0.5
		pt(14, "s", -3, 0, 0, 0),                    // 180 deg -> -1
	)
	hits := mustSearch(t, idx, []float32{2, 0, 0, 0}, Filter{}, 10)
	wantIDs := []uint64{12, 11, 13, 10, 14}
	wantScores := []float64{1, math.Sqrt2 / 2, 0.5, 0, -1}
	if got := hitIDs(hits); !slices.Equal(got, wantIDs) {
		t.Fatalf("order = %v, want %v", got, wantIDs)
	}
	for i, h := range hits {
		if math.Abs(float64(h.Score)-wantScores[i]) > scoreTolerance(idx) {
			t.Errorf("hit %d (id %d) score = %v, want %v", i, h.ID, h.Score, wantScores[i])
		}
	}

	// limit truncates to the best ones.
	if got := hitIDs(mustSearch(t, idx, []float32{1, 0, 0, 0}, Filter{}, 2)); !slices.Equal(got, []uint64{12, 11}) {
		t.Fatalf("limit 2 = %v, want [12 11]", got)
	}

	// Upsert of an existing ID replaces vector and payload, not adds.
	moved := pt(14, "other", 1, 0.01, 0, 0)
	mustUpsert(t, idx, moved)
	mustCount(t, idx, 5)
	hits = mustSearch(t, idx, []float32{1, 0, 0, 0}, Filter{}, 2)
	if got := hitIDs(hits); !slices.Equal(got, []uint64{12, 14}) {
		t.Fatalf("after replacing 14: order = %v, want [12 14]", got)
	}
	if hits[1].Payload.SourceServerName != "other" {
		t.Fatalf("replaced payload = %+v", hits[1].Payload)
	}

	// Equal scores are ordered by ID.
	mustUpsert(t, idx, pt(30, "s", 0, 0, 1, 0), pt(20, "s", 0, 0, 2, 0), pt(25, "s", 0, 0, 3, 0))
	if got := hitIDs(mustSearch(t, idx, []float32{0, 0, 1, 0}, Filter{}, 3)); !slices.Equal(got, []uint64{20, 25, 30}) {
		t.Fatalf("ties = %v, want [20 25 30]", got)
	}

	// A duplicate ID inside one batch: the last one wins.
	mustUpsert(t, idx, pt(40, "first", 0, 0, 0, 1), pt(40, "last", 0, 0, 0, 1))
	hits = mustSearch(t, idx, []float32{0, 0, 0, 1}, Filter{}, 1)
	if len(hits) != 1 || hits[0].ID != 40 || hits[0].Payload.SourceServerName != "last" {
		t.Fatalf("duplicate in batch: hits = %+v", hits)
	}
}

func testPayloadRoundTrip(t *testing.T, newIndex factory) {
	idx := ensured(t, newIndex, spec4)
	full := Payload{
		ToolName:         "github.create_issue",
		OriginalName:     "create_issue",
		SourceServerID:   "5b0c8a5e-0a59-4a0b-8f7e-2f5b0e0f6a11",
		SourceServerName: "github",
		IsExternal:       true,
		IsClassified:     true,
		SkillIDs:         []string{"code-hosting", "issue-tracking"},
		PrimarySkillID:   "issue-tracking",
	}
	bare := Payload{ToolName: "search_aggregated_tools", OriginalName: "search_aggregated_tools"}
	mustUpsert(t, idx,
		Point{ID: 1, Vector: []float32{1, 0, 0, 0}, Payload: full},
		Point{ID: 2, Vector: []float32{0, 1, 0, 0}, Payload: bare},
	)
	// The index must not alias the caller's slice.
	full.SkillIDs[0] = "mutated"
	hits := mustSearch(t, idx, []float32{1, 0.5, 0, 0}, Filter{}, 2)
	if len(hits) != 2 {
		t.Fatalf("hits = %+v", hits)
	}
	full.SkillIDs[0] = "code-hosting"
	for _, h := range hits {
		want := map[uint64]Payload{1: full, 2: bare}[h.ID]
		if !payloadEqual(h.Payload, want) {
			t.Errorf("payload of %d = %+v, want %+v", h.ID, h.Payload, want)
		}
	}
	// Nor may a caller mutating a hit change the index.
	hits[0].Payload.SkillIDs[0] = "mutated"
	again := mustSearch(t, idx, []float32{1, 0, 0, 0}, Filter{}, 1)
	if again[0].Payload.SkillIDs[0] != "code-hosting" {
		t.Fatalf("hit payload aliases the index: %+v", again[0].Payload)
	}
}

func payloadEqual(a, b Payload) bool {
	return a.ToolName == b.ToolName && a.OriginalName == b.OriginalName &&
		a.SourceServerID == b.SourceServerID && a.SourceServerName == b.SourceServerName &&
		a.IsExternal == b.IsExternal && a.IsClassified == b.IsClassified &&
		a.PrimarySkillID == b.PrimarySkillID && slices.Equal(a.SkillIDs, b.SkillIDs)
}

// randomPoints returns n random points spread over three servers with mixed
// flags; the vectors are Gaussian so directions are uniform.
func randomPoints(rng *rand.Rand, n, dim int) []Point {
	servers := []string{"alpha", "beta", "gamma"}
	pts := make([]Point, n)
	for i := range pts {
		v := make([]float32, dim)
		for j := range v {
			v[j] = float32(rng.NormFloat64())
		}
		s := servers[i%len(servers)]
		pts[i] = Point{ID: uint64(1000 + i), Vector: v, Payload: Payload{
			ToolName:         fmt.Sprintf("%s.t%d", s, i),
			OriginalName:     fmt.Sprintf("t%d", i),
			SourceServerID:   "id-" + s,
			SourceServerName: s,
			IsExternal:       i%5 != 0,
			IsClassified:     i%2 == 0,
		}}
	}
	return pts
}

func cosine64(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}

// scoreTolerance is how far idx's scores may be from the exact cosine: the
// in-process index stores half-precision rows, Qdrant single precision.
func scoreTolerance(idx Index) float64 {
	if _, ok := idx.(*Memory); ok {
		return halfPrecisionError
	}
	return 1e-5
}

// checkAgainstReference compares hits with an exact float64 ranking of pts.
// Scores may differ from the reference by tol (see scoreTolerance).
func checkAgainstReference(t *testing.T, hits []Hit, pts []Point, q []float32, f Filter, limit int, tol float64) {
	t.Helper()
	type ref struct {
		id    uint64
		score float64
	}
	var want []ref
	for i := range pts {
		if f.matches(&pts[i].Payload) {
			want = append(want, ref{pts[i].ID, cosine64(q, pts[i].Vector)})
		}
	}
	sort.Slice(want, func(i, j int) bool { return want[i].score > want[j].score })
	if len(want) > limit {
		want = want[:limit]
	}
	if len(hits) != len(want) {
		t.Fatalf("filter %+v: %d hits, want %d", f, len(hits), len(want))
	}
	for i := range want {
		// Scores must agree position by position; IDs too unless two
		// reference scores are too close to order in float32.
		if d := math.Abs(float64(hits[i].Score) - want[i].score); d > tol {
			t.Fatalf("filter %+v: hit %d score %v, want %v (id %d vs %d)", f, i, hits[i].Score, want[i].score, hits[i].ID, want[i].id)
		}
		nearTie := (i > 0 && want[i-1].score-want[i].score < 2*tol) ||
			(i+1 < len(want) && want[i].score-want[i+1].score < 2*tol)
		if hits[i].ID != want[i].id && !nearTie {
			t.Fatalf("filter %+v: hit %d id %d, want %d", f, i, hits[i].ID, want[i].id)
		}
		if i > 0 && hits[i].Score > hits[i-1].Score {
			t.Fatalf("filter %+v: hits not sorted at %d", f, i)
		}
	}
}

func testMatchesBruteForce(t *testing.T, newIndex factory) {
	const n, dim = 400, 48
	idx := ensured(t, newIndex, Spec{Dimension: dim, Model: "random"})
	rng := rand.New(rand.NewPCG(1, 2))
	pts := randomPoints(rng, n, dim)
	mustUpsert(t, idx, pts...)
	mustCount(t, idx, n)
	filters := []Filter{
		{},
		{ServerIDs: []string{"id-beta"}},
		{ServerNames: []string{"alpha", "gamma"}, Classified: ptr(true)},
		{IsExternal: ptr(false)},
	}
	for range 4 {
		q := randomPoints(rng, 1, dim)[0].Vector
		for _, f := range filters {
			for _, limit := range []int{1, 7, n + 10} {
				checkAgainstReference(t, mustSearch(t, idx, q, f, limit), pts, q, f, limit, scoreTolerance(idx))
			}
		}
	}
}

func testFilters(t *testing.T, newIndex factory) {
	idx := ensured(t, newIndex, spec4)
	// Scores against the query (1,0,0,0) decrease with the ID.
	mk := func(id uint64, serverID, serverName string, external, classified bool) Point {
		angle := float64(id) * 0.2
		return Point{ID: id, Vector: []float32{float32(math.Cos(angle)), float32(math.Sin(angle)), 0, 0}, Payload: Payload{
			ToolName: fmt.Sprintf("%s.t%d", serverName, id), OriginalName: fmt.Sprintf("t%d", id),
			SourceServerID: serverID, SourceServerName: serverName, IsExternal: external, IsClassified: classified,
		}}
	}
	mustUpsert(t, idx,
		mk(1, "sid-1", "github", true, true),
		mk(2, "sid-1", "github", true, false),
		mk(3, "sid-2", "slack", true, true),
		mk(4, "sid-3", "jira", true, false),
		mk(5, "", "", false, true), // an internal meta-tool
		mk(6, "sid-2", "slack", true, false),
	)
	q := []float32{1, 0, 0, 0}
	cases := []struct {
		name   string
		filter Filter
		want   []uint64
	}{
		{"none", Filter{}, []uint64{1, 2, 3, 4, 5, 6}},
		{"one server id", Filter{ServerIDs: []string{"sid-2"}}, []uint64{3, 6}},
		{"any of server ids", Filter{ServerIDs: []string{"sid-3", "sid-1"}}, []uint64{1, 2, 4}},
		{"unknown server id", Filter{ServerIDs: []string{"nope"}}, nil},
		{"server name", Filter{ServerNames: []string{"slack"}}, []uint64{3, 6}},
		{"any of server names", Filter{ServerNames: []string{"jira", "github"}}, []uint64{1, 2, 4}},
		{"external", Filter{IsExternal: ptr(true)}, []uint64{1, 2, 3, 4, 6}},
		{"internal", Filter{IsExternal: ptr(false)}, []uint64{5}},
		{"classified", Filter{Classified: ptr(true)}, []uint64{1, 3, 5}},
		{"unclassified", Filter{Classified: ptr(false)}, []uint64{2, 4, 6}},
		{"ids and classified", Filter{ServerIDs: []string{"sid-1", "sid-2"}, Classified: ptr(false)}, []uint64{2, 6}},
		{"id and name disagree", Filter{ServerIDs: []string{"sid-1"}, ServerNames: []string{"slack"}}, nil},
		{"everything", Filter{ServerIDs: []string{"sid-2"}, ServerNames: []string{"slack"}, IsExternal: ptr(true), Classified: ptr(true)}, []uint64{3}},
		{"empty slices mean no restriction", Filter{ServerIDs: []string{}, ServerNames: []string{}}, []uint64{1, 2, 3, 4, 5, 6}},
		{"keep", Filter{Keep: func(id uint64) bool { return id%2 == 0 }}, []uint64{2, 4, 6}},
		{"keep and server", Filter{ServerIDs: []string{"sid-1"}, Keep: func(id uint64) bool { return id != 1 }}, []uint64{2}},
		{"keep nothing", Filter{Keep: func(uint64) bool { return false }}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := hitIDs(mustSearch(t, idx, q, tc.filter, 10))
			if !slices.Equal(got, tc.want) && (len(got) != 0 || len(tc.want) != 0) {
				t.Fatalf("ids = %v, want %v", got, tc.want)
			}
		})
	}
	// A filter combines with limit: the best matching ones, not the best
	// ones then filtered.
	if got := hitIDs(mustSearch(t, idx, q, Filter{Classified: ptr(false)}, 2)); !slices.Equal(got, []uint64{2, 4}) {
		t.Fatalf("filtered limit 2 = %v, want [2 4]", got)
	}
	if got := hitIDs(mustSearch(t, idx, q, Filter{Keep: func(id uint64) bool { return id >= 4 }}, 2)); len(got) != 2 || got[0] < 4 || got[1] < 4 {
		t.Fatalf("kept limit 2 = %v, want two of [4 5 6]", got)
	}
}

func testDelete(t *testing.T, newIndex factory) {
	idx := ensured(t, newIndex, spec4)
	ctx := t.Context()
	mustUpsert(t, idx, pt(1, "s", 1, 0, 0, 0), pt(2, "s", 1, 1, 0, 0), pt(3, "s", 0, 1, 0, 0), pt(4, "s", 0, 0, 1, 0))
	if err := idx.Delete(ctx, []uint64{2, 99, 4}); err != nil { // 99 does not exist
		t.Fatalf("Delete: %v", err)
	}
	mustCount(t, idx, 2)
	if got := hitIDs(mustSearch(t, idx, []float32{1, 1, 0, 0}, Filter{}, 10)); !slices.Equal(got, []uint64{1, 3}) {
		t.Fatalf("after delete = %v, want [1 3]", got)
	}
	if err := idx.Delete(ctx, nil); err != nil {
		t.Fatalf("Delete(nil): %v", err)
	}
	if err := idx.Delete(ctx, []uint64{1, 1, 3}); err != nil {
		t.Fatalf("Delete(dups): %v", err)
	}
	mustCount(t, idx, 0)
	if hits := mustSearch(t, idx, []float32{1, 0, 0, 0}, Filter{}, 10); len(hits) != 0 {
		t.Fatalf("search of empty index = %v", hitIDs(hits))
	}
	// Deleted IDs can come back.
	mustUpsert(t, idx, pt(2, "s", 0, 0, 0, 1))
	if got := hitIDs(mustSearch(t, idx, []float32{0, 0, 0, 1}, Filter{}, 10)); !slices.Equal(got, []uint64{2}) {
		t.Fatalf("re-added = %v, want [2]", got)
	}
}

func testDeleteByServer(t *testing.T, newIndex factory) {
	idx := ensured(t, newIndex, spec4)
	ctx := t.Context()
	var pts []Point
	for i := range 30 {
		server := []string{"a", "b", "c"}[i%3]
		pts = append(pts, pt(uint64(i+1), server, 1, float32(i), 0, 1))
	}
	mustUpsert(t, idx, pts...)
	if err := idx.DeleteByServer(ctx, "id-b"); err != nil {
		t.Fatalf("DeleteByServer: %v", err)
	}
	mustCount(t, idx, 20)
	for _, h := range mustSearch(t, idx, []float32{1, 1, 1, 1}, Filter{}, 100) {
		if h.Payload.SourceServerID == "id-b" {
			t.Fatalf("point %d of deleted server still found", h.ID)
		}
	}
	if hits := mustSearch(t, idx, []float32{1, 1, 1, 1}, Filter{ServerIDs: []string{"id-b"}}, 100); len(hits) != 0 {
		t.Fatalf("filter on deleted server = %v", hitIDs(hits))
	}
	if err := idx.DeleteByServer(ctx, "id-unknown"); err != nil {
		t.Fatalf("DeleteByServer(unknown): %v", err)
	}
	mustCount(t, idx, 20)
	// The survivors are intact: every ID of a and c is still searchable.
	got := hitIDs(mustSearch(t, idx, []float32{1, 1, 1, 1}, Filter{ServerIDs: []string{"id-a", "id-c"}}, 100))
	slices.Sort(got)
	var want []uint64
	for i := range 30 {
		if i%3 != 1 {
			want = append(want, uint64(i+1))
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("survivors = %v, want %v", got, want)
	}
}

func testSetPayload(t *testing.T, newIndex factory) {
	idx := ensured(t, newIndex, spec4)
	ctx := t.Context()
	mustUpsert(t, idx, pt(1, "s", 1, 0, 0, 0), pt(2, "s", 1, 1, 0, 0))
	q := []float32{1, 0.2, 0, 0}
	before := mustSearch(t, idx, q, Filter{}, 2)

	classified := before[1].Payload
	classified.IsClassified = true
	classified.SkillIDs = []string{"sk-1", "sk-2"}
	classified.PrimarySkillID = "sk-1"
	if err := idx.SetPayload(ctx, 2, classified); err != nil {
		t.Fatalf("SetPayload: %v", err)
	}
	hits := mustSearch(t, idx, q, Filter{Classified: ptr(true)}, 10)
	if len(hits) != 1 || hits[0].ID != 2 || !payloadEqual(hits[0].Payload, classified) {
		t.Fatalf("classified hits = %+v", hits)
	}
	if hits[0].Score != before[1].Score {
		t.Fatalf("SetPayload changed the vector: score %v, was %v", hits[0].Score, before[1].Score)
	}
	if got := hitIDs(mustSearch(t, idx, q, Filter{Classified: ptr(false)}, 10)); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("unclassified = %v, want [1]", got)
	}

	// Replacing the payload drops skills that are no longer set.
	renamed := classified
	renamed.SourceServerName = "renamed"
	renamed.ToolName = "renamed.tool2"
	renamed.SkillIDs = nil
	renamed.PrimarySkillID = ""
	if err := idx.SetPayload(ctx, 2, renamed); err != nil {
		t.Fatalf("SetPayload(renamed): %v", err)
	}
	hits = mustSearch(t, idx, q, Filter{ServerNames: []string{"renamed"}}, 10)
	if len(hits) != 1 || !payloadEqual(hits[0].Payload, renamed) {
		t.Fatalf("renamed hits = %+v, want payload %+v", hits, renamed)
	}
	mustCount(t, idx, 2)

	if err := idx.SetPayload(ctx, 99, classified); !errors.Is(err, ErrNotFound) {
		t.Fatalf("SetPayload(missing): err = %v, want ErrNotFound", err)
	}
	mustCount(t, idx, 2)
}

func testInvalidVectorsRejected(t *testing.T, newIndex factory) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	cases := []struct {
		name string
		v    []float32
	}{
		{"all zeros", []float32{0, 0, 0, 0}},
		{"negative zeros", []float32{float32(math.Copysign(0, -1)), 0, 0, 0}},
		{"NaN", []float32{1, nan, 0, 0}},
		{"+Inf", []float32{inf, 0, 0, 0}},
		{"-Inf", []float32{0, 0, -inf, 1}},
		{"too short", []float32{1, 0, 0}},
		{"too long", []float32{1, 0, 0, 0, 0}},
		{"nil", nil},
	}
	idx := ensured(t, newIndex, spec4)
	ctx := t.Context()
	mustUpsert(t, idx, pt(1, "s", 1, 0, 0, 0))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := ValidateVector(tc.v, 4); !errors.Is(err, ErrInvalidVector) {
				t.Fatalf("ValidateVector: err = %v, want ErrInvalidVector", err)
			}
			// The bad point comes after good ones: nothing of the batch
			// may be stored.
			batch := []Point{pt(2, "s", 0, 1, 0, 0), pt(3, "s", 0, 0, 1, 0), {ID: 4, Vector: tc.v}, pt(5, "s", 0, 0, 0, 1)}
			if err := idx.Upsert(ctx, batch); !errors.Is(err, ErrInvalidVector) {
				t.Fatalf("Upsert: err = %v, want ErrInvalidVector", err)
			}
			mustCount(t, idx, 1)
			if got := hitIDs(mustSearch(t, idx, []float32{0, 1, 1, 1}, Filter{}, 10)); !slices.Equal(got, []uint64{1}) {
				t.Fatalf("after rejected batch: ids = %v, want [1]", got)
			}
			if _, err := idx.Search(ctx, tc.v, Filter{}, 5); !errors.Is(err, ErrInvalidVector) {
				t.Fatalf("Search with it: err = %v, want ErrInvalidVector", err)
			}
			// Nor may it replace an existing point.
			if err := idx.Upsert(ctx, []Point{{ID: 1, Vector: tc.v}}); !errors.Is(err, ErrInvalidVector) {
				t.Fatalf("Upsert over id 1: err = %v, want ErrInvalidVector", err)
			}
			hits := mustSearch(t, idx, []float32{1, 0, 0, 0}, Filter{}, 1)
			if len(hits) != 1 || hits[0].ID != 1 || math.Abs(float64(hits[0].Score)-1) > 1e-6 {
				t.Fatalf("id 1 damaged: %+v", hits)
			}
		})
	}
	// Tiny but non-zero vectors are fine: only the direction matters.
	mustUpsert(t, idx, pt(9, "s", 1e-30, 0, 0, 0))
	mustCount(t, idx, 2)
}

func testInvalidPayloadRejected(t *testing.T, newIndex factory) {
	idx := ensured(t, newIndex, spec4)
	bad := pt(2, "s", 0, 1, 0, 0)
	bad.Payload.SkillIDs = []string{"ok", "bad\xc3"}
	if err := idx.Upsert(t.Context(), []Point{pt(1, "s", 1, 0, 0, 0), bad}); !errors.Is(err, ErrInvalidPayload) {
		t.Fatalf("Upsert: err = %v, want ErrInvalidPayload", err)
	}
	mustCount(t, idx, 0)
	mustUpsert(t, idx, pt(1, "s", 1, 0, 0, 0))
	if err := idx.SetPayload(t.Context(), 1, Payload{ToolName: "\xff"}); !errors.Is(err, ErrInvalidPayload) {
		t.Fatalf("SetPayload: err = %v, want ErrInvalidPayload", err)
	}
}

func testSearchArguments(t *testing.T, newIndex factory) {
	idx := ensured(t, newIndex, spec4)
	q := []float32{1, 0, 0, 0}
	for _, limit := range []int{0, -1} {
		if _, err := idx.Search(t.Context(), q, Filter{}, limit); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Search(limit %d): err = %v, want ErrInvalidArgument", limit, err)
		}
	}
	hits, err := idx.Search(t.Context(), q, Filter{}, 10)
	if err != nil || len(hits) != 0 {
		t.Fatalf("Search of empty index = %v, %v", hits, err)
	}
	if err := idx.Upsert(t.Context(), nil); err != nil {
		t.Fatalf("Upsert(nil): %v", err)
	}
}

func testContextCanceled(t *testing.T, newIndex factory) {
	idx := ensured(t, newIndex, spec4)
	mustUpsert(t, idx, pt(1, "s", 1, 0, 0, 0))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	q := []float32{1, 0, 0, 0}
	checks := map[string]error{
		"Upsert":         idx.Upsert(ctx, []Point{pt(2, "s", 0, 1, 0, 0)}),
		"Delete":         idx.Delete(ctx, []uint64{1}),
		"DeleteByServer": idx.DeleteByServer(ctx, "id-s"),
		"SetPayload":     idx.SetPayload(ctx, 1, Payload{}),
	}
	_, checks["Search"] = idx.Search(ctx, q, Filter{}, 5)
	_, checks["Count"] = idx.Count(ctx)
	for name, err := range checks {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with canceled context: err = %v, want context.Canceled", name, err)
		}
	}
	// Nothing happened.
	mustCount(t, idx, 1)
	if got := hitIDs(mustSearch(t, idx, q, Filter{}, 5)); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("after canceled calls = %v", got)
	}
	// A canceled Ensure is a failed Ensure: data calls wait for a good one.
	if _, err := idx.Ensure(ctx, Spec{Dimension: 2, Model: "x"}); !errors.Is(err, context.Canceled) {
		t.Errorf("Ensure with canceled context: err = %v, want context.Canceled", err)
	}
	if _, err := idx.Count(t.Context()); !errors.Is(err, ErrNotEnsured) {
		t.Errorf("Count after canceled Ensure: err = %v, want ErrNotEnsured", err)
	}
	if rebuild, err := idx.Ensure(t.Context(), spec4); err != nil || rebuild {
		t.Fatalf("Ensure(original) = %v, %v; want false", rebuild, err)
	}
	mustCount(t, idx, 1)
}

func testConcurrentUse(t *testing.T, newIndex factory) {
	const writers, perWriter, dim = 4, 25, 16
	idx := ensured(t, newIndex, Spec{Dimension: dim, Model: "concurrent"})
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(3, 4))
	all := randomPoints(rng, writers*perWriter, dim)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range writers {
		mine := all[w*perWriter : (w+1)*perWriter]
		wg.Go(func() {
			for i := 0; i < len(mine); i += 5 {
				if err := idx.Upsert(ctx, mine[i:i+5]); err != nil {
					errs <- err
					return
				}
			}
			if err := idx.SetPayload(ctx, mine[0].ID, mine[0].Payload); err != nil {
				errs <- err
			}
			if err := idx.Delete(ctx, []uint64{mine[1].ID}); err != nil {
				errs <- err
			}
		})
	}
	for r := range 2 {
		wg.Go(func() {
			q := all[r].Vector
			for range 20 {
				hits, err := idx.Search(ctx, q, Filter{Classified: ptr(r == 0)}, 5)
				if err != nil {
					errs <- err
					return
				}
				for i := 1; i < len(hits); i++ {
					if hits[i].Score > hits[i-1].Score {
						errs <- fmt.Errorf("unsorted hits during writes")
						return
					}
				}
				if _, err := idx.Count(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	mustCount(t, idx, writers*(perWriter-1))
}

func testClose(t *testing.T, newIndex factory) {
	idx := ensured(t, newIndex, spec4)
	mustUpsert(t, idx, pt(1, "s", 1, 0, 0, 0))
	if err := idx.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := idx.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	ctx := t.Context()
	if _, err := idx.Search(ctx, []float32{1, 0, 0, 0}, Filter{}, 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Search after Close: err = %v, want ErrClosed", err)
	}
	if err := idx.Upsert(ctx, []Point{pt(2, "s", 1, 0, 0, 0)}); !errors.Is(err, ErrClosed) {
		t.Errorf("Upsert after Close: err = %v, want ErrClosed", err)
	}
	if _, err := idx.Ensure(ctx, spec4); !errors.Is(err, ErrClosed) {
		t.Errorf("Ensure after Close: err = %v, want ErrClosed", err)
	}
}
