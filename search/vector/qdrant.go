package vector

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/qdrant/go-client/qdrant"
)

// DefaultCollection is the Qdrant collection of the system contract.
const DefaultCollection = "mcp_unified_search"

// DefaultQdrantPort is Qdrant's gRPC port, used when the URL names none.
const DefaultQdrantPort = 6334

// Payload keys in Qdrant. The first five are the contract's "extended payload
// fields"; the others let a hit be ranked without a database round trip.
const (
	keyToolName         = "tool_name"
	keyOriginalName     = "original_name"
	keySourceServerID   = "source_server_id"
	keySourceServerName = "source_server_name"
	keyIsExternal       = "is_external"
	keyIsClassified     = "is_classified"
	keySkillIDs         = "skill_ids"
	keyPrimarySkillID   = "primary_skill_id"
)

// Collection metadata keys recording what the collection was built for, so a
// restart with another embedder is detected.
const (
	metaModel     = "embedding_model"
	metaDimension = "embedding_dimension"
	metaSchema    = "mcpgw_payload_schema"
)

// payloadSchemaVersion is bumped when the payload layout changes, which forces
// a rebuild of collections built by older code.
const payloadSchemaVersion = 1

// cleanupTimeout bounds the removal of a half-made collection after a failed
// Ensure, which must run even when the caller's context has ended.
const cleanupTimeout = 10 * time.Second

// maxUpsertBytes bounds the vector bytes of one Upsert request so a full
// rebuild never hits a gRPC message size limit.
const maxUpsertBytes = 2 << 20

// fieldIndex is a payload index the filters rely on.
type fieldIndex struct {
	key       string
	fieldType qdrant.FieldType         // as requested by CreateFieldIndex
	schema    qdrant.PayloadSchemaType // as reported by GetCollectionInfo
}

// fieldIndexes lists the payload indexes of the collection.
func fieldIndexes() [4]fieldIndex {
	return [...]fieldIndex{
		{keySourceServerID, qdrant.FieldType_FieldTypeKeyword, qdrant.PayloadSchemaType_Keyword},
		{keySourceServerName, qdrant.FieldType_FieldTypeKeyword, qdrant.PayloadSchemaType_Keyword},
		{keyIsExternal, qdrant.FieldType_FieldTypeBool, qdrant.PayloadSchemaType_Bool},
		{keyIsClassified, qdrant.FieldType_FieldTypeBool, qdrant.PayloadSchemaType_Bool},
	}
}

// Config locates the Qdrant server behind NewQdrant.
type Config struct {
	// URL is the gRPC endpoint: "host:port", "host" (port 6334), or a URL
	// such as QDRANT_URL's "http://localhost:6334"; an https URL turns TLS on.
	// Note that Qdrant's REST port (6333) does not speak gRPC.
	URL string
	// APIKey is sent as the "api-key" header when not empty. Use TLS with it:
	// without TLS it travels in clear text.
	APIKey string
	// Collection defaults to DefaultCollection.
	Collection string
	// UseTLS connects with TLS (system roots, TLS 1.3).
	UseTLS bool
}

// Qdrant is the Index backed by a Qdrant collection over gRPC. It exists for
// deployments that share one vector store between aggregator instances or keep
// it across restarts. The collection uses cosine distance with the embedder's
// dimension, keyword indexes on source_server_id and source_server_name and
// bool indexes on is_external and is_classified; the embedding model is kept
// in the collection metadata. Point ids are the tools' database ids.
type Qdrant struct {
	client     *qdrant.Client
	collection string
	endpoint   string

	// mu is held for reading by data calls (for the whole RPC, so the spec
	// they validated against cannot change under them) and for writing by
	// Ensure and Close.
	mu      sync.RWMutex
	spec    Spec
	ensured bool
	closed  bool
}

var _ Index = (*Qdrant)(nil)

