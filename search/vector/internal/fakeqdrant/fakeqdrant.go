// Package fakeqdrant is an in-process Qdrant server for tests: the generated
// gRPC services of github.com/qdrant/go-client (qdrant.Qdrant,
// qdrant.Collections, qdrant.Points) served on a real TCP listener, with
// exact, single-threaded semantics.
//
// It exists because no Qdrant server can run where the tests run. It speaks
// the real wire protocol, so the adapter under test connects to it exactly as
// it would to Qdrant. It implements only the subset of the API that package
// vector uses, and answers everything else (other RPCs, named or sparse
// vectors, UUID point ids, range/geo/text conditions, prefetch, ...) with
// codes.Unimplemented, so an adapter change that relies on more of the API
// fails loudly instead of passing against a lenient fake.
//
// What it does not model: HNSW (search is exact), optimisers and segment
// status, payload index effects (indexes are recorded, filters work without
// them), consistency and sharding, TLS. See search/vector/README.md.
package fakeqdrant

import (
	"context"
	"fmt"
	"math"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Options configures a fake server.
type Options struct {
	// APIKey, when set, is required in the "api-key" request header, as
	// Qdrant does when started with an API key.
	APIKey string
	// Version is reported by HealthCheck; default "1.17.0".
	Version string
}

// Call is one RPC the server received, for assertions on what the adapter
// sends.
type Call struct {
	// Method is the full gRPC method name, e.g. "/qdrant.Points/Upsert".
	Method string
	// Request is a copy of the decoded request message.
	Request proto.Message
}

// Server is a running fake. Its methods are safe for concurrent use.
type Server struct {
	opts     Options
	listener net.Listener
	grpc     *grpc.Server

	mu          sync.Mutex
	collections map[string]*collection
	calls       []Call
	failures    map[string][]error // method -> errors to return, in order
	operationID uint64
}

type collection struct {
	dim      int
	distance qdrant.Distance
	metadata map[string]*qdrant.Value
	schema   map[string]qdrant.PayloadSchemaType
	points   map[uint64]*point
}

type point struct {
	vec     []float32
	payload map[string]*qdrant.Value
}

// Start listens on 127.0.0.1 on a free port and serves until Stop.
func Start(opts Options) (*Server, error) {
	if opts.Version == "" {
		opts.Version = "1.17.0"
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fakeqdrant: listen: %w", err)
	}
	s := &Server{
		opts:        opts,
		listener:    lis,
		collections: make(map[string]*collection),
		failures:    make(map[string][]error),
	}
	s.grpc = grpc.NewServer(
		grpc.UnaryInterceptor(s.intercept),
		// The go-client pings every 10 s even without calls in flight; like
		// Qdrant, tolerate it instead of closing the connection.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
	)
	qdrant.RegisterQdrantServer(s.grpc, &qdrantService{s: s})
	qdrant.RegisterCollectionsServer(s.grpc, &collectionsService{s: s})
	qdrant.RegisterPointsServer(s.grpc, &pointsService{s: s})
	go func() { _ = s.grpc.Serve(lis) }()
	return s, nil
}

// Addr is the "127.0.0.1:port" the server listens on.
func (s *Server) Addr() string { return s.listener.Addr().String() }

// Stop closes the listener and every connection at once.
func (s *Server) Stop() { s.grpc.Stop() }

// Calls returns the RPCs received so far whose method ends with suffix (all
// when suffix is empty), oldest first.
func (s *Server) Calls(suffix string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.calls {
		if strings.HasSuffix(c.Method, suffix) {
			out = append(out, c)
		}
	}
	return out
}

// FailNext makes the next call of method (full name, e.g.
// "/qdrant.Points/CreateFieldIndex") fail with err, which should be a gRPC
// status error. Several calls queue several failures.
func (s *Server) FailNext(method string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures[method] = append(s.failures[method], err)
}

// CollectionState is a snapshot of a collection's configuration.
type CollectionState struct {
	Dimension     int
	Distance      qdrant.Distance
	Metadata      map[string]*qdrant.Value
	PayloadSchema map[string]qdrant.PayloadSchemaType
	Points        int
}

// Collection returns a snapshot of the named collection.
func (s *Server) Collection(name string) (CollectionState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.collections[name]
	if !ok {
		return CollectionState{}, false
	}
	st := CollectionState{
		Dimension:     c.dim,
		Distance:      c.distance,
		Metadata:      cloneValues(c.metadata),
		PayloadSchema: make(map[string]qdrant.PayloadSchemaType, len(c.schema)),
		Points:        len(c.points),
	}
	for k, v := range c.schema {
		st.PayloadSchema[k] = v
	}
	return st, true
}

// intercept records the call, enforces the API key and injects failures.
func (s *Server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	msg, _ := req.(proto.Message)
	s.mu.Lock()
	if msg != nil {
		s.calls = append(s.calls, Call{Method: info.FullMethod, Request: proto.Clone(msg)})
	}
	var injected error
	if q := s.failures[info.FullMethod]; len(q) > 0 {
		injected, s.failures[info.FullMethod] = q[0], q[1:]
	}
	s.mu.Unlock()
	if s.opts.APIKey != "" {
		md, _ := metadata.FromIncomingContext(ctx)
		if keys := md.Get("api-key"); len(keys) != 1 || keys[0] != s.opts.APIKey {
			return nil, status.Error(codes.PermissionDenied, "Invalid api-key")
		}
	}
	if injected != nil {
		return nil, injected
	}
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	return handler(ctx, req)
}

// ---- qdrant.Qdrant ----

type qdrantService struct {
	qdrant.UnimplementedQdrantServer
	s *Server
}

func (q *qdrantService) HealthCheck(context.Context, *qdrant.HealthCheckRequest) (*qdrant.HealthCheckReply, error) {
	return &qdrant.HealthCheckReply{Title: "qdrant - vector search engine (fake)", Version: q.s.opts.Version}, nil
}

// ---- qdrant.Collections ----

type collectionsService struct {
	qdrant.UnimplementedCollectionsServer
	s *Server
}

func notFound(name string) error {
	return status.Errorf(codes.NotFound, "Not found: Collection `%s` doesn't exist!", name)
}

func (c *collectionsService) CollectionExists(_ context.Context, req *qdrant.CollectionExistsRequest) (*qdrant.CollectionExistsResponse, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	_, ok := c.s.collections[req.GetCollectionName()]
	return &qdrant.CollectionExistsResponse{Result: &qdrant.CollectionExists{Exists: ok}}, nil
}

func (c *collectionsService) List(context.Context, *qdrant.ListCollectionsRequest) (*qdrant.ListCollectionsResponse, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	resp := &qdrant.ListCollectionsResponse{}
	for name := range c.s.collections {
		resp.Collections = append(resp.Collections, &qdrant.CollectionDescription{Name: name})
	}
	sort.Slice(resp.Collections, func(i, j int) bool { return resp.Collections[i].Name < resp.Collections[j].Name })
	return resp, nil
}

func (c *collectionsService) Get(_ context.Context, req *qdrant.GetCollectionInfoRequest) (*qdrant.GetCollectionInfoResponse, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	col, ok := c.s.collections[req.GetCollectionName()]
	if !ok {
		return nil, notFound(req.GetCollectionName())
	}
	schema := make(map[string]*qdrant.PayloadSchemaInfo, len(col.schema))
	for key, typ := range col.schema {
		var n uint64
		for _, p := range col.points {
			if _, ok := p.payload[key]; ok {
				n++
			}
		}
		schema[key] = &qdrant.PayloadSchemaInfo{DataType: typ, Points: qdrant.PtrOf(n)}
	}
	count := uint64(len(col.points))
	return &qdrant.GetCollectionInfoResponse{Result: &qdrant.CollectionInfo{
		Status:        qdrant.CollectionStatus_Green,
		SegmentsCount: 1,
		Config: &qdrant.CollectionConfig{
			Params: &qdrant.CollectionParams{
				ShardNumber: 1,
				VectorsConfig: qdrant.NewVectorsConfig(&qdrant.VectorParams{
					Size:     uint64(col.dim),
					Distance: col.distance,
				}),
			},
			Metadata: cloneValues(col.metadata),
		},
		PayloadSchema:       schema,
		PointsCount:         &count,
		IndexedVectorsCount: qdrant.PtrOf(uint64(0)),
	}}, nil
}

func (c *collectionsService) Create(_ context.Context, req *qdrant.CreateCollection) (*qdrant.CollectionOperationResponse, error) {
	name := req.GetCollectionName()
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "Validation error in body: [collection_name: must not be empty]")
	}
	params := req.GetVectorsConfig().GetParams()
	if params == nil {
		return nil, status.Error(codes.Unimplemented, "fakeqdrant: only a single unnamed dense vector is supported")
	}
	if params.GetSize() == 0 || params.GetSize() > 65536 {
		return nil, status.Errorf(codes.InvalidArgument, "Validation error in body: [vectors_config.size: value %d invalid]", params.GetSize())
	}
	if params.GetDistance() != qdrant.Distance_Cosine {
		return nil, status.Errorf(codes.Unimplemented, "fakeqdrant: distance %s not supported, only Cosine", params.GetDistance())
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if _, ok := c.s.collections[name]; ok {
		return nil, status.Errorf(codes.InvalidArgument, "Wrong input: Collection `%s` already exists!", name)
	}
	c.s.collections[name] = &collection{
		dim:      int(params.GetSize()),
		distance: params.GetDistance(),
		metadata: cloneValues(req.GetMetadata()),
		schema:   make(map[string]qdrant.PayloadSchemaType),
		points:   make(map[uint64]*point),
	}
	return &qdrant.CollectionOperationResponse{Result: true}, nil
}

