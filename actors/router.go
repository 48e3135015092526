package actors

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// routerActor is the single writer of the routing table. It keeps every server's status and tools current from the
// event stream (reading the store only when tools or a registration changed, never on a call) and publishes each
// new table as an immutable snapshot that callers read without locks.
type routerActor struct {
	deps    *Deps
	sep     string
	table   *atomic.Pointer[routing.RouteTable]
	hooks   *routeHooks
	servers map[string]routing.ServerEntry
	tools   map[string][]persistence.Tool
	version uint64
	// applied is the (lease epoch, sequence) of the newest status change applied per server: an older one (a late
	// notice from a process that owned the server before) is ignored.
	applied map[string][2]int64
	// curated is each server's curation (filter, overrides, pins), applied to its stored tools before they enter
	// the table (served); profiles are every profile. Both are read from the store on a change, never on a call.
	curated  map[string]*routing.ServerCuration
	profiles []persistence.Profile
	// pins caches the pin hashes of pinned servers' definitions (ServerCuration.Serve); the process's one cache.
	pins *routing.PinHashes
	// feats: the servers' prompts, resources and resource templates (router_features.go).
	feats routerFeatures
	// held are the CONNECTING servers whose stored tools changed: the table takes them with the next status.
	held map[string]bool
}

// panicForTest makes the router or a server actor crash the way a bug would; the type is unexported, so only the
// package's own tests send it (they check that those actors are supervised).
type panicForTest struct{}

// routeHooks are the functions told about every new routing table (the MCP endpoint's tools/list_changed).
type routeHooks struct {
	mu   sync.Mutex
	next int
	fns  map[int]func(*routing.RouteTable)
}

func (h *routeHooks) add(fn func(*routing.RouteTable)) func() {
	h.mu.Lock()
	defer h.mu.Unlock()
	id := h.next
	h.next++
	h.fns[id] = fn
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.fns, id)
	}
}

func (h *routeHooks) call(t *routing.RouteTable) {
	h.mu.Lock()
	fns := make([]func(*routing.RouteTable), 0, len(h.fns))
	for _, fn := range h.fns {
		fns = append(fns, fn)
	}
	h.mu.Unlock()
	for _, fn := range fns {
		fn(t)
	}
}

// Receive implements actor.Actor.
func (r *routerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		r.loadAll()
		r.publish()
	case *readyMsg:
		ctx.Respond(&askReply{})
	case *panicForTest:
		panic("router: crash injected by a test")
	case *resync:
		r.servers, r.tools, r.applied, r.held = map[string]routing.ServerEntry{}, map[string][]persistence.Tool{}, map[string][2]int64{}, nil
		r.curated = map[string]*routing.ServerCuration{}
		r.loadAll()
		r.publish()
	case *applyStatus:
		r.applyStatus(m.evt)
		ctx.Respond(&askReply{})
	case *pb.ServerStatusChanged:
		r.applyStatus(m)
	case *pb.ServerUpdated:
		r.reload(m.ServerId)
		r.publish()
	case *pb.ToolsChanged:
		r.toolsChanged(m.ServerId)
	case *pb.ClassificationDone:
		r.toolsChanged(m.ServerId)
	case *pb.FeaturesChanged:
		r.loadFeatures(m.ServerId)
		r.publish()
	case *pb.ServerRemoved:
		delete(r.held, m.ServerId)
		r.pins.ForgetServer(m.ServerId)
		delete(r.servers, m.ServerId)
		delete(r.tools, m.ServerId)
		delete(r.applied, m.ServerId)
		delete(r.curated, m.ServerId)
		r.forgetFeatures(m.ServerId)
		r.publish()
	case *pb.ProfilesChanged:
		r.loadProfiles()
		r.publish()
	}
}

// applyStatus is a server actor's status change, sent to the router before the change is stored or published (see
// setStatus): a reader who sees the new status finds it in the routing table too.
type applyStatus struct{ evt *pb.ServerStatusChanged }

// applyStatus puts a status change in the table. The same change arrives twice on the owner's node (asked before
// it is stored, then published): the second, and any older one, changes nothing.
func (r *routerActor) applyStatus(m *pb.ServerStatusChanged) {
	if m.Epoch > 0 {
		at := [2]int64{m.Epoch, m.Seq}
		if last, ok := r.applied[m.ServerId]; ok && (at[0] < last[0] || at[0] == last[0] && at[1] <= last[1]) {
			return // older than what the table shows
		}
		r.applied[m.ServerId] = at
	}
	s, known := r.servers[m.ServerId]
	if known && s.Name == m.ServerName && s.Status == m.To {
		return
	}
	s.ID, s.Name, s.Status = m.ServerId, m.ServerName, m.To
	r.servers[m.ServerId] = s
	if r.held[m.ServerId] {
		delete(r.held, m.ServerId)
		r.reloadTools(m.ServerId)
	}
	r.publish()
}

// toolsChanged applies a server's changed tools. Those of a new session, discovered while the server is still
// CONNECTING (awaitFirstDiscovery), are held and enter the table with CONNECTED, in the same table: no reader sees
// the tools of a server that does not take calls yet, nor the server CONNECTED without them. This holds on every
// node, since the feed delivers the tools before the status that follows them.
func (r *routerActor) toolsChanged(id string) {
	if r.servers[id].Status == persistence.StatusConnecting {
		r.hold(id)
		return
	}
	r.reloadTools(id)
	r.publish()
}

// hold defers reloading a CONNECTING server's tools to its next status change.
func (r *routerActor) hold(id string) {
	if r.held == nil {
		r.held = map[string]bool{}
	}
	r.held[id] = true
}