// NewQdrant connects to Qdrant and checks it answers a health check within
// ctx. It does not touch the collection: call Ensure.
func NewQdrant(ctx context.Context, cfg Config) (*Qdrant, error) {
	host, port, useTLS, err := parseEndpoint(cfg.URL, cfg.UseTLS)
	if err != nil {
		return nil, fmt.Errorf("vector: qdrant config: %w", ctxCause(ctx, err))
	}
	collection := cfg.Collection
	if collection == "" {
		collection = DefaultCollection
	}
	endpoint := net.JoinHostPort(host, strconv.Itoa(port))
	client, err := qdrant.NewClient(&qdrant.Config{
		Host:   host,
		Port:   port,
		APIKey: cfg.APIKey,
		UseTLS: useTLS,
		// The built-in check runs a health check on a background context
		// with a one-minute timeout; ours below honours ctx instead.
		SkipCompatibilityCheck: true,
	})
	if err != nil {
		return nil, fmt.Errorf("vector: qdrant client for %s: %w", endpoint, ctxCause(ctx, err))
	}
	if _, err := client.HealthCheck(ctx); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("vector: qdrant at %s unreachable: %w", endpoint, ctxCause(ctx, err))
	}
	return &Qdrant{client: client, collection: collection, endpoint: endpoint}, nil
}

// parseEndpoint turns Config.URL into a gRPC host and port.
func parseEndpoint(raw string, useTLS bool) (host string, port int, tls bool, err error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return "", 0, false, errors.New("empty qdrant URL")
	}
	tls = useTLS
	var u *url.URL
	if strings.Contains(raw, "://") {
		u, err = url.Parse(raw)
		if err != nil {
			return "", 0, false, fmt.Errorf("qdrant URL %q: %w", raw, err)
		}
		switch strings.ToLower(u.Scheme) {
		case "http", "grpc":
		case "https", "grpcs":
			tls = true
		default:
			return "", 0, false, fmt.Errorf("qdrant URL %q: unsupported scheme %q", raw, u.Scheme)
		}
		if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil {
			return "", 0, false, fmt.Errorf("qdrant URL %q: only scheme, host and port are allowed", raw)
		}
	} else {
		u, err = url.Parse("//" + raw)
		if err != nil {
			return "", 0, false, fmt.Errorf("qdrant address %q: %w", raw, err)
		}
		if u.Path != "" || u.RawQuery != "" || u.User != nil {
			return "", 0, false, fmt.Errorf("qdrant address %q: expected host[:port]", raw)
		}
	}
	host = u.Hostname()
	if host == "" {
		return "", 0, false, fmt.Errorf("qdrant URL %q: no host", raw)
	}
	port = DefaultQdrantPort
	if p := u.Port(); p != "" {
		port, err = strconv.Atoi(p)
		if err != nil || port < 1 || port > 65535 {
			return "", 0, false, fmt.Errorf("qdrant URL %q: bad port %q", raw, p)
		}
	}
	return host, port, tls, nil
}