func (c *collectionsService) Delete(_ context.Context, req *qdrant.DeleteCollection) (*qdrant.CollectionOperationResponse, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	_, ok := c.s.collections[req.GetCollectionName()]
	delete(c.s.collections, req.GetCollectionName())
	return &qdrant.CollectionOperationResponse{Result: ok}, nil
}

// ---- qdrant.Points ----

type pointsService struct {
	qdrant.UnimplementedPointsServer
	s *Server
}

// collection returns the named collection; the caller holds s.mu.
func (s *Server) collection(name string) (*collection, error) {
	c, ok := s.collections[name]
	if !ok {
		return nil, notFound(name)
	}
	return c, nil
}

// updated builds the answer of a write: Completed with wait, else
// Acknowledged. The caller holds s.mu.
func (s *Server) updated(wait bool) *qdrant.PointsOperationResponse {
	s.operationID++
	st := qdrant.UpdateStatus_Acknowledged
	if wait {
		st = qdrant.UpdateStatus_Completed
	}
	return &qdrant.PointsOperationResponse{Result: &qdrant.UpdateResult{
		OperationId: qdrant.PtrOf(s.operationID),
		Status:      st,
	}}
}

func numericID(id *qdrant.PointId) (uint64, error) {
	switch v := id.GetPointIdOptions().(type) {
	case *qdrant.PointId_Num:
		return v.Num, nil
	case *qdrant.PointId_Uuid:
		return 0, status.Error(codes.Unimplemented, "fakeqdrant: UUID point ids are not supported")
	default:
		return 0, status.Error(codes.InvalidArgument, "Validation error: point id is missing")
	}
}

