package vector

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/x448/float16"
)

// Memory is the default, in-process Index: exact cosine search by brute force
// over unit vectors kept in chunks of rows. It exists because at the
// scale of an aggregator (about 10,000 tools) an exact scan takes a few
// milliseconds and needs no external service; its content is not persisted and
// is rebuilt from the store at start.
//
// Rows are stored in IEEE 754 half precision (2 bytes a component instead of
// 4): the vectors are most of the index's memory, and rounding a unit vector's
// components to 11 significant bits moves a cosine score by less than
// halfPrecisionError, far below the gaps that order search results. Queries
// stay in single precision.
type Memory struct {
	mu       sync.RWMutex
	spec     Spec // what the stored vectors were made for
	ensured  bool // the last Ensure succeeded: data calls may run
	closed   bool
	chunks   [][]uint16 // len(ids) rows of spec.Dimension unit-length half-precision components, chunkRows rows a chunk
	ids      []uint64
	payloads []Payload
	pos      map[uint64]int // ID -> row
	dot      func(q []float32, row []uint16) float32
	shared   payloadStrings
}

// payloadStrings holds one copy of each server id, server name, skill id and skill list the payloads name, so that
// 10,000 payloads do not hold 10,000 copies of the same few dozen (about 150 bytes a payload, in small objects).
// It forgets everything once it holds more entries than there are rows plus sharedSlack: entries of servers and
// skills that are gone would otherwise pile up; payloads already stored keep their strings.
type payloadStrings struct {
	strs map[string]string
	sets map[string][]string
}

// sharedSlack is how many entries payloadStrings may hold beyond one per row before it starts afresh.
const sharedSlack = 1024

// keep returns a copy of p that shares no memory with the caller's and shares its repeated strings with the other
// payloads; rows is the number of rows held.
func (ps *payloadStrings) keep(p Payload, rows int) Payload {
	if ps.strs == nil || len(ps.strs)+len(ps.sets) > rows+sharedSlack {
		ps.strs, ps.sets = map[string]string{}, map[string][]string{}
	}
	str := func(s string) string {
		if v, ok := ps.strs[s]; ok {
			return v
		}
		s = strings.Clone(s)
		ps.strs[s] = s
		return s
	}
	p.ToolName = strings.Clone(p.ToolName)
	if strings.HasSuffix(p.ToolName, p.OriginalName) {
		p.OriginalName = p.ToolName[len(p.ToolName)-len(p.OriginalName):]
	} else {
		p.OriginalName = strings.Clone(p.OriginalName)
	}
	p.SourceServerID, p.SourceServerName, p.PrimarySkillID = str(p.SourceServerID), str(p.SourceServerName), str(p.PrimarySkillID)
	if len(p.SkillIDs) > 0 {
		key := strings.Join(p.SkillIDs, "\x00")
		set, ok := ps.sets[key]
		if !ok {
			set = make([]string, len(p.SkillIDs))
			for i, id := range p.SkillIDs {
				set[i] = str(id)
			}
			ps.sets[key] = set
		}
		p.SkillIDs = set
	} else {
		p.SkillIDs = nil // as clone leaves an empty list
	}
	return p
}

// halfPrecisionError bounds how far a score of the in-process index may be
// from the exact cosine of the vectors given: each stored component is
// rounded to half precision (relative error at most 2^-11), and the scores
// are sums of at most Dimension such products of unit vectors.
const halfPrecisionError = 1e-3

// NewMemory returns an empty in-process index; call Ensure before use.
func NewMemory() *Memory {
	return &Memory{pos: make(map[uint64]int), dot: dotFunc()}
}

var _ Index = (*Memory)(nil)

// chunkRows is how many rows one allocation holds: growing the index never copies the rows already stored nor
// leaves more than one chunk unused (one contiguous slice grown by append held up to 25 % more than its rows, and
// twice its size while it was copied).
const chunkRows = 256

// row returns row r's vector (half-precision bits).
func (m *Memory) row(r int) []uint16 {
	dim := m.spec.Dimension
	at := (r % chunkRows) * dim
	return m.chunks[r/chunkRows][at : at+dim : at+dim]
}

// parallelMinWork is the number of multiply-adds (rows x dimension) above
// which a search is split across goroutines; below it the goroutine start-up
// costs more than it saves.
const parallelMinWork = 1 << 20

