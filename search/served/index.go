package served

import (
	"context"
	"errors"
	"hash/maphash"
	"log/slog"
	"slices"
	"strings"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/search"
	"github.com/mcpgw/aggregator/search/classify"
	"github.com/mcpgw/aggregator/search/toolsearch"
	"github.com/mcpgw/aggregator/search/vector"
)

// tool is what the index remembers of a tool to index only what changed. Its hash is a number and its server id
// and skill list are shared with the other tools of the same server and skills: at 10,000 tools the index holds
// 10,000 of them.
type tool struct {
	server string
	hash   uint64 // of the definition hash and the name: a rename or a new definition is re-embedded; 0: not indexed
	skills []string
	vec    []float32 // only when the index cannot hand vectors back (see vector.VectorSource)
}

// Outcome is what Apply did with a delta.
type Outcome int

const (
	// Applied: the engine holds the server's served tools as of the delta's version.
	Applied Outcome = iota
	// Stale: the delta is not newer than the version applied; nothing changed.
	Stale
	// Gap: a delta before this one was missed; nothing changed, and the caller asks for every server's tools
	// again (a Full delta per server).
	Gap
)

// Index keeps a search engine equal to the served tools (BR-003, BR-008). It never reads the store: it applies
// the router's deltas: new and redefined or renamed tools are embedded, a classification updates a payload,
// removed tools and a removed server's are dropped, and the vectors of the skills whose tools changed are
// recomputed (an emptied skill falls back to its description). Not safe for concurrent use: one actor owns it.
type Index struct {
	engine *toolsearch.Searcher
	// skills is the classifier's skill space, also told the recomputed skill vectors (nil: none).
	skills *classify.SkillSpace
	logger *slog.Logger
	tools  map[int64]*tool
	// seed seeds tool.hash; skillSets holds each distinct skill list once (skillSet).
	seed      maphash.Seed
	skillSets map[string][]string
	// versions is the version applied per server.
	versions map[string]uint64
}

// NewIndex returns an empty index over engine. skills (may be nil) is a second skill space told the recomputed
// skill vectors (the built-in classifier's). Each Index hashes with its own seed: a new one re-embeds everything.
func NewIndex(engine *toolsearch.Searcher, skills *classify.SkillSpace, logger *slog.Logger) *Index {
	if logger == nil {
		logger = slog.Default()
	}
	return &Index{engine: engine, skills: skills, logger: logger, tools: map[int64]*tool{}, seed: maphash.MakeSeed(),
		versions: map[string]uint64{}}
}

// Len is how many tools the index holds.
func (x *Index) Len() int { return len(x.tools) }

// Version is the version of a server's served tools applied (0: none).
func (x *Index) Version(serverID string) uint64 { return x.versions[serverID] }

// Apply makes the engine hold a server's served tools as of the delta's version. An older delta than the one
// applied is Stale; a delta after a missed one is a Gap (a Full delta is never a gap).
func (x *Index) Apply(ctx context.Context, d *routing.ServedDelta) Outcome {
	return x.ApplyAll(ctx, []*routing.ServedDelta{d})[0]
}

// ApplyAll applies deltas in order, with the outcome of each as Apply would give it, but hands the engine the
// tools of a run of deltas of distinct servers in one upsert: the embedder gets one batch and the lexicon commits
// once (a commit rewrites the whole posting list, so ten servers' catalogues arriving together are ten times the
// work one at a time). A second delta of a server already in the run starts a new run, so every server's deltas
// still apply one after the other.
func (x *Index) ApplyAll(ctx context.Context, deltas []*routing.ServedDelta) []Outcome {
	out := make([]Outcome, len(deltas))
	var b batch
	for i, d := range deltas {
		have := x.versions[d.ServerID]
		if d.Version <= have {
			out[i] = Stale
			continue
		}
		if !d.Full && have > 0 && d.Version != have+1 {
			out[i] = Gap
			continue
		}
		if b.servers[d.ServerID] {
			x.flush(ctx, &b)
		}
		x.versions[d.ServerID] = d.Version
		x.stage(ctx, d, &b)
		out[i] = Applied
	}
	x.flush(ctx, &b)
	return out
}