// Ensure implements Index. An existing collection is kept when its single
// unnamed vector has the spec's size and cosine distance and its metadata
// names the spec's model and the current payload schema; otherwise it is
// deleted and recreated empty, with its payload indexes, and rebuild is true.
//
// Ensure blocks the index's other calls while it runs. Two processes
// ensuring the same collection at the same moment may both recreate it; run
// Ensure from one place.
func (q *Qdrant) Ensure(ctx context.Context, spec Spec) (bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false, fmt.Errorf("vector: qdrant ensure %q: %w", q.collection, ErrClosed)
	}
	// Until this call succeeds, refuse data calls: the collection may hold,
	// or soon stop holding, vectors of another embedder.
	q.ensured = false
	if err := spec.Validate(); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("vector: qdrant ensure %q: %w", q.collection, err)
	}
	exists, err := q.client.CollectionExists(ctx, q.collection)
	if err != nil {
		return false, fmt.Errorf("vector: qdrant ensure %q: %w", q.collection, ctxCause(ctx, err))
	}
	if exists {
		info, err := q.client.GetCollectionInfo(ctx, q.collection)
		if err != nil {
			return false, fmt.Errorf("vector: qdrant ensure %q: %w", q.collection, ctxCause(ctx, err))
		}
		if collectionMatches(info, spec) {
			if err := q.createFieldIndexes(ctx, info.GetPayloadSchema()); err != nil {
				return false, err
			}
			q.spec, q.ensured = spec, true
			return false, nil
		}
		if err := q.client.DeleteCollection(ctx, q.collection); err != nil {
			return false, fmt.Errorf("vector: qdrant ensure %q: drop collection built for another embedder: %w",
				q.collection, ctxCause(ctx, err))
		}
	}
	err = q.client.CreateCollection(ctx, &qdrant.CreateCollection{
		CollectionName: q.collection,
		VectorsConfig: qdrant.NewVectorsConfig(&qdrant.VectorParams{
			Size:     uint64(spec.Dimension),
			Distance: qdrant.Distance_Cosine,
		}),
		Metadata: map[string]*qdrant.Value{
			metaModel:     qdrant.NewValueString(spec.Model),
			metaDimension: qdrant.NewValueInt(int64(spec.Dimension)),
			metaSchema:    qdrant.NewValueInt(payloadSchemaVersion),
		},
	})
	if err != nil {
		return false, fmt.Errorf("vector: qdrant ensure %q: create collection: %w", q.collection, ctxCause(ctx, err))
	}
	if err := q.createFieldIndexes(ctx, nil); err != nil {
		// Drop the half-made collection so the next Ensure recreates it and
		// reports rebuild, rather than finding it "matching" and empty.
		// It runs even if ctx has ended, bounded by cleanupTimeout.
		cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		_ = q.client.DeleteCollection(cleanup, q.collection)
		return false, err
	}
	q.spec, q.ensured = spec, true
	return true, nil
}

// collectionMatches reports whether an existing collection holds vectors of
// spec with the current payload layout.
func collectionMatches(info *qdrant.CollectionInfo, spec Spec) bool {
	cfg := info.GetConfig()
	params := cfg.GetParams().GetVectorsConfig().GetParams()
	if params == nil || params.GetSize() != uint64(spec.Dimension) || params.GetDistance() != qdrant.Distance_Cosine {
		return false
	}
	md := cfg.GetMetadata()
	return md[metaModel].GetStringValue() == spec.Model &&
		md[metaDimension].GetIntegerValue() == int64(spec.Dimension) &&
		md[metaSchema].GetIntegerValue() == payloadSchemaVersion
}

// createFieldIndexes creates the payload indexes missing from have.
func (q *Qdrant) createFieldIndexes(ctx context.Context, have map[string]*qdrant.PayloadSchemaInfo) error {
	for _, fi := range fieldIndexes() {
		if have[fi.key].GetDataType() == fi.schema {
			continue
		}
		res, err := q.client.CreateFieldIndex(ctx, &qdrant.CreateFieldIndexCollection{
			CollectionName: q.collection,
			Wait:           qdrant.PtrOf(true),
			FieldName:      fi.key,
			FieldType:      qdrant.PtrOf(fi.fieldType),
		})
		if err == nil {
			err = checkCompleted(res)
		}
		if err != nil {
			return fmt.Errorf("vector: qdrant ensure %q: payload index on %s: %w", q.collection, fi.key, ctxCause(ctx, err))
		}
	}
	return nil
}

// checkCompleted turns an update that was not applied (with wait=true the
// server answers Completed) into an error.
func checkCompleted(res *qdrant.UpdateResult) error {
	if st := res.GetStatus(); st != qdrant.UpdateStatus_Completed {
		return fmt.Errorf("update status %s, want Completed", st)
	}
	return nil
}

// ready reports why data calls cannot run; the caller holds mu.
func (q *Qdrant) ready(op string) error {
	if q.closed {
		return fmt.Errorf("vector: qdrant %s: %w", op, ErrClosed)
	}
	if !q.ensured {
		return fmt.Errorf("vector: qdrant %s: %w", op, ErrNotEnsured)
	}
	return nil
}