// ctxCheckRows is how many rows a search scans between context checks.
const ctxCheckRows = 2048

// Ensure implements Index. The in-process index remembers the last spec: the
// first call and any call with a different spec empty it and report rebuild.
func (m *Memory) Ensure(ctx context.Context, spec Spec) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false, fmt.Errorf("vector: memory ensure: %w", ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		m.ensured = false
		return false, fmt.Errorf("vector: memory ensure: %w", err)
	}
	if err := spec.Validate(); err != nil {
		m.ensured = false
		return false, err
	}
	if m.spec == spec {
		// Same embedder as the stored vectors (possibly after a failed
		// Ensure in between): keep them.
		m.ensured = true
		return false, nil
	}
	m.spec = spec
	m.ensured = true
	m.chunks = nil
	m.ids = nil
	m.payloads = nil
	m.pos = make(map[uint64]int)
	return true, nil
}

// ready reports why the index cannot serve data calls; the caller holds mu.
func (m *Memory) ready(op string) error {
	if m.closed {
		return fmt.Errorf("vector: memory %s: %w", op, ErrClosed)
	}
	if !m.ensured {
		return fmt.Errorf("vector: memory %s: %w", op, ErrNotEnsured)
	}
	return nil
}

// currentSpec returns the ensured spec, or an error when not ready.
func (m *Memory) currentSpec(op string) (Spec, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if err := m.ready(op); err != nil {
		return Spec{}, err
	}
	return m.spec, nil
}

// Upsert implements Index. Vectors are validated and normalised outside the
// lock; the batch is then applied atomically.
func (m *Memory) Upsert(ctx context.Context, points []Point) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("vector: memory upsert: %w", err)
	}
	spec, err := m.currentSpec("upsert")
	if err != nil {
		return err
	}
	dim := spec.Dimension
	if err := validatePoints(points, dim); err != nil {
		return fmt.Errorf("vector: memory upsert: %w", err)
	}
	rows := make([]uint16, len(points)*dim)
	unit := make([]float32, dim)
	for i := range points {
		normalizeInto(unit, points[i].Vector)
		toHalf(rows[i*dim:(i+1)*dim], unit)
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.ready("upsert"); err != nil {
		return err
	}
	if m.spec != spec {
		// Ensure switched model or dimension while we were normalising.
		return fmt.Errorf("vector: memory upsert: vectors for %q/%d, index now %q/%d: %w",
			spec.Model, spec.Dimension, m.spec.Model, m.spec.Dimension, ErrSpecChanged)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("vector: memory upsert: %w", err)
	}
	for i := range points {
		row := rows[i*dim : (i+1)*dim]
		id := points[i].ID
		if at, ok := m.pos[id]; ok {
			copy(m.row(at), row)
			m.payloads[at] = m.shared.keep(points[i].Payload, len(m.ids))
			continue
		}
		m.pos[id] = len(m.ids)
		m.ids = append(m.ids, id)
		m.payloads = append(m.payloads, m.shared.keep(points[i].Payload, len(m.ids)))
		if r := len(m.ids) - 1; r%chunkRows == 0 {
			m.chunks = append(m.chunks, make([]uint16, 0, chunkRows*dim))
		}
		c := len(m.chunks) - 1
		m.chunks[c] = append(m.chunks[c], row...)
	}
	return nil
}

// EachVector calls fn with the stored (unit-length, half-precision) vector of each of ids that the index holds,
// in the order given; unknown ids are skipped. fn must not keep v nor call the index: v is one buffer, refilled
// from the index's own rows under its read lock for each id, so that a caller needing many vectors (the skill
// centroids) keeps no copy of them.
func (m *Memory) EachVector(ids []uint64, fn func(id uint64, v []float32)) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if err := m.ready("vectors"); err != nil {
		return err
	}
	v := make([]float32, m.spec.Dimension)
	for _, id := range ids {
		if at, ok := m.pos[id]; ok {
			fromHalf(v, m.row(at))
			fn(id, v)
		}
	}
	return nil
}

// toHalf rounds src to half precision (to nearest, ties to even) into dst.
func toHalf(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, x := range src {
		dst[i] = float16.Fromfloat32(x).Bits()
	}
}

// fromHalf widens the half-precision src into dst, exactly.
func fromHalf(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = float16.Frombits(h).Float32()
	}
}