// batch is what a run of deltas of distinct servers leaves to do once: the tools to embed and index, the tools
// gone, and the skills whose vectors move.
type batch struct {
	servers  map[string]bool
	docs     []search.Doc
	embedIDs []int64
	gone     []int64
	touched  map[string]bool
}

// hash is tool.hash of a stored tool (never 0).
func (x *Index) hash(t *persistence.Tool) uint64 {
	var h maphash.Hash
	h.SetSeed(x.seed)
	h.WriteString(t.DefinitionHash)
	h.WriteByte(0)
	h.WriteString(t.Name)
	return max(h.Sum64(), 1)
}

// skillSet returns the one shared copy of a skill list (the store gives every row its own).
func (x *Index) skillSet(ids []string) []string {
	if len(ids) == 0 {
		return nil
	}
	key := strings.Join(ids, "\x00")
	if set, ok := x.skillSets[key]; ok {
		return set
	}
	if x.skillSets == nil {
		x.skillSets = map[string][]string{}
	}
	set := slices.Clone(ids)
	x.skillSets[key] = set
	return set
}

// stage takes one delta of a server's served tools into b (flush hands b to the engine). The index holds what
// clients are served: hidden and withheld tools left out, held ones with their approved text, overridden ones with
// the admin's description and exposed name (the router applied the curation).
func (x *Index) stage(ctx context.Context, d *routing.ServedDelta, b *batch) {
	id := d.ServerID
	if b.servers == nil {
		b.servers, b.touched = map[string]bool{}, map[string]bool{}
	}
	b.servers[id] = true
	present := map[int64]bool{}
	docs, embedIDs, touched := b.docs, b.embedIDs, b.touched
	for _, list := range [][]routing.ServedTool{d.Added, d.Changed} {
		for _, st := range list {
			t := st.Tool
			present[t.ID] = true
			old := x.tools[t.ID]
			known := old != nil
			if !known {
				old = &tool{}
			}
			hash := x.hash(t)
			payload := vector.Payload{SourceServerName: d.ServerName, IsExternal: t.IsExternal, IsClassified: t.IsClassified,
				SkillIDs: t.SkillIDs, PrimarySkillID: deref(t.PrimarySkillID)}
			if !known || old.hash != hash {
				docs = append(docs, Doc(id, st, payload))
				embedIDs = append(embedIDs, t.ID)
			} else if !slices.Equal(old.skills, t.SkillIDs) {
				// Only the classification changed: update the stored payload, no re-embedding.
				payload.ToolName, payload.OriginalName, payload.SourceServerID = t.Name, t.OriginalName, id
				if err := x.engine.Index().SetPayload(ctx, uint64(t.ID), payload); err != nil && !errors.Is(err, vector.ErrNotFound) {
					x.logger.Warn("indexer: update payload", "tool", t.Name, "error", err)
				}
			}
			if !slices.Equal(old.skills, t.SkillIDs) || old.hash != hash {
				for _, s := range old.skills {
					touched[s] = true
				}
				for _, s := range t.SkillIDs {
					touched[s] = true
				}
			}
			old.server, old.hash, old.skills = id, hash, x.skillSet(t.SkillIDs)
			x.tools[t.ID] = old
		}
	}
	b.docs, b.embedIDs = docs, embedIDs
	if d.Full {
		for tid, t := range x.tools {
			if t.server == id && !present[tid] {
				b.gone = append(b.gone, tid)
			}
		}
	} else {
		for _, tid := range d.Removed {
			if t := x.tools[tid]; t != nil && t.server == id {
				b.gone = append(b.gone, tid)
			}
		}
	}
}

