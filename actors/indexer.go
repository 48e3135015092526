package actors

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
	"github.com/mcpgw/aggregator/search"
	"github.com/mcpgw/aggregator/search/classify"
	"github.com/mcpgw/aggregator/search/toolsearch"
	"github.com/mcpgw/aggregator/search/vector"
)

// indexedTool is what the indexer remembers of a tool to index only what changed. Its hash is a number and its
// server id and skill list are shared with the other tools of the same server and skills: at 10,000 tools the
// indexer holds 10,000 of them.
type indexedTool struct {
	server string
	hash   uint64 // of the definition hash and the name: a rename or a new definition is re-embedded; 0: not indexed
	skills []string
	vec    []float32 // only when the index cannot hand vectors back (see vector.VectorSource)
}

// indexerActor keeps the search engine equal to the served tools (BR-003, BR-008). It never reads the store: it
// indexes the router's served tools at start and then applies the router's deltas (routing.ServedDelta): new and
// redefined or renamed tools are embedded, a classification updates a payload, removed tools and a removed
// server's are dropped, and the vectors of the skills whose tools changed are recomputed (an emptied skill falls
// back to its description). Each delta applied is acknowledged (servedBoard): a server's tools are searchable at
// the version acknowledged. Searches never wait for it: they read the engine directly.
type indexerActor struct {
	deps   *Deps
	search *toolsearch.Searcher
	// skills is the classifier's skill space, also told the recomputed skill vectors (nil: none).
	skills *classify.SkillSpace
	tools  map[int64]*indexedTool
	// hashSeed seeds indexedTool.hash (set when the actor starts); skillSets holds each distinct skill list once
	// (skillSet).
	hashSeed  maphash.Seed
	skillSets map[string][]string
	// router answers the served tools at start; served is told each version applied (searchable); versions is
	// the version applied per server.
	router   *actor.PID
	served   *servedBoard
	versions map[string]uint64
}

// toolHash is indexedTool.hash of a stored tool (never 0).
func (a *indexerActor) toolHash(t *persistence.Tool) uint64 {
	var h maphash.Hash
	h.SetSeed(a.hashSeed)
	h.WriteString(t.DefinitionHash)
	h.WriteByte(0)
	h.WriteString(t.Name)
	return max(h.Sum64(), 1)
}

// skillSet returns the one shared copy of a skill list (the store gives every row its own).
func (a *indexerActor) skillSet(ids []string) []string {
	if len(ids) == 0 {
		return nil
	}
	key := strings.Join(ids, "\x00")
	if set, ok := a.skillSets[key]; ok {
		return set
	}
	if a.skillSets == nil {
		a.skillSets = map[string][]string{}
	}
	set := slices.Clone(ids)
	a.skillSets[key] = set
	return set
}

// Receive implements actor.Actor.
func (a *indexerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.hashSeed = maphash.MakeSeed() // the state is new at every start: so are the hashes
		a.versions = map[string]uint64{}
		a.indexAll(ctx)
	case *readyMsg:
		ctx.Respond(&askReply{})
	case *routing.ServedDelta:
		a.apply(ctx, m)
	case *servedSnapshotReply:
		for _, d := range m.deltas {
			a.apply(ctx, d)
		}
	case *pb.ServerRemoved:
		a.removeServer(m.ServerId)
		delete(a.versions, m.ServerId)
	}
}

// indexAll indexes the router's served tools of every server: at start, the router's table is the store's truth.
func (a *indexerActor) indexAll(ctx actor.Context) {
	res, err := ctx.RequestFuture(a.router, &servedSnapshotAsk{}, 5*time.Minute).Result()
	if err != nil {
		panic(fmt.Errorf("indexer: served tools from the router: %w", err)) // the supervisor retries
	}
	snap, ok := res.(*servedSnapshotReply)
	if !ok {
		panic(fmt.Errorf("indexer: unexpected reply %T from the router", res))
	}
	start := time.Now()
	for _, d := range snap.deltas {
		a.apply(ctx, d)
	}
	a.deps.Logger.Info("search index built", "tools", len(a.tools), "servers", len(snap.deltas), "took", time.Since(start).String())
}

// apply makes the engine hold a server's served tools as of the delta's version, and acknowledges that version
// (the tools are searchable). An older delta than the one applied is skipped; a gap (a delta missed) is filled by
// asking the router for every server's tools again.
func (a *indexerActor) apply(ctx actor.Context, d *routing.ServedDelta) {
	have := a.versions[d.ServerID]
	if d.Version <= have {
		return
	}
	if !d.Full && have > 0 && d.Version != have+1 {
		a.deps.Logger.Warn("indexer: served tools missed; asking the router for all of them", "server_id", d.ServerID, "have", have, "got", d.Version)
		ctx.Request(a.router, &servedSnapshotAsk{})
		return
	}
	a.versions[d.ServerID] = d.Version
	a.indexServer(d)
	a.served.ack(d.ServerID, d.Version)
}