// Upsert implements Index. The batch is validated first, then sent in
// requests of at most about 2 MiB of vectors, each with wait=true. Invalid
// points never reach the server; if the server or network fails part-way,
// earlier requests stay applied (upserts are idempotent: retry the call).
func (q *Qdrant) Upsert(ctx context.Context, points []Point) error {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if err := q.ready("upsert"); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("vector: qdrant upsert: %w", ctxCause(ctx, err))
	}
	dim := q.spec.Dimension
	if err := validatePoints(points, dim); err != nil {
		return fmt.Errorf("vector: qdrant upsert into %q: %w", q.collection, ctxCause(ctx, err))
	}
	chunk := max(1, maxUpsertBytes/(4*dim))
	for start := 0; start < len(points); start += chunk {
		batch := points[start:min(start+chunk, len(points))]
		structs := make([]*qdrant.PointStruct, len(batch))
		for i := range batch {
			unit := make([]float32, dim)
			normalizeInto(unit, batch[i].Vector)
			structs[i] = &qdrant.PointStruct{
				Id:      qdrant.NewIDNum(batch[i].ID),
				Vectors: qdrant.NewVectorsDense(unit),
				Payload: toQdrantPayload(batch[i].Payload),
			}
		}
		res, err := q.client.Upsert(ctx, &qdrant.UpsertPoints{
			CollectionName: q.collection,
			Wait:           qdrant.PtrOf(true),
			Points:         structs,
		})
		if err == nil {
			err = checkCompleted(res)
		}
		if err != nil {
			return fmt.Errorf("vector: qdrant upsert into %q: points %d-%d of %d: %w",
				q.collection, start, start+len(batch)-1, len(points), ctxCause(ctx, err))
		}
	}
	return nil
}

// Delete implements Index.
func (q *Qdrant) Delete(ctx context.Context, ids []uint64) error {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if err := q.ready("delete"); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("vector: qdrant delete: %w", ctxCause(ctx, err))
	}
	if len(ids) == 0 {
		return nil
	}
	pids := make([]*qdrant.PointId, len(ids))
	for i, id := range ids {
		pids[i] = qdrant.NewIDNum(id)
	}
	res, err := q.client.Delete(ctx, &qdrant.DeletePoints{
		CollectionName: q.collection,
		Wait:           qdrant.PtrOf(true),
		Points:         qdrant.NewPointsSelectorIDs(pids),
	})
	if err == nil {
		err = checkCompleted(res)
	}
	if err != nil {
		return fmt.Errorf("vector: qdrant delete %d points from %q: %w", len(ids), q.collection, ctxCause(ctx, err))
	}
	return nil
}

// DeleteByServer implements Index with a delete-by-filter on the indexed
// source_server_id field.
func (q *Qdrant) DeleteByServer(ctx context.Context, serverID string) error {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if err := q.ready("delete by server"); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("vector: qdrant delete by server: %w", ctxCause(ctx, err))
	}
	res, err := q.client.Delete(ctx, &qdrant.DeletePoints{
		CollectionName: q.collection,
		Wait:           qdrant.PtrOf(true),
		Points: qdrant.NewPointsSelectorFilter(&qdrant.Filter{
			Must: []*qdrant.Condition{qdrant.NewMatchKeyword(keySourceServerID, serverID)},
		}),
	})
	if err == nil {
		err = checkCompleted(res)
	}
	if err != nil {
		return fmt.Errorf("vector: qdrant delete server %q from %q: %w", serverID, q.collection, ctxCause(ctx, err))
	}
	return nil
}