// flush hands the engine what b staged, and empties it: the tools to index first (their vectors also feed the
// skill centroids), then the tools gone, then the skills' vectors.
func (x *Index) flush(ctx context.Context, b *batch) {
	if len(b.servers) == 0 {
		return
	}
	if len(b.docs) > 0 {
		// The engine embeds the tools. The in-process index gives their vectors back when a centroid is computed;
		// with another index they come back from this call and are kept.
		vecs, err := x.engine.Upsert(ctx, b.docs)
		if err != nil {
			x.logger.Error("indexer: index tools", "servers", len(b.servers), "tools", len(b.docs), "error", err)
		}
		for _, tid := range b.embedIDs {
			x.tools[tid].vec = vecs[tid]
			if err != nil {
				// Not indexed: forget the hash so that the next change of this server tries the tool again, and
				// keep it out of the skill centroids meanwhile.
				x.tools[tid].vec, x.tools[tid].hash = nil, 0
			}
		}
	}
	for _, tid := range b.gone {
		for _, s := range x.tools[tid].skills {
			b.touched[s] = true
		}
	}
	x.drop(ctx, b.gone)
	x.recomputeSkills(b.touched)
	*b = batch{}
}

// Doc is the search document of a served tool of a server: the served text, with the override's exposed name as
// the original name when there is one.
func Doc(serverID string, st routing.ServedTool, payload vector.Payload) search.Doc {
	t := st.Tool
	original := t.OriginalName
	if st.ExposedName != "" {
		original = st.ExposedName
	}
	return search.Doc{ID: t.ID, ServerID: serverID, Name: t.Name, OriginalName: original,
		Description: t.Description, InputSchema: t.InputSchema, Payload: payload}
}

// RemoveServer drops every tool of a removed server and forgets its version.
func (x *Index) RemoveServer(ctx context.Context, id string) {
	delete(x.versions, id)
	touched := map[string]bool{}
	var gone []int64
	for tid, t := range x.tools {
		if t.server == id {
			gone = append(gone, tid)
			for _, s := range t.skills {
				touched[s] = true
			}
		}
	}
	x.drop(ctx, gone)
	if err := x.engine.Index().DeleteByServer(ctx, id); err != nil {
		x.logger.Warn("indexer: delete server vectors", "server_id", id, "error", err)
	}
	x.recomputeSkills(touched)
}

func (x *Index) drop(ctx context.Context, ids []int64) {
	if len(ids) == 0 {
		return
	}
	if err := x.engine.Remove(ctx, ids); err != nil {
		x.logger.Error("indexer: remove tools", "error", err)
	}
	for _, id := range ids {
		delete(x.tools, id)
	}
}

// recomputeSkills moves each touched skill's vector to the centroid of its tools (with its description), or back
// to its description when it has none left.
func (x *Index) recomputeSkills(touched map[string]bool) {
	if len(touched) == 0 {
		return
	}
	space := x.engine.SkillSpace()
	sums := map[string][]float64{}
	add := func(skills []string, v []float32) {
		for _, s := range skills {
			if !touched[s] {
				continue
			}
			sum := sums[s]
			if sum == nil {
				desc, ok := space.DescriptionVector(s)
				if !ok {
					continue
				}
				sum = make([]float64, len(desc))
				for i, f := range desc {
					sum[i] = float64(f)
				}
				sums[s] = sum
			}
			for i := range min(len(sum), len(v)) {
				sum[i] += float64(v[i])
			}
		}
	}
	src, fromIndex := x.engine.Index().(vector.VectorSource)
	var ids []uint64
	for tid, t := range x.tools {
		if !hasTouched(t.skills, touched) || t.hash == 0 {
			continue // not a member of a touched skill, or not indexed
		}
		if fromIndex {
			ids = append(ids, uint64(tid))
		} else if t.vec != nil {
			add(t.skills, t.vec)
		}
	}
	if fromIndex && len(ids) > 0 {
		err := src.EachVector(ids, func(id uint64, v []float32) { add(x.tools[int64(id)].skills, v) })
		if err != nil {
			x.logger.Warn("indexer: read tool vectors for the skills", "error", err)
			return
		}
	}
	for s := range touched {
		if _, ok := space.DescriptionVector(s); !ok {
			continue
		}
		v := classify.UnitVector(sums[s]) // nil for a skill without tools: back to its description
		_ = space.SetSkillVector(s, v)
		if x.skills != nil {
			_ = x.skills.SetSkillVector(s, v)
		}
	}
}

// hasTouched reports whether any of skills is touched.
func hasTouched(skills []string, touched map[string]bool) bool {
	for _, s := range skills {
		if touched[s] {
			return true
		}
	}
	return false
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
