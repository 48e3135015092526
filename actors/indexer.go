package actors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
	"github.com/mcpgw/aggregator/search"
	"github.com/mcpgw/aggregator/search/classify"
	"github.com/mcpgw/aggregator/search/vector"
)

// indexedTool is what the indexer remembers of a tool to index only what changed.
type indexedTool struct {
	server string
	hash   string // definition hash + name: a rename or a new definition is re-embedded
	skills []string
	vec    []float32
}

// indexerActor keeps the search engine equal to the stored tools (BR-003, BR-008): it indexes every tool at start,
// re-indexes a server's tools when they or its name change, updates payloads on classification, drops a removed
// server's tools, and recomputes the vectors of the skills whose tools changed (an emptied skill falls back to its
// description). Searches never wait for it: they read the engine directly.
type indexerActor struct {
	d     *Deps
	sr    *searcher
	tools map[int64]*indexedTool
}

// Receive implements actor.Actor.
func (a *indexerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.indexAll()
	case *readyMsg:
		ctx.Respond(&regResult{})
	case *pb.ToolsChanged:
		a.indexServer(m.ServerId)
	case *pb.ServerUpdated:
		a.indexServer(m.ServerId)
	case *pb.ClassificationDone:
		a.indexServer(m.ServerId)
	case *pb.ServerRemoved:
		a.removeServer(m.ServerId)
	}
}

func (a *indexerActor) indexAll() {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	servers, _, err := a.d.Store.ListServers(sctx, persistence.ListServersFilter{})
	if err != nil {
		panic(fmt.Errorf("indexer: list servers: %w", err)) // the supervisor retries
	}
	start := time.Now()
	for _, s := range servers {
		a.indexServer(s.ID)
	}
	a.d.Logger.Info("search index built", "tools", len(a.tools), "servers", len(servers), "took", time.Since(start).String())
}

// indexServer makes the engine hold exactly the server's stored tools.
func (a *indexerActor) indexServer(id string) {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srv, err := a.d.Store.GetServer(sctx, id)
	if errors.Is(err, persistence.ErrNotFound) {
		a.removeServer(id)
		return
	}
	if err != nil {
		a.d.Logger.Error("indexer: load server", "server_id", id, "error", err)
		return
	}
	tools, _, err := a.d.Store.ListTools(sctx, persistence.ListToolsFilter{ServerID: id})
	if err != nil && !errors.Is(err, persistence.ErrNotFound) {
		a.d.Logger.Error("indexer: load tools", "server_id", id, "error", err)
		return
	}
	present := map[int64]bool{}
	var docs []search.Doc
	var embedIDs []int64
	touched := map[string]bool{}
	for _, t := range tools {
		present[t.ID] = true
		old := a.tools[t.ID]
		hash := t.DefinitionHash + "\x00" + t.Name
		payload := vector.Payload{SourceServerName: srv.Name, IsExternal: t.IsExternal, IsClassified: t.IsClassified,
			SkillIDs: t.SkillIDs, PrimarySkillID: ptrStr(t.PrimarySkillID)}
		if old == nil || old.hash != hash {
			docs = append(docs, search.Doc{ID: t.ID, ServerID: id, Name: t.Name, OriginalName: t.OriginalName,
				Description: t.Description, InputSchema: t.InputSchema, Payload: payload})
			embedIDs = append(embedIDs, t.ID)
		} else if !sameStrings(old.skills, t.SkillIDs) {
			// Only the classification changed: update the stored payload, no re-embedding.
			payload.ToolName, payload.OriginalName, payload.SourceServerID = t.Name, t.OriginalName, id
			if err := a.sr.idx.SetPayload(sctx, uint64(t.ID), payload); err != nil && !errors.Is(err, vector.ErrNotFound) {
				a.d.Logger.Warn("indexer: update payload", "tool", t.Name, "error", err)
			}
		}
		if old == nil {
			old = &indexedTool{}
			a.tools[t.ID] = old
		}
		if !sameStrings(old.skills, t.SkillIDs) || old.hash != hash {
			for _, s := range old.skills {
				touched[s] = true
			}
			for _, s := range t.SkillIDs {
				touched[s] = true
			}
		}
		old.server, old.hash, old.skills = id, hash, t.SkillIDs
	}
	if len(docs) > 0 {
		// The engine embeds the tools; their vectors also feed the skill centroids, taken from the same call.
		a.sr.vec.capture()
		err := a.sr.eng.Upsert(sctx, docs)
		vecs := a.sr.vec.take()
		if err != nil {
			a.d.Logger.Error("indexer: index tools", "server_id", id, "error", err)
		}
		for _, tid := range embedIDs {
			a.tools[tid].vec = vecs[tid]
			if err != nil {
				// Not indexed: forget the hash so that the next change of this server tries the tool again, and
				// keep it out of the skill centroids meanwhile.
				a.tools[tid].vec, a.tools[tid].hash = nil, ""
			}
		}
	}
	var gone []int64
	for tid, t := range a.tools {
		if t.server == id && !present[tid] {
			gone = append(gone, tid)
			for _, s := range t.skills {
				touched[s] = true
			}
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
	if err := a.sr.idx.DeleteByServer(sctx, id); err != nil {
		a.d.Logger.Warn("indexer: delete server vectors", "server_id", id, "error", err)
	}
	a.recomputeSkills(touched)
}

func (a *indexerActor) drop(ctx context.Context, ids []int64) {
	if len(ids) == 0 {
		return
	}
	if err := a.sr.eng.Remove(ctx, ids); err != nil {
		a.d.Logger.Error("indexer: remove tools", "error", err)
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
	members := map[string][][]float32{}
	for _, t := range a.tools {
		if t.vec == nil {
			continue
		}
		for _, s := range t.skills {
			if touched[s] {
				members[s] = append(members[s], t.vec)
			}
		}
	}
	for s := range touched {
		desc, ok := a.sr.space.DescriptionVector(s)
		if !ok {
			continue
		}
		v := classify.Centroid(desc, members[s])
		_ = a.sr.space.SetSkillVector(s, v)
		if a.sr.extra != nil {
			_ = a.sr.extra.SetSkillVector(s, v)
		}
	}
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