// removeAt deletes row at by moving the last row into its place; the caller
// holds mu for writing.
func (m *Memory) removeAt(at int) {
	dim := m.spec.Dimension
	last := len(m.ids) - 1
	delete(m.pos, m.ids[at])
	if at != last {
		copy(m.row(at), m.row(last))
		m.ids[at] = m.ids[last]
		m.payloads[at] = m.payloads[last]
		m.pos[m.ids[at]] = at
	}
	m.payloads[last] = Payload{} // drop references for the garbage collector
	m.ids = m.ids[:last]
	m.payloads = m.payloads[:last]
	c := last / chunkRows
	if last%chunkRows == 0 {
		m.chunks[c] = nil
		m.chunks = m.chunks[:c]
	} else {
		m.chunks[c] = m.chunks[c][:(last%chunkRows)*dim]
	}
}

// Delete implements Index.
func (m *Memory) Delete(ctx context.Context, ids []uint64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("vector: memory delete: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.ready("delete"); err != nil {
		return err
	}
	for _, id := range ids {
		if at, ok := m.pos[id]; ok {
			m.removeAt(at)
		}
	}
	return nil
}

// DeleteByServer implements Index.
func (m *Memory) DeleteByServer(ctx context.Context, serverID string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("vector: memory delete by server %q: %w", serverID, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.ready("delete by server"); err != nil {
		return err
	}
	// Walk backwards so that the row moved into a hole was already checked.
	for at := len(m.ids) - 1; at >= 0; at-- {
		if m.payloads[at].SourceServerID == serverID {
			m.removeAt(at)
		}
	}
	return nil
}

// SetPayload implements Index.
func (m *Memory) SetPayload(ctx context.Context, id uint64, payload Payload) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("vector: memory set payload of %d: %w", id, err)
	}
	if err := payload.validate(); err != nil {
		return fmt.Errorf("vector: memory set payload of %d: %w", id, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.ready("set payload"); err != nil {
		return err
	}
	at, ok := m.pos[id]
	if !ok {
		return fmt.Errorf("vector: memory set payload of %d: %w", id, ErrNotFound)
	}
	m.payloads[at] = m.shared.keep(payload, len(m.ids))
	return nil
}

// Count implements Index.
func (m *Memory) Count(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("vector: memory count: %w", err)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if err := m.ready("count"); err != nil {
		return 0, err
	}
	return len(m.ids), nil
}

// Close implements Index; it drops the stored vectors.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.chunks, m.ids, m.payloads, m.pos = nil, nil, nil, nil
	return nil
}

// Search implements Index: an exact scan computing one dot product per stored
// unit vector, keeping the best limit rows in a small heap. Large scans are
// split across up to GOMAXPROCS goroutines.
func (m *Memory) Search(ctx context.Context, vector []float32, filter Filter, limit int) ([]Hit, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("vector: memory search: %w", err)
	}
	if limit <= 0 {
		return nil, fmt.Errorf("vector: memory search: limit %d: %w", limit, ErrInvalidArgument)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if err := m.ready("search"); err != nil {
		return nil, err
	}
	dim := m.spec.Dimension
	if err := ValidateVector(vector, dim); err != nil {
		return nil, fmt.Errorf("vector: memory search: query: %w", err)
	}
	q := make([]float32, dim)
	normalizeInto(q, vector)

	n := len(m.ids)
	rows := scanRows{n: n}
	if !filter.empty() {
		// Evaluate the filter in its own cheap pass over the payloads: the
		// scan then knows how selective it is.
		rows.mask = make([]bool, n)
		for r := range n {
			if filter.matches(&m.payloads[r]) && (filter.Keep == nil || filter.Keep(m.ids[r])) {
				rows.mask[r] = true
				rows.matched++
			}
		}
		// Hopping over many rejected rows defeats the hardware prefetcher
		// (rows are kilobytes long), so when most rows match it is faster
		// to stream through all of them and drop the rejected scores.
		rows.stream = rows.matched*2 >= n
	}
	if rows.mask != nil && rows.matched == 0 {
		return []Hit{}, nil
	}
	workers := 1
	if n*dim >= parallelMinWork {
		workers = min(runtime.GOMAXPROCS(0), 8, n/ctxCheckRows+1)
	}
	var best []scored
	var err error
	if workers <= 1 {
		best, err = m.scan(ctx, q, &rows, limit, 0, n)
	} else {
		best, err = m.scanParallel(ctx, q, &rows, limit, workers)
	}
	if err != nil {
		return nil, fmt.Errorf("vector: memory search: %w", err)
	}
	sort.Slice(best, func(i, j int) bool { return better(best[i], best[j]) })
	hits := make([]Hit, len(best))
	for i, s := range best {
		hits[i] = Hit{ID: s.id, Score: s.score, Payload: m.payloads[s.row].clone()}
	}
	return hits, nil
}