// loadProfiles reads every profile (they are few and small).
func (r *routerActor) loadProfiles() {
	sctx, cancel := storeCtx()
	defer cancel()
	ps, err := r.deps.Store.ListProfiles(sctx)
	if err != nil {
		r.deps.Logger.Error("router: load profiles", "error", err)
		return
	}
	r.profiles = ps
}

func (r *routerActor) loadAll() {
	sctx, cancel := storeCtx()
	defer cancel()
	servers, _, err := r.deps.Store.ListServers(sctx, persistence.ListServersFilter{})
	if err != nil {
		panic(err) // the supervisor retries; the router must not run on a partial table
	}
	overrides, err := r.deps.Store.ListToolOverrides(sctx, "")
	if err != nil {
		panic(err)
	}
	byServerOv := map[string][]persistence.ToolOverride{}
	for _, o := range overrides {
		byServerOv[o.ServerID] = append(byServerOv[o.ServerID], o)
	}
	for _, s := range servers {
		r.servers[s.ID] = routing.ServerEntry{ID: s.ID, Name: s.Name, Status: s.Status}
		c := routing.NewServerCuration(s.Policy, byServerOv[s.ID])
		if s.Policy.Pinning {
			set, err := r.deps.Store.ListToolPins(sctx, s.ID)
			if err != nil && !errors.Is(err, persistence.ErrNotFound) {
				panic(err)
			}
			c.SetPins(set)
		}
		r.curated[s.ID] = c
	}
	tools, _, err := r.deps.Store.ListTools(sctx, persistence.ListToolsFilter{})
	if err != nil {
		panic(err)
	}
	byServer := map[string][]persistence.Tool{}
	for _, t := range tools {
		byServer[t.SourceServerID] = append(byServer[t.SourceServerID], t)
	}
	for id, list := range byServer {
		served := r.curated[id].Serve(list, r.pins, r.deps.Logger)
		for i := range served {
			served[i] = routing.RoutedTool(served[i])
		}
		r.tools[id] = routing.CompactTools(id, served, nil)
	}
	ps, err := r.deps.Store.ListProfiles(sctx)
	if err != nil {
		panic(err)
	}
	r.profiles = ps
	r.loadFeatures("")
}

// reload re-reads one server's registration and tools (after a registration, rename or config change).
func (r *routerActor) reload(id string) {
	sctx, cancel := storeCtx()
	defer cancel()
	s, err := r.deps.Store.GetServer(sctx, id)
	if errors.Is(err, persistence.ErrNotFound) {
		delete(r.servers, id)
		delete(r.tools, id)
		return
	}
	if err != nil {
		r.deps.Logger.Error("router: reload server", "server_id", id, "error", err)
		return
	}
	old, known := r.servers[id]
	status := s.Status
	if known && old.Status != "" {
		status = old.Status // events are the truth about live state; the row may lag them
	}
	r.servers[id] = routing.ServerEntry{ID: s.ID, Name: s.Name, Status: status}
	c, err := loadCuration(sctx, r.deps.Store, s)
	if err != nil {
		r.deps.Logger.Error("router: reload curation", "server_id", id, "error", err)
		c = r.curated[id]
	}
	r.curated[id] = c
	if status == persistence.StatusConnecting {
		r.hold(id)
	} else {
		r.reloadTools(id)
	}
}

func (r *routerActor) reloadTools(id string) {
	if _, ok := r.servers[id]; !ok {
		return
	}
	sctx, cancel := storeCtx()
	defer cancel()
	tools, _, err := r.deps.Store.ListTools(sctx, persistence.ListToolsFilter{ServerID: id})
	if err != nil && !errors.Is(err, persistence.ErrNotFound) {
		r.deps.Logger.Error("router: reload tools", "server_id", id, "error", err)
		return
	}
	if c := r.curated[id]; c.Pinning() {
		// A discovery may have moved the pins (a change held, or approved): they decide what is served.
		if set, err := r.deps.Store.ListToolPins(sctx, id); err == nil {
			c.SetPins(set)
		} else if !errors.Is(err, persistence.ErrNotFound) {
			r.deps.Logger.Error("router: reload tool pins", "server_id", id, "error", err)
		}
	}
	tools = r.curated[id].Serve(tools, r.pins, r.deps.Logger)
	// A definition that did not change keeps its routed form: classification reloads a server many times.
	prev := make(map[int64]*persistence.Tool, len(r.tools[id]))
	for i, t := range r.tools[id] {
		prev[t.ID] = &r.tools[id][i]
	}
	for i, t := range tools {
		if p := prev[t.ID]; p != nil && p.DefinitionHash == t.DefinitionHash {
			tools[i].Definition = p.Definition
			continue
		}
		tools[i] = routing.RoutedTool(t)
	}
	r.tools[id] = routing.CompactTools(id, tools, r.tools[id])
}

func (r *routerActor) publish() {
	r.version++
	t := routing.BuildRouteTable(r.servers, r.tools, r.sep, r.version, r.table.Load(), &routing.Curation{Servers: r.curated, Profiles: r.profiles}, r.featureTable())
	r.table.Store(t)
	r.hooks.call(t)
}

// Routes is the current routing table.
func (s *System) Routes() *routing.RouteTable { return s.routes.Load() }

// OnRoutesChanged calls fn with every new routing table until the returned function is called. fn runs on the
// router's goroutine: it must not block.
func (s *System) OnRoutesChanged(fn func(*routing.RouteTable)) (cancel func()) {
	return s.hooks.add(fn)
}