// indexServer applies one delta of a server's served tools to the engine. The index holds what clients are
// served: hidden and withheld tools left out, held ones with their approved text, overridden ones with the admin's
// description and exposed name (the router applied the curation).
func (a *indexerActor) indexServer(d *routing.ServedDelta) {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	id := d.ServerID
	present := map[int64]bool{}
	var docs []search.Doc
	var embedIDs []int64
	touched := map[string]bool{}
	for _, list := range [][]routing.ServedTool{d.Added, d.Changed} {
		for _, st := range list {
			t := st.Tool
			present[t.ID] = true
			old := a.tools[t.ID]
			known := old != nil
			if !known {
				old = &indexedTool{}
			}
			hash := a.toolHash(t)
			payload := vector.Payload{SourceServerName: d.ServerName, IsExternal: t.IsExternal, IsClassified: t.IsClassified,
				SkillIDs: t.SkillIDs, PrimarySkillID: ptrStr(t.PrimarySkillID)}
			if !known || old.hash != hash {
				original := t.OriginalName
				if st.ExposedName != "" {
					original = st.ExposedName
				}
				docs = append(docs, search.Doc{ID: t.ID, ServerID: id, Name: t.Name, OriginalName: original,
					Description: t.Description, InputSchema: t.InputSchema, Payload: payload})
				embedIDs = append(embedIDs, t.ID)
			} else if !sameStrings(old.skills, t.SkillIDs) {
				// Only the classification changed: update the stored payload, no re-embedding.
				payload.ToolName, payload.OriginalName, payload.SourceServerID = t.Name, t.OriginalName, id
				if err := a.search.Index().SetPayload(sctx, uint64(t.ID), payload); err != nil && !errors.Is(err, vector.ErrNotFound) {
					a.deps.Logger.Warn("indexer: update payload", "tool", t.Name, "error", err)
				}
			}
			if !sameStrings(old.skills, t.SkillIDs) || old.hash != hash {
				for _, s := range old.skills {
					touched[s] = true
				}
				for _, s := range t.SkillIDs {
					touched[s] = true
				}
			}
			old.server, old.hash, old.skills = id, hash, a.skillSet(t.SkillIDs)
			a.tools[t.ID] = old
		}
	}
	if len(docs) > 0 {
		// The engine embeds the tools; their vectors also feed the skill centroids. The in-process index gives them
		// back when a centroid is computed; with another index they come back from this call and are kept.
		vecs, err := a.search.Upsert(sctx, docs)
		if err != nil {
			a.deps.Logger.Error("indexer: index tools", "server_id", id, "error", err)
		}
		for _, tid := range embedIDs {
			a.tools[tid].vec = vecs[tid]
			if err != nil {
				// Not indexed: forget the hash so that the next change of this server tries the tool again, and
				// keep it out of the skill centroids meanwhile.
				a.tools[tid].vec, a.tools[tid].hash = nil, 0
			}
		}
	}
	var gone []int64
	if d.Full {
		for tid, t := range a.tools {
			if t.server == id && !present[tid] {
				gone = append(gone, tid)
			}
		}
	} else {
		for _, tid := range d.Removed {
			if t := a.tools[tid]; t != nil && t.server == id {
				gone = append(gone, tid)
			}
		}
	}
	for _, tid := range gone {
		for _, s := range a.tools[tid].skills {
			touched[s] = true
		}
	}
	a.drop(sctx, gone)
	a.recomputeSkills(touched)
}

func (a *indexerActor) removeServer(id string) {
	sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	touched := map[string]bool{}
	var gone []int64
	for tid, t := range a.tools {
		if t.server == id {
			gone = append(gone, tid)
			for _, s := range t.skills {
				touched[s] = true
			}
		}
	}
	a.drop(sctx, gone)
	if err := a.search.Index().DeleteByServer(sctx, id); err != nil {
		a.deps.Logger.Warn("indexer: delete server vectors", "server_id", id, "error", err)
	}
	a.recomputeSkills(touched)
}

func (a *indexerActor) drop(ctx context.Context, ids []int64) {
	if len(ids) == 0 {
		return
	}
	if err := a.search.Remove(ctx, ids); err != nil {
		a.deps.Logger.Error("indexer: remove tools", "error", err)
	}
	for _, id := range ids {
		delete(a.tools, id)
	}
}

// recomputeSkills moves each touched skill's vector to the centroid of its tools (with its description), or back
// to its description when it has none left.
func (a *indexerActor) recomputeSkills(touched map[string]bool) {
	if len(touched) == 0 {
		return
	}
	sums := map[string][]float64{}
	add := func(skills []string, v []float32) {
		for _, s := range skills {
			if !touched[s] {
				continue
			}
			sum := sums[s]
			if sum == nil {
				desc, ok := a.search.SkillSpace().DescriptionVector(s)
				if !ok {
					continue
				}
				sum = make([]float64, len(desc))
				for i, x := range desc {
					sum[i] = float64(x)
				}
				sums[s] = sum
			}
			for i := range min(len(sum), len(v)) {
				sum[i] += float64(v[i])
			}
		}
	}
	src, fromIndex := a.search.Index().(vector.VectorSource)
	var ids []uint64
	for tid, t := range a.tools {
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
		err := src.EachVector(ids, func(id uint64, v []float32) { add(a.tools[int64(id)].skills, v) })
		if err != nil {
			a.deps.Logger.Warn("indexer: read tool vectors for the skills", "error", err)
			return
		}
	}
	for s := range touched {
		if _, ok := a.search.SkillSpace().DescriptionVector(s); !ok {
			continue
		}
		v := classify.UnitVector(sums[s]) // nil for a skill without tools: back to its description
		_ = a.search.SkillSpace().SetSkillVector(s, v)
		if a.skills != nil {
			_ = a.skills.SetSkillVector(s, v)
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

func sameStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