// SetPayload implements Index. It first checks the point exists (Qdrant's
// own answer for a missing point is an error whose code is shared with "no
// such collection"), then sets every payload key; keys this package does not
// own are left alone.
func (q *Qdrant) SetPayload(ctx context.Context, id uint64, payload Payload) error {
	if err := payload.validate(); err != nil {
		return fmt.Errorf("vector: qdrant set payload of %d: %w", id, ctxCause(ctx, err))
	}
	q.mu.RLock()
	defer q.mu.RUnlock()
	if err := q.ready("set payload"); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("vector: qdrant set payload: %w", ctxCause(ctx, err))
	}
	found, err := q.client.Get(ctx, &qdrant.GetPoints{
		CollectionName: q.collection,
		Ids:            []*qdrant.PointId{qdrant.NewIDNum(id)},
		WithPayload:    qdrant.NewWithPayload(false),
		WithVectors:    qdrant.NewWithVectors(false),
	})
	if err != nil {
		return fmt.Errorf("vector: qdrant set payload of %d in %q: %w", id, q.collection, ctxCause(ctx, err))
	}
	if len(found) == 0 {
		return fmt.Errorf("vector: qdrant set payload of %d in %q: %w", id, q.collection, ErrNotFound)
	}
	res, err := q.client.SetPayload(ctx, &qdrant.SetPayloadPoints{
		CollectionName: q.collection,
		Wait:           qdrant.PtrOf(true),
		Payload:        toQdrantPayload(payload),
		PointsSelector: qdrant.NewPointsSelector(qdrant.NewIDNum(id)),
	})
	if err == nil {
		err = checkCompleted(res)
	}
	if err != nil {
		return fmt.Errorf("vector: qdrant set payload of %d in %q: %w", id, q.collection, ctxCause(ctx, err))
	}
	return nil
}

// Search implements Index with a Query (nearest to the normalised query
// vector) filtered on the indexed payload fields.
func (q *Qdrant) Search(ctx context.Context, vector []float32, filter Filter, limit int) ([]Hit, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("vector: qdrant search: limit %d: %w", limit, ErrInvalidArgument)
	}
	q.mu.RLock()
	defer q.mu.RUnlock()
	if err := q.ready("search"); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("vector: qdrant search: %w", ctxCause(ctx, err))
	}
	if err := ValidateVector(vector, q.spec.Dimension); err != nil {
		return nil, fmt.Errorf("vector: qdrant search: query: %w", ctxCause(ctx, err))
	}
	unit := make([]float32, len(vector))
	normalizeInto(unit, vector)
	ask := limit
	if filter.Keep != nil {
		ask = limit * keepOversample
	}
	res, err := q.client.Query(ctx, &qdrant.QueryPoints{
		CollectionName: q.collection,
		Query:          qdrant.NewQueryDense(unit),
		Filter:         toQdrantFilter(filter),
		Limit:          qdrant.PtrOf(uint64(ask)),
		WithPayload:    qdrant.NewWithPayload(true),
	})
	if err != nil {
		return nil, fmt.Errorf("vector: qdrant search %q: %w", q.collection, ctxCause(ctx, err))
	}
	hits := make([]Hit, 0, len(res))
	for _, p := range res {
		num, ok := p.GetId().GetPointIdOptions().(*qdrant.PointId_Num)
		if !ok {
			return nil, fmt.Errorf("vector: qdrant search %q: point %v has no numeric id; the collection holds foreign points",
				q.collection, p.GetId())
		}
		if filter.Keep != nil && !filter.Keep(num.Num) {
			continue
		}
		hits = append(hits, Hit{ID: num.Num, Score: p.GetScore(), Payload: fromQdrantPayload(p.GetPayload())})
	}
	// Qdrant orders by score only; break ties by ID like the memory index.
	sort.SliceStable(hits, func(i, j int) bool {
		if hits[i].Score != hits[j].Score {
			return hits[i].Score > hits[j].Score
		}
		return hits[i].ID < hits[j].ID
	})
	if len(hits) > limit {
		hits = hits[:limit]
	}
	return hits, nil
}