// denseVector extracts a single unnamed dense vector.
func denseVector(v *qdrant.Vectors) ([]float32, error) {
	single, ok := v.GetVectorsOptions().(*qdrant.Vectors_Vector)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "fakeqdrant: only a single unnamed dense vector is supported")
	}
	switch d := single.Vector.GetVector().(type) {
	case *qdrant.Vector_Dense:
		return d.Dense.GetData(), nil
	case nil:
		if single.Vector.GetIndices() != nil {
			return nil, status.Error(codes.Unimplemented, "fakeqdrant: sparse vectors are not supported")
		}
		return single.Vector.GetData(), nil // deprecated encoding
	default:
		return nil, status.Errorf(codes.Unimplemented, "fakeqdrant: vector kind %T not supported", d)
	}
}

func dimensionError(want, got int) error {
	return status.Errorf(codes.InvalidArgument, "Wrong input: Vector dimension error: expected dim: %d, got %d", want, got)
}

func (p *pointsService) Upsert(_ context.Context, req *qdrant.UpsertPoints) (*qdrant.PointsOperationResponse, error) {
	if req.UpdateFilter != nil || req.ShardKeySelector != nil || req.UpdateMode != nil {
		return nil, status.Error(codes.Unimplemented, "fakeqdrant: upsert options not supported")
	}
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	col, err := p.s.collection(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	// Validate everything before applying anything.
	ids := make([]uint64, len(req.GetPoints()))
	vecs := make([][]float32, len(req.GetPoints()))
	for i, ps := range req.GetPoints() {
		if ids[i], err = numericID(ps.GetId()); err != nil {
			return nil, err
		}
		if vecs[i], err = denseVector(ps.GetVectors()); err != nil {
			return nil, err
		}
		if len(vecs[i]) != col.dim {
			return nil, dimensionError(col.dim, len(vecs[i]))
		}
	}
	for i, ps := range req.GetPoints() {
		col.points[ids[i]] = &point{vec: normalized(vecs[i]), payload: cloneValues(ps.GetPayload())}
	}
	return p.s.updated(req.GetWait()), nil
}

// selected resolves a points selector to ids; missing ids are kept (the
// caller decides). The caller holds s.mu.
func selected(col *collection, sel *qdrant.PointsSelector) ([]uint64, error) {
	switch v := sel.GetPointsSelectorOneOf().(type) {
	case *qdrant.PointsSelector_Points:
		ids := make([]uint64, 0, len(v.Points.GetIds()))
		for _, pid := range v.Points.GetIds() {
			id, err := numericID(pid)
			if err != nil {
				return nil, err
			}
			ids = append(ids, id)
		}
		return ids, nil
	case *qdrant.PointsSelector_Filter:
		var ids []uint64
		for id, pt := range col.points {
			ok, err := matchFilter(v.Filter, id, pt.payload)
			if err != nil {
				return nil, err
			}
			if ok {
				ids = append(ids, id)
			}
		}
		return ids, nil
	default:
		return nil, status.Error(codes.InvalidArgument, "Validation error: points selector is missing")
	}
}

func (p *pointsService) Delete(_ context.Context, req *qdrant.DeletePoints) (*qdrant.PointsOperationResponse, error) {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	col, err := p.s.collection(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	ids, err := selected(col, req.GetPoints())
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		delete(col.points, id)
	}
	return p.s.updated(req.GetWait()), nil
}

func (p *pointsService) Get(_ context.Context, req *qdrant.GetPoints) (*qdrant.GetResponse, error) {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	col, err := p.s.collection(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	if req.GetWithVectors().GetEnable() || req.GetWithVectors().GetInclude() != nil {
		return nil, status.Error(codes.Unimplemented, "fakeqdrant: with_vectors is not supported")
	}
	resp := &qdrant.GetResponse{}
	for _, pid := range req.GetIds() {
		id, err := numericID(pid)
		if err != nil {
			return nil, err
		}
		pt, ok := col.points[id]
		if !ok {
			continue
		}
		resp.Result = append(resp.Result, &qdrant.RetrievedPoint{
			Id:      qdrant.NewIDNum(id),
			Payload: selectPayload(pt.payload, req.GetWithPayload()),
		})
	}
	return resp, nil
}

func (p *pointsService) SetPayload(_ context.Context, req *qdrant.SetPayloadPoints) (*qdrant.PointsOperationResponse, error) {
	return p.writePayload(req, false)
}

func (p *pointsService) OverwritePayload(_ context.Context, req *qdrant.SetPayloadPoints) (*qdrant.PointsOperationResponse, error) {
	return p.writePayload(req, true)
}

func (p *pointsService) writePayload(req *qdrant.SetPayloadPoints, overwrite bool) (*qdrant.PointsOperationResponse, error) {
	if req.Key != nil {
		return nil, status.Error(codes.Unimplemented, "fakeqdrant: nested payload key is not supported")
	}
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	col, err := p.s.collection(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	ids, err := selected(col, req.GetPointsSelector())
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if _, ok := col.points[id]; !ok {
			return nil, status.Errorf(codes.NotFound, "Not found: No point with id %d found", id)
		}
	}
	for _, id := range ids {
		pt := col.points[id]
		if overwrite {
			pt.payload = cloneValues(req.GetPayload())
			continue
		}
		for k, v := range req.GetPayload() {
			pt.payload[k] = proto.Clone(v).(*qdrant.Value)
		}
	}
	return p.s.updated(req.GetWait()), nil
}

func (p *pointsService) CreateFieldIndex(_ context.Context, req *qdrant.CreateFieldIndexCollection) (*qdrant.PointsOperationResponse, error) {
	if req.FieldType == nil {
		return nil, status.Error(codes.InvalidArgument, "Wrong input: field_type is required")
	}
	var schema qdrant.PayloadSchemaType
	switch req.GetFieldType() {
	case qdrant.FieldType_FieldTypeKeyword:
		schema = qdrant.PayloadSchemaType_Keyword
	case qdrant.FieldType_FieldTypeBool:
		schema = qdrant.PayloadSchemaType_Bool
	case qdrant.FieldType_FieldTypeInteger:
		schema = qdrant.PayloadSchemaType_Integer
	default:
		return nil, status.Errorf(codes.Unimplemented, "fakeqdrant: field index type %s not supported", req.GetFieldType())
	}
	if strings.ContainsAny(req.GetFieldName(), ".[") || req.GetFieldName() == "" {
		return nil, status.Errorf(codes.Unimplemented, "fakeqdrant: field name %q not supported", req.GetFieldName())
	}
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	col, err := p.s.collection(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	col.schema[req.GetFieldName()] = schema
	return p.s.updated(req.GetWait()), nil
}

func (p *pointsService) Count(_ context.Context, req *qdrant.CountPoints) (*qdrant.CountResponse, error) {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	col, err := p.s.collection(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	var n uint64
	for id, pt := range col.points {
		ok, err := matchFilter(req.GetFilter(), id, pt.payload)
		if err != nil {
			return nil, err
		}
		if ok {
			n++
		}
	}
	return &qdrant.CountResponse{Result: &qdrant.CountResult{Count: n}}, nil
}

func (p *pointsService) Query(_ context.Context, req *qdrant.QueryPoints) (*qdrant.QueryResponse, error) {
	if len(req.GetPrefetch()) > 0 || req.GetUsing() != "" || req.LookupFrom != nil || req.ShardKeySelector != nil {
		return nil, status.Error(codes.Unimplemented, "fakeqdrant: prefetch, using, lookup_from and shard keys are not supported")
	}
	if req.GetWithVectors().GetEnable() || req.GetWithVectors().GetInclude() != nil {
		return nil, status.Error(codes.Unimplemented, "fakeqdrant: with_vectors is not supported")
	}
	nearest, ok := req.GetQuery().GetVariant().(*qdrant.Query_Nearest)
	if !ok {
		return nil, status.Errorf(codes.Unimplemented, "fakeqdrant: query %T not supported, only nearest", req.GetQuery().GetVariant())
	}
	dense, ok := nearest.Nearest.GetVariant().(*qdrant.VectorInput_Dense)
	if !ok {
		return nil, status.Errorf(codes.Unimplemented, "fakeqdrant: nearest input %T not supported, only dense", nearest.Nearest.GetVariant())
	}
	limit := uint64(10)
	if req.Limit != nil {
		limit = req.GetLimit()
	}

	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	col, err := p.s.collection(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	q := dense.Dense.GetData()
	if len(q) != col.dim {
		return nil, dimensionError(col.dim, len(q))
	}
	q = normalized(q)
	type hit struct {
		id    uint64
		score float32
	}
	var hits []hit
	for id, pt := range col.points {
		ok, err := matchFilter(req.GetFilter(), id, pt.payload)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		score := dot(q, pt.vec)
		if req.ScoreThreshold != nil && score < req.GetScoreThreshold() {
			continue
		}
		hits = append(hits, hit{id, score})
	}
	sort.Slice(hits, func(i, j int) bool {
		if hits[i].score != hits[j].score {
			return hits[i].score > hits[j].score
		}
		return hits[i].id < hits[j].id
	})
	offset := min(req.GetOffset(), uint64(len(hits)))
	hits = hits[offset:]
	if uint64(len(hits)) > limit {
		hits = hits[:limit]
	}
	resp := &qdrant.QueryResponse{Result: make([]*qdrant.ScoredPoint, len(hits))}
	for i, h := range hits {
		resp.Result[i] = &qdrant.ScoredPoint{
			Id:      qdrant.NewIDNum(h.id),
			Score:   h.score,
			Version: p.s.operationID,
			Payload: selectPayload(col.points[h.id].payload, req.GetWithPayload()),
		}
	}
	return resp, nil
}

// ---- filters ----

// matchFilter evaluates a Qdrant filter: all of must, at least one of should
// (when any), none of must_not, and min_should.
func matchFilter(f *qdrant.Filter, id uint64, payload map[string]*qdrant.Value) (bool, error) {
	if f == nil {
		return true, nil
	}
	for _, c := range f.GetMust() {
		ok, err := matchCondition(c, id, payload)
		if err != nil || !ok {
			return false, err
		}
	}
	for _, c := range f.GetMustNot() {
		ok, err := matchCondition(c, id, payload)
		if err != nil || ok {
			return false, err
		}
	}
	if len(f.GetShould()) > 0 {
		matched := false
		for _, c := range f.GetShould() {
			ok, err := matchCondition(c, id, payload)
			if err != nil {
				return false, err
			}
			matched = matched || ok
		}
		if !matched {
			return false, nil
		}
	}
	if ms := f.GetMinShould(); ms != nil {
		var n uint64
		for _, c := range ms.GetConditions() {
			ok, err := matchCondition(c, id, payload)
			if err != nil {
				return false, err
			}
			if ok {
				n++
			}
		}
		if n < ms.GetMinCount() {
			return false, nil
		}
	}
	return true, nil
}

func matchCondition(c *qdrant.Condition, id uint64, payload map[string]*qdrant.Value) (bool, error) {
	switch v := c.GetConditionOneOf().(type) {
	case *qdrant.Condition_Field:
		return matchField(v.Field, payload)
	case *qdrant.Condition_HasId:
		for _, pid := range v.HasId.GetHasId() {
			want, err := numericID(pid)
			if err != nil {
				return false, err
			}
			if want == id {
				return true, nil
			}
		}
		return false, nil
	case *qdrant.Condition_Filter:
		return matchFilter(v.Filter, id, payload)
	case *qdrant.Condition_IsEmpty:
		val, ok := payload[v.IsEmpty.GetKey()]
		if !ok {
			return true, nil
		}
		if _, null := val.GetKind().(*qdrant.Value_NullValue); null {
			return true, nil
		}
		if l, isList := val.GetKind().(*qdrant.Value_ListValue); isList {
			return len(l.ListValue.GetValues()) == 0, nil
		}
		return false, nil
	case *qdrant.Condition_IsNull:
		val, ok := payload[v.IsNull.GetKey()]
		_, null := val.GetKind().(*qdrant.Value_NullValue)
		return ok && null, nil
	default:
		return false, status.Errorf(codes.Unimplemented, "fakeqdrant: condition %T not supported", v)
	}
}

func matchField(fc *qdrant.FieldCondition, payload map[string]*qdrant.Value) (bool, error) {
	if strings.ContainsAny(fc.GetKey(), ".[") {
		return false, status.Errorf(codes.Unimplemented, "fakeqdrant: nested key %q not supported", fc.GetKey())
	}
	if fc.Range != nil || fc.GeoBoundingBox != nil || fc.GeoRadius != nil || fc.ValuesCount != nil ||
		fc.GeoPolygon != nil || fc.DatetimeRange != nil || fc.IsEmpty != nil || fc.IsNull != nil {
		return false, status.Errorf(codes.Unimplemented, "fakeqdrant: field condition on %q: only match is supported", fc.GetKey())
	}
	if fc.GetMatch() == nil {
		return false, status.Errorf(codes.InvalidArgument, "Validation error: field condition on %q has no match", fc.GetKey())
	}
	val, ok := payload[fc.GetKey()]
	if !ok {
		return false, nil
	}
	// A list matches when any of its elements does.
	values := []*qdrant.Value{val}
	if l, isList := val.GetKind().(*qdrant.Value_ListValue); isList {
		values = l.ListValue.GetValues()
	}
	for _, v := range values {
		ok, err := matchValue(fc.GetMatch(), v)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

func matchValue(m *qdrant.Match, v *qdrant.Value) (bool, error) {
	switch mv := m.GetMatchValue().(type) {
	case *qdrant.Match_Keyword:
		s, ok := v.GetKind().(*qdrant.Value_StringValue)
		return ok && s.StringValue == mv.Keyword, nil
	case *qdrant.Match_Keywords:
		s, ok := v.GetKind().(*qdrant.Value_StringValue)
		if !ok {
			return false, nil
		}
		for _, k := range mv.Keywords.GetStrings() {
			if s.StringValue == k {
				return true, nil
			}
		}
		return false, nil
	case *qdrant.Match_Boolean:
		b, ok := v.GetKind().(*qdrant.Value_BoolValue)
		return ok && b.BoolValue == mv.Boolean, nil
	case *qdrant.Match_Integer:
		i, ok := v.GetKind().(*qdrant.Value_IntegerValue)
		return ok && i.IntegerValue == mv.Integer, nil
	default:
		return false, status.Errorf(codes.Unimplemented, "fakeqdrant: match %T not supported", mv)
	}
}

// ---- helpers ----

func selectPayload(payload map[string]*qdrant.Value, sel *qdrant.WithPayloadSelector) map[string]*qdrant.Value {
	switch v := sel.GetSelectorOptions().(type) {
	case *qdrant.WithPayloadSelector_Enable:
		if v.Enable {
			return cloneValues(payload)
		}
	case *qdrant.WithPayloadSelector_Include:
		out := make(map[string]*qdrant.Value)
		for _, k := range v.Include.GetFields() {
			if val, ok := payload[k]; ok {
				out[k] = proto.Clone(val).(*qdrant.Value)
			}
		}
		return out
	case *qdrant.WithPayloadSelector_Exclude:
		out := cloneValues(payload)
		for _, k := range v.Exclude.GetFields() {
			delete(out, k)
		}
		return out
	}
	return nil
}

func cloneValues(m map[string]*qdrant.Value) map[string]*qdrant.Value {
	out := make(map[string]*qdrant.Value, len(m))
	for k, v := range m {
		out[k] = proto.Clone(v).(*qdrant.Value)
	}
	return out
}

// normalized returns v scaled to unit length, as Qdrant stores vectors of a
// cosine collection; a zero vector stays zero.
func normalized(v []float32) []float32 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	out := make([]float32, len(v))
	if s == 0 {
		return out
	}
	inv := 1 / math.Sqrt(s)
	for i, x := range v {
		out[i] = float32(float64(x) * inv)
	}
	return out
}

func dot(a, b []float32) float32 {
	var s float32
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}