// scanRows says which rows a search considers.
type scanRows struct {
	n       int
	mask    []bool // nil: every row; else the rows that pass the filter
	matched int    // rows set in mask
	stream  bool   // compute every row's score, keep only masked ones
}

// scanParallel splits rows [0, n) into workers contiguous ranges and merges
// their top-k lists. The caller holds mu for reading, which the goroutines
// rely on.
func (m *Memory) scanParallel(ctx context.Context, q []float32, rows *scanRows, limit, workers int) ([]scored, error) {
	type part struct {
		best []scored
		err  error
	}
	parts := make([]part, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*rows.n/workers, (w+1)*rows.n/workers
		wg.Go(func() {
			parts[w].best, parts[w].err = m.scan(ctx, q, rows, limit, lo, hi)
		})
	}
	wg.Wait()
	h := topK{limit: limit}
	for _, p := range parts {
		if p.err != nil {
			return nil, p.err
		}
		for _, s := range p.best {
			h.offer(s)
		}
	}
	return h.items, nil
}

// scan returns the best limit rows of [lo, hi) (unordered).
func (m *Memory) scan(ctx context.Context, q []float32, rows *scanRows, limit, lo, hi int) ([]scored, error) {
	h := topK{limit: limit, items: make([]scored, 0, min(limit, hi-lo))}
	for r := lo; r < hi; r++ {
		if (r-lo)%ctxCheckRows == ctxCheckRows-1 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		if rows.mask != nil && !rows.stream && !rows.mask[r] {
			continue
		}
		s := m.dot(q, m.row(r))
		if rows.mask != nil && !rows.mask[r] {
			continue
		}
		h.offer(scored{score: s, id: m.ids[r], row: r})
	}
	return h.items, nil
}

// dotGeneric is the portable inner product of a single-precision query and
// an equally long half-precision row, unrolled with four independent
// accumulators so the CPU can overlap the multiply-adds.
func dotGeneric(a []float32, b []uint16) float32 {
	b = b[:len(a)]
	h := func(x uint16) float32 { return float16.Frombits(x).Float32() }
	var s0, s1, s2, s3 float32
	for len(a) >= 8 {
		s0 += a[0]*h(b[0]) + a[4]*h(b[4])
		s1 += a[1]*h(b[1]) + a[5]*h(b[5])
		s2 += a[2]*h(b[2]) + a[6]*h(b[6])
		s3 += a[3]*h(b[3]) + a[7]*h(b[7])
		a, b = a[8:], b[8:]
	}
	for i := range a {
		s0 += a[i] * h(b[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// scored is a candidate hit during a scan.
type scored struct {
	score float32
	id    uint64
	row   int
}

// better orders hits: higher score first, then lower ID, so results are
// deterministic when scores tie.
func better(a, b scored) bool {
	if a.score != b.score {
		return a.score > b.score
	}
	return a.id < b.id
}

// topK keeps the best limit candidates in a min-heap whose root is the worst
// kept one, so most rows are rejected with a single comparison.
type topK struct {
	limit int
	items []scored
}

func (h *topK) offer(s scored) {
	if len(h.items) < h.limit {
		h.items = append(h.items, s)
		h.up(len(h.items) - 1)
		return
	}
	if !better(s, h.items[0]) {
		return
	}
	h.items[0] = s
	h.down(0)
}

func (h *topK) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !better(h.items[parent], h.items[i]) {
			break
		}
		h.items[parent], h.items[i] = h.items[i], h.items[parent]
		i = parent
	}
}

func (h *topK) down(i int) {
	n := len(h.items)
	for {
		worst := i
		if l := 2*i + 1; l < n && better(h.items[worst], h.items[l]) {
			worst = l
		}
		if r := 2*i + 2; r < n && better(h.items[worst], h.items[r]) {
			worst = r
		}
		if worst == i {
			return
		}
		h.items[i], h.items[worst] = h.items[worst], h.items[i]
		i = worst
	}
}