// Count implements Index with an exact count.
func (q *Qdrant) Count(ctx context.Context) (int, error) {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if err := q.ready("count"); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("vector: qdrant count: %w", ctxCause(ctx, err))
	}
	n, err := q.client.Count(ctx, &qdrant.CountPoints{CollectionName: q.collection, Exact: qdrant.PtrOf(true)})
	if err != nil {
		return 0, fmt.Errorf("vector: qdrant count %q: %w", q.collection, ctxCause(ctx, err))
	}
	return int(n), nil
}

// Close implements Index: it waits for calls in flight and closes the gRPC
// connections. The collection stays on the server.
func (q *Qdrant) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil
	}
	q.closed = true
	if err := q.client.Close(); err != nil {
		return fmt.Errorf("vector: qdrant close connection to %s: %w", q.endpoint, err)
	}
	return nil
}

// toQdrantFilter translates a Filter into Qdrant conditions: one "must" per
// set field, "match any" for the string lists. nil means no filter.
func toQdrantFilter(f Filter) *qdrant.Filter {
	if f.payloadEmpty() {
		return nil
	}
	var must []*qdrant.Condition
	if len(f.ServerIDs) > 0 {
		must = append(must, qdrant.NewMatchKeywords(keySourceServerID, f.ServerIDs...))
	}
	if len(f.ServerNames) > 0 {
		must = append(must, qdrant.NewMatchKeywords(keySourceServerName, f.ServerNames...))
	}
	if f.IsExternal != nil {
		must = append(must, qdrant.NewMatchBool(keyIsExternal, *f.IsExternal))
	}
	if f.Classified != nil {
		must = append(must, qdrant.NewMatchBool(keyIsClassified, *f.Classified))
	}
	return &qdrant.Filter{Must: must}
}

// toQdrantPayload maps a Payload to Qdrant values; every key is always set so
// that SetPayload replaces all of them.
func toQdrantPayload(p Payload) map[string]*qdrant.Value {
	skills := make([]*qdrant.Value, len(p.SkillIDs))
	for i, s := range p.SkillIDs {
		skills[i] = qdrant.NewValueString(s)
	}
	return map[string]*qdrant.Value{
		keyToolName:         qdrant.NewValueString(p.ToolName),
		keyOriginalName:     qdrant.NewValueString(p.OriginalName),
		keySourceServerID:   qdrant.NewValueString(p.SourceServerID),
		keySourceServerName: qdrant.NewValueString(p.SourceServerName),
		keyIsExternal:       qdrant.NewValueBool(p.IsExternal),
		keyIsClassified:     qdrant.NewValueBool(p.IsClassified),
		keySkillIDs:         qdrant.NewValueFromList(skills...),
		keyPrimarySkillID:   qdrant.NewValueString(p.PrimarySkillID),
	}
}

// fromQdrantPayload is the inverse of toQdrantPayload; missing keys read as
// zero values.
func fromQdrantPayload(m map[string]*qdrant.Value) Payload {
	p := Payload{
		ToolName:         m[keyToolName].GetStringValue(),
		OriginalName:     m[keyOriginalName].GetStringValue(),
		SourceServerID:   m[keySourceServerID].GetStringValue(),
		SourceServerName: m[keySourceServerName].GetStringValue(),
		IsExternal:       m[keyIsExternal].GetBoolValue(),
		IsClassified:     m[keyIsClassified].GetBoolValue(),
		PrimarySkillID:   m[keyPrimarySkillID].GetStringValue(),
	}
	if vs := m[keySkillIDs].GetListValue().GetValues(); len(vs) > 0 {
		p.SkillIDs = make([]string, 0, len(vs))
		for _, v := range vs {
			p.SkillIDs = append(p.SkillIDs, v.GetStringValue())
		}
	}
	return p
}

// ctxCause makes an RPC error that happened because ctx ended match
// context.Canceled or context.DeadlineExceeded with errors.Is, as gRPC status
// errors do not.
func ctxCause(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w: %w", cerr, err)
	}
	return err
}
