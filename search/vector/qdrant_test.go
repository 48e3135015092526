package vector

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/search/vector/internal/fakeqdrant"
	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func startFake(t *testing.T, opts fakeqdrant.Options) *fakeqdrant.Server {
	t.Helper()
	srv, err := fakeqdrant.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

func openQdrant(t *testing.T, cfg Config) *Qdrant {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	q, err := NewQdrant(ctx, cfg)
	if err != nil {
		t.Fatalf("NewQdrant(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

func TestQdrantConformance(t *testing.T) {
	runConformance(t, func(t *testing.T) Index {
		srv := startFake(t, fakeqdrant.Options{})
		return openQdrant(t, Config{URL: "http://" + srv.Addr()})
	})
}

func TestQdrantCollectionLayout(t *testing.T) {
	srv := startFake(t, fakeqdrant.Options{})
	q := openQdrant(t, Config{URL: srv.Addr()})
	if rebuild, err := q.Ensure(t.Context(), Spec{Dimension: 384, Model: "all-MiniLM-L6-v2"}); err != nil || !rebuild {
		t.Fatalf("Ensure = %v, %v", rebuild, err)
	}
	st, ok := srv.Collection(DefaultCollection)
	if !ok {
		t.Fatalf("collection %q not created", DefaultCollection)
	}
	if st.Dimension != 384 || st.Distance != qdrant.Distance_Cosine {
		t.Errorf("collection dim %d distance %v, want 384 Cosine", st.Dimension, st.Distance)
	}
	if got := st.Metadata[metaModel].GetStringValue(); got != "all-MiniLM-L6-v2" {
		t.Errorf("metadata model = %q", got)
	}
	wantSchema := map[string]qdrant.PayloadSchemaType{
		"source_server_id":   qdrant.PayloadSchemaType_Keyword,
		"source_server_name": qdrant.PayloadSchemaType_Keyword,
		"is_external":        qdrant.PayloadSchemaType_Bool,
		"is_classified":      qdrant.PayloadSchemaType_Bool,
	}
	for k, v := range wantSchema {
		if st.PayloadSchema[k] != v {
			t.Errorf("payload index %s = %v, want %v", k, st.PayloadSchema[k], v)
		}
	}

	// The contract's payload field names are what is stored.
	if err := q.Upsert(t.Context(), []Point{{ID: 7, Vector: unitVec(384, 0), Payload: Payload{
		OriginalName: "echo", SourceServerID: "sid", SourceServerName: "everything", IsExternal: true, IsClassified: true,
	}}}); err != nil {
		t.Fatal(err)
	}
	calls := srv.Calls("/qdrant.Points/Upsert")
	req := calls[len(calls)-1].Request.(*qdrant.UpsertPoints)
	p := req.GetPoints()[0]
	if p.GetId().GetNum() != 7 {
		t.Errorf("point id = %v, want numeric 7", p.GetId())
	}
	for key, want := range map[string]any{
		"original_name": "echo", "source_server_id": "sid", "source_server_name": "everything",
		"is_external": true, "is_classified": true,
	} {
		v := p.GetPayload()[key]
		var got any
		switch want.(type) {
		case string:
			got = v.GetStringValue()
		case bool:
			got = v.GetBoolValue()
		}
		if v == nil || got != want {
			t.Errorf("payload %s = %v, want %v", key, v, want)
		}
	}
}

func unitVec(dim, axis int) []float32 {
	v := make([]float32, dim)
	v[axis] = 1
	return v
}

// TestQdrantReopen checks what a restarted process sees: the spec is read back
// from the server, not remembered.
func TestQdrantReopen(t *testing.T) {
	srv := startFake(t, fakeqdrant.Options{})
	ctx := t.Context()
	cfg := Config{URL: srv.Addr(), Collection: "tools_test"}
	specA := Spec{Dimension: 8, Model: "model-a"}

	first := openQdrant(t, cfg)
	if rebuild, err := first.Ensure(ctx, specA); err != nil || !rebuild {
		t.Fatalf("first Ensure = %v, %v", rebuild, err)
	}
	mustUpsert(t, first, pt(1, "s", 1, 0, 0, 0, 0, 0, 0, 0), pt(2, "s", 0, 1, 0, 0, 0, 0, 0, 0))
	_ = first.Close()

	second := openQdrant(t, cfg)
	if rebuild, err := second.Ensure(ctx, specA); err != nil || rebuild {
		t.Fatalf("Ensure after restart, same spec = %v, %v; want false", rebuild, err)
	}
	mustCount(t, second, 2)
	if got := hitIDs(mustSearch(t, second, unitVec(8, 1), Filter{}, 1)); !slices.Equal(got, []uint64{2}) {
		t.Fatalf("search after restart = %v", got)
	}
	_ = second.Close()

	third := openQdrant(t, cfg)
	if rebuild, err := third.Ensure(ctx, Spec{Dimension: 8, Model: "model-b"}); err != nil || !rebuild {
		t.Fatalf("Ensure after restart, new model = %v, %v; want true", rebuild, err)
	}
	mustCount(t, third, 0)
	if st, _ := srv.Collection("tools_test"); st.Metadata[metaModel].GetStringValue() != "model-b" || len(st.PayloadSchema) != 4 {
		t.Fatalf("recreated collection = %+v", st)
	}
	_ = third.Close()

	fourth := openQdrant(t, cfg)
	if rebuild, err := fourth.Ensure(ctx, Spec{Dimension: 16, Model: "model-b"}); err != nil || !rebuild {
		t.Fatalf("Ensure after restart, new dimension = %v, %v; want true", rebuild, err)
	}
	if st, _ := srv.Collection("tools_test"); st.Dimension != 16 {
		t.Fatalf("recreated dimension = %d", st.Dimension)
	}
}

// rawClient talks to the fake directly, standing in for another tool or an
// older version of this code that prepared the collection.
func rawClient(t *testing.T, srv *fakeqdrant.Server) *qdrant.Client {
	t.Helper()
	host, port, _ := net.SplitHostPort(srv.Addr())
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	c, err := qdrant.NewClient(&qdrant.Config{Host: host, Port: p, SkipCompatibilityCheck: true, PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestQdrantForeignCollections(t *testing.T) {
	cases := []struct {
		name        string
		create      *qdrant.CreateCollection
		wantRebuild bool
	}{
		{"no metadata", &qdrant.CreateCollection{
			VectorsConfig: qdrant.NewVectorsConfig(&qdrant.VectorParams{Size: 4, Distance: qdrant.Distance_Cosine}),
		}, true},
		{"older payload schema", &qdrant.CreateCollection{
			VectorsConfig: qdrant.NewVectorsConfig(&qdrant.VectorParams{Size: 4, Distance: qdrant.Distance_Cosine}),
			Metadata: map[string]*qdrant.Value{
				metaModel: qdrant.NewValueString(spec4.Model), metaDimension: qdrant.NewValueInt(4), metaSchema: qdrant.NewValueInt(0),
			},
		}, true},
		{"matching but without payload indexes", &qdrant.CreateCollection{
			VectorsConfig: qdrant.NewVectorsConfig(&qdrant.VectorParams{Size: 4, Distance: qdrant.Distance_Cosine}),
			Metadata: map[string]*qdrant.Value{
				metaModel: qdrant.NewValueString(spec4.Model), metaDimension: qdrant.NewValueInt(4), metaSchema: qdrant.NewValueInt(payloadSchemaVersion),
			},
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := startFake(t, fakeqdrant.Options{})
			tc.create.CollectionName = DefaultCollection
			if err := rawClient(t, srv).CreateCollection(t.Context(), tc.create); err != nil {
				t.Fatal(err)
			}
			q := openQdrant(t, Config{URL: srv.Addr()})
			if rebuild, err := q.Ensure(t.Context(), spec4); err != nil || rebuild != tc.wantRebuild {
				t.Fatalf("Ensure = %v, %v; want %v", rebuild, err, tc.wantRebuild)
			}
			st, _ := srv.Collection(DefaultCollection)
			if len(st.PayloadSchema) != 4 || st.Metadata[metaModel].GetStringValue() != spec4.Model {
				t.Fatalf("collection after Ensure = %+v", st)
			}
			// Ensure is idempotent from here on.
			if rebuild, err := q.Ensure(t.Context(), spec4); err != nil || rebuild {
				t.Fatalf("second Ensure = %v, %v", rebuild, err)
			}
		})
	}
}

func TestQdrantWritesWait(t *testing.T) {
	srv := startFake(t, fakeqdrant.Options{})
	q := openQdrant(t, Config{URL: srv.Addr()})
	ctx := t.Context()
	if _, err := q.Ensure(ctx, spec4); err != nil {
		t.Fatal(err)
	}
	mustUpsert(t, q, pt(1, "s", 1, 0, 0, 0))
	if err := q.SetPayload(ctx, 1, Payload{IsClassified: true}); err != nil {
		t.Fatal(err)
	}
	if err := q.Delete(ctx, []uint64{1}); err != nil {
		t.Fatal(err)
	}
	if err := q.DeleteByServer(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	type waiter interface{ GetWait() bool }
	n := 0
	for _, c := range srv.Calls("") {
		if w, ok := c.Request.(waiter); ok {
			n++
			if !w.GetWait() {
				t.Errorf("%s sent without wait=true", c.Method)
			}
		}
	}
	if n < 8 { // 4 field indexes, upsert, set payload, 2 deletes
		t.Fatalf("only %d write calls seen", n)
	}
}

func TestQdrantInvalidBatchNeverSent(t *testing.T) {
	srv := startFake(t, fakeqdrant.Options{})
	q := openQdrant(t, Config{URL: srv.Addr()})
	if _, err := q.Ensure(t.Context(), spec4); err != nil {
		t.Fatal(err)
	}
	err := q.Upsert(t.Context(), []Point{pt(1, "s", 1, 0, 0, 0), {ID: 2, Vector: []float32{0, 0, 0, 0}}})
	if !errors.Is(err, ErrInvalidVector) {
		t.Fatalf("err = %v", err)
	}
	if calls := srv.Calls("/qdrant.Points/Upsert"); len(calls) != 0 {
		t.Fatalf("%d upsert calls reached the server", len(calls))
	}
	if _, err := q.Search(t.Context(), []float32{0, 0, 0, 0}, Filter{}, 3); !errors.Is(err, ErrInvalidVector) {
		t.Fatalf("Search err = %v", err)
	}
	if calls := srv.Calls("/qdrant.Points/Query"); len(calls) != 0 {
		t.Fatalf("%d query calls reached the server", len(calls))
	}
}

func TestQdrantUpsertChunks(t *testing.T) {
	const dim, n = 1024, 1200
	srv := startFake(t, fakeqdrant.Options{})
	q := openQdrant(t, Config{URL: srv.Addr()})
	if _, err := q.Ensure(t.Context(), Spec{Dimension: dim, Model: "big"}); err != nil {
		t.Fatal(err)
	}
	pts := randomPoints(rand.New(rand.NewPCG(11, 12)), n, dim)
	mustUpsert(t, q, pts...)
	mustCount(t, q, n)
	calls := srv.Calls("/qdrant.Points/Upsert")
	if want := (n + 511) / 512; len(calls) != want {
		t.Fatalf("%d upsert requests, want %d of at most 512 points", len(calls), want)
	}
	qv := pts[3].Vector
	checkAgainstReference(t, mustSearch(t, q, qv, Filter{}, 5), pts, qv, Filter{}, 5, 1e-5)
}

func TestQdrantSearchRequest(t *testing.T) {
	srv := startFake(t, fakeqdrant.Options{})
	q := openQdrant(t, Config{URL: srv.Addr()})
	if _, err := q.Ensure(t.Context(), spec4); err != nil {
		t.Fatal(err)
	}
	f := Filter{ServerIDs: []string{"a", "b"}, ServerNames: []string{"n"}, IsExternal: ptr(true), Classified: ptr(false)}
	mustSearch(t, q, []float32{3, 4, 0, 0}, f, 7)
	mustSearch(t, q, []float32{3, 4, 0, 0}, Filter{}, 7)
	calls := srv.Calls("/qdrant.Points/Query")
	req := calls[0].Request.(*qdrant.QueryPoints)
	if req.GetLimit() != 7 || !req.GetWithPayload().GetEnable() {
		t.Errorf("limit %d with_payload %v", req.GetLimit(), req.GetWithPayload())
	}
	if got := req.GetQuery().GetNearest().GetDense().GetData(); !slices.Equal(got, []float32{0.6, 0.8, 0, 0}) {
		t.Errorf("query vector = %v, want normalised (0.6, 0.8, 0, 0)", got)
	}
	keys := map[string]bool{}
	for _, c := range req.GetFilter().GetMust() {
		keys[c.GetField().GetKey()] = true
	}
	for _, k := range []string{"source_server_id", "source_server_name", "is_external", "is_classified"} {
		if !keys[k] {
			t.Errorf("filter has no condition on indexed field %s: %v", k, req.GetFilter())
		}
	}
	if other := calls[1].Request.(*qdrant.QueryPoints); other.Filter != nil {
		t.Errorf("empty Filter sent as %v, want none", other.Filter)
	}
}

func TestQdrantAPIKey(t *testing.T) {
	srv := startFake(t, fakeqdrant.Options{APIKey: "s3cret"})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if q, err := NewQdrant(ctx, Config{URL: srv.Addr(), APIKey: "wrong"}); err == nil {
		_ = q.Close()
		t.Fatal("NewQdrant with a wrong API key succeeded")
	} else if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("err = %v, want PermissionDenied", err)
	}
	if q, err := NewQdrant(ctx, Config{URL: srv.Addr()}); err == nil {
		_ = q.Close()
		t.Fatal("NewQdrant without the API key succeeded")
	}
	q := openQdrant(t, Config{URL: srv.Addr(), APIKey: "s3cret"})
	if _, err := q.Ensure(t.Context(), spec4); err != nil {
		t.Fatalf("Ensure with the right key: %v", err)
	}
	mustUpsert(t, q, pt(1, "s", 1, 0, 0, 0))
	mustCount(t, q, 1)
}

func TestQdrantUnreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close() // nothing listens there any more
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	start := time.Now()
	q, err := NewQdrant(ctx, Config{URL: addr})
	if err == nil {
		_ = q.Close()
		t.Fatal("NewQdrant to a closed port succeeded")
	}
	if time.Since(start) > 4*time.Second {
		t.Fatalf("NewQdrant took %v to fail", time.Since(start))
	}
}

// TestQdrantServerSideFailures: what the server refuses or loses surfaces as
// an error, never as an empty result.
func TestQdrantServerSideFailures(t *testing.T) {
	srv := startFake(t, fakeqdrant.Options{})
	q := openQdrant(t, Config{URL: srv.Addr()})
	ctx := t.Context()

	// A failed payload index leaves no half-made collection behind.
	srv.FailNext("/qdrant.Points/CreateFieldIndex", status.Error(codes.Internal, "disk full"))
	if _, err := q.Ensure(ctx, spec4); err == nil {
		t.Fatal("Ensure succeeded despite a failed payload index")
	}
	if _, ok := srv.Collection(DefaultCollection); ok {
		t.Fatal("half-made collection left behind")
	}
	if err := q.Upsert(ctx, []Point{pt(1, "s", 1, 0, 0, 0)}); !errors.Is(err, ErrNotEnsured) {
		t.Fatalf("Upsert after failed Ensure: err = %v, want ErrNotEnsured", err)
	}
	if rebuild, err := q.Ensure(ctx, spec4); err != nil || !rebuild {
		t.Fatalf("retried Ensure = %v, %v; want true", rebuild, err)
	}

	mustUpsert(t, q, pt(1, "s", 1, 0, 0, 0))
	// Someone drops the collection behind our back.
	if err := rawClient(t, srv).DeleteCollection(ctx, DefaultCollection); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Search(ctx, []float32{1, 0, 0, 0}, Filter{}, 3); err == nil {
		t.Fatal("Search on a vanished collection returned no error")
	}
	if _, err := q.Count(ctx); err == nil {
		t.Fatal("Count on a vanished collection returned no error")
	}
	if rebuild, err := q.Ensure(ctx, spec4); err != nil || !rebuild {
		t.Fatalf("Ensure after the collection vanished = %v, %v; want true", rebuild, err)
	}

	// A transient server error is reported with its gRPC code intact.
	srv.FailNext("/qdrant.Points/Query", status.Error(codes.Unavailable, "restarting"))
	if _, err := q.Search(ctx, []float32{1, 0, 0, 0}, Filter{}, 3); status.Code(err) != codes.Unavailable {
		t.Fatalf("Search during a server error: err = %v, want Unavailable", err)
	}
}

func TestParseEndpoint(t *testing.T) {
	cases := []struct {
		in      string
		useTLS  bool
		host    string
		port    int
		tls     bool
		wantErr bool
	}{
		{in: "localhost:6334", host: "localhost", port: 6334},
		{in: "http://localhost:6334", host: "localhost", port: 6334},
		{in: "http://qdrant:6334/", host: "qdrant", port: 6334},
		{in: "https://xyz.cloud.qdrant.io:6334", host: "xyz.cloud.qdrant.io", port: 6334, tls: true},
		{in: "grpcs://q.example", host: "q.example", port: 6334, tls: true},
		{in: "qdrant", host: "qdrant", port: 6334},
		{in: "qdrant", useTLS: true, host: "qdrant", port: 6334, tls: true},
		{in: " 10.0.0.5:7000 ", host: "10.0.0.5", port: 7000},
		{in: "[::1]:6334", host: "::1", port: 6334},
		{in: "http://[::1]", host: "::1", port: 6334},
		{in: "", wantErr: true},
		{in: "ftp://q:6334", wantErr: true},
		{in: "http://q:6334/collections", wantErr: true},
		{in: "q:0", wantErr: true},
		{in: "q:99999", wantErr: true},
		{in: "q:port", wantErr: true},
		{in: "http://:6334", wantErr: true},
		{in: "user:pw@q:6334", wantErr: true},
	}
	for _, tc := range cases {
		host, port, tls, err := parseEndpoint(tc.in, tc.useTLS)
		if tc.wantErr {
			if err == nil {
				t.Errorf("parseEndpoint(%q) = %s %d, want error", tc.in, host, port)
			}
			continue
		}
		if err != nil || host != tc.host || port != tc.port || tls != tc.tls {
			t.Errorf("parseEndpoint(%q, %v) = %q %d %v %v; want %q %d %v", tc.in, tc.useTLS, host, port, tls, err, tc.host, tc.port, tc.tls)
		}
	}
}
