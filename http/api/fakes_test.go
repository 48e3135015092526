package api

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/mcpgw/aggregator/actors"

	"github.com/mcpgw/aggregator/actors/requestid"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/persistence"
)

// fakeStore is an in-memory persistence.Store with just enough behaviour for the handlers. The embedded (nil)
// interface makes methods the handlers never call panic instead of needing stubs, so the fake keeps compiling as
// the Store interface grows.
type fakeStore struct {
	persistence.Store
	mu       sync.Mutex
	servers  map[string]persistence.Server
	tools    map[string][]persistence.Tool
	history  map[string][]persistence.HistoryEvent
	pingErr  error
	pingWait time.Duration // Ping blocks this long (ignoring ctx) to test the health timeout
	listErr  error
	clock    time.Time
	audit    []persistence.AuditRecord // InsertAudit appends; see audit_test.go
}

func newFakeStore() *fakeStore {
	return &fakeStore{
		servers: map[string]persistence.Server{},
		tools:   map[string][]persistence.Tool{},
		history: map[string][]persistence.HistoryEvent{},
		clock:   time.Date(2025, 1, 8, 10, 0, 0, 0, time.UTC),
	}
}

func (f *fakeStore) tick() time.Time {
	f.clock = f.clock.Add(time.Second)
	return f.clock
}

func (f *fakeStore) Ping(context.Context) error {
	f.mu.Lock()
	err, wait := f.pingErr, f.pingWait
	f.mu.Unlock()
	if wait > 0 {
		time.Sleep(wait)
	}
	return err
}
func (f *fakeStore) Close()       {}
func (f *fakeStore) Kind() string { return "fake" }

func (f *fakeStore) CreateServer(_ context.Context, s *persistence.Server, _ int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, x := range f.servers {
		if x.Name == s.Name {
			return fmt.Errorf("create %q: %w", s.Name, persistence.ErrAlreadyExists)
		}
	}
	if s.ID == "" {
		s.ID = uuid.NewString()
	}
	now := f.tick()
	s.RegisteredAt, s.UpdatedAt = now, now
	f.servers[s.ID] = *s
	return nil
}

func (f *fakeStore) GetServer(_ context.Context, id string) (persistence.Server, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.servers[id]
	if !ok {
		return persistence.Server{}, fmt.Errorf("server %s: %w", id, persistence.ErrNotFound)
	}
	return s, nil
}

func (f *fakeStore) GetServerByName(_ context.Context, name string) (persistence.Server, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.servers {
		if s.Name == name {
			return s, nil
		}
	}
	return persistence.Server{}, persistence.ErrNotFound
}

func (f *fakeStore) ListServers(_ context.Context, flt persistence.ListServersFilter) ([]persistence.Server, int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listErr != nil {
		return nil, 0, f.listErr
	}
	var all []persistence.Server
	for _, s := range f.servers {
		if flt.Status == "" || s.Status == flt.Status {
			all = append(all, s)
		}
	}
	slices.SortFunc(all, func(a, b persistence.Server) int {
		if c := a.RegisteredAt.Compare(b.RegisteredAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	total := len(all)
	all = all[min(flt.Offset, total):]
	if flt.Limit > 0 && len(all) > flt.Limit {
		all = all[:flt.Limit]
	}
	return all, total, nil
}

func (f *fakeStore) UpdateServer(_ context.Context, id string, p persistence.ServerPatch) (persistence.Server, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.servers[id]
	if !ok {
		return persistence.Server{}, persistence.ErrNotFound
	}
	if p.Name != nil {
		for _, x := range f.servers {
			if x.Name == *p.Name && x.ID != id {
				return persistence.Server{}, persistence.ErrAlreadyExists
			}
		}
		s.Name = *p.Name
	}
	if p.Description != nil {
		s.Description = p.Description
	}
	if p.ConnectionConfig != nil {
		s.ConnectionConfig = p.ConnectionConfig
	}
	if p.HealthCheckURL != nil {
		s.HealthCheckURL = p.HealthCheckURL
	}
	if p.ClearHealthCheckURL {
		s.HealthCheckURL = nil
	}
	s.UpdatedAt = f.tick()
	f.servers[id] = s
	return s, nil
}

func (f *fakeStore) DeleteServer(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.servers[id]; !ok {
		return persistence.ErrNotFound
	}
	delete(f.servers, id)
	delete(f.tools, id)
	delete(f.history, id)
	return nil
}

func (f *fakeStore) CountServersByStatus(context.Context) (map[string]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listErr != nil {
		return nil, f.listErr
	}
	out := map[string]int{}
	for _, s := range f.servers {
		out[s.Status]++
	}
	return out, nil
}

func (f *fakeStore) ListHistory(_ context.Context, serverID string, limit int) ([]persistence.HistoryEvent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := slices.Clone(f.history[serverID])
	slices.SortFunc(h, func(a, b persistence.HistoryEvent) int { return b.Timestamp.Compare(a.Timestamp) })
	if limit > 0 && len(h) > limit {
		h = h[:limit]
	}
	return h, nil
}

func (f *fakeStore) ListTools(_ context.Context, flt persistence.ListToolsFilter) ([]persistence.Tool, int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var all []persistence.Tool
	for id, ts := range f.tools {
		if flt.ServerID == "" || flt.ServerID == id {
			all = append(all, ts...)
		}
	}
	slices.SortFunc(all, func(a, b persistence.Tool) int { return cmp.Compare(a.Name, b.Name) })
	total := len(all)
	all = all[min(flt.Offset, total):]
	if flt.Limit > 0 && len(all) > flt.Limit {
		all = all[:flt.Limit]
	}
	return all, total, nil
}

func (f *fakeStore) CountTools(_ context.Context, serverID string) (persistence.ToolCounts, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var c persistence.ToolCounts
	for id, ts := range f.tools {
		if serverID != "" && id != serverID {
			continue
		}
		for _, t := range ts {
			c.Total++
			if t.IsClassified {
				c.Classified++
			} else {
				c.Unclassified++
			}
		}
	}
	return c, nil
}

// put inserts a server directly, as the actors would have left it.
func (f *fakeStore) put(s persistence.Server) persistence.Server {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.ID == "" {
		s.ID = uuid.NewString()
	}
	if s.RegisteredAt.IsZero() {
		s.RegisteredAt = f.tick()
	}
	if s.UpdatedAt.IsZero() {
		s.UpdatedAt = s.RegisteredAt
	}
	if s.ConnectionConfig == nil {
		s.ConnectionConfig = json.RawMessage(`{"url":"https://example.com/sse"}`)
	}
	if s.TransportType == "" {
		s.TransportType = persistence.TransportSSE
	}
	f.servers[s.ID] = s
	return s
}

// controlCall records one Control call.
type controlCall struct {
	method string
	id     string
	force  bool
	req    actors.RegisterRequest
	patch  persistence.ServerPatch
	// deadline is whether the ctx had one; requestID what it carried.
	deadline  bool
	requestID string
}

// fakeControl records calls and answers from the store, or with err when set.
type fakeControl struct {
	mu      sync.Mutex
	store   persistence.Store
	calls   []controlCall
	err     error
	connect actors.ConnectResult
	discon  actors.DisconnectResult
	block   bool   // wait for ctx to end, then return ErrAskTimeout (as the real asks do)
	panics  string // panic with this value instead of answering
	routes  *routing.RouteTable
	reply   *pb.CallToolReply    // what Call answers
	args    []byte               // the arguments Call received
	refresh error                // what RefreshTools answers
	search  actors.SearchRequest // the last search asked

	// policy is the access policy put last (accesspolicy_test.go).
	policy persistence.AccessPolicy
	// skills is what Skills answers.
	skills []actors.SkillInfo
}

func (f *fakeControl) Routes() *routing.RouteTable {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.routes == nil {
		return routing.NewRouteTable(nil, nil, "__")
	}
	return f.routes
}

func (f *fakeControl) Call(ctx context.Context, r routing.Route, args []byte, _ func(*pb.Progress)) (*pb.CallToolReply, error) {
	if err := f.record(ctx, controlCall{method: "Call", id: r.ServerID}); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.args = args
	return f.reply, nil
}

func (f *fakeControl) Search(ctx context.Context, r actors.SearchRequest) (actors.SearchResponse, error) {
	if err := f.record(ctx, controlCall{method: "Search"}); err != nil {
		return actors.SearchResponse{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.search = r
	return actors.SearchResponse{StrategyUsed: r.Strategy}, nil
}

func (f *fakeControl) Skills() []actors.SkillInfo { return f.skills }

// StoredTools answers what the real router's table would hold once it has loaded the servers: their stored rows.
func (f *fakeControl) StoredTools(ctx context.Context, ids ...string) (map[string][]persistence.Tool, error) {
	out := make(map[string][]persistence.Tool, len(ids))
	for _, id := range ids {
		tools, _, err := f.store.ListTools(ctx, persistence.ListToolsFilter{ServerID: id})
		if err != nil {
			return nil, err
		}
		out[id] = tools
	}
	return out, nil
}

func (f *fakeControl) RefreshTools(ctx context.Context, id string) error {
	if err := f.record(ctx, controlCall{method: "RefreshTools", id: id}); err != nil {
		return err
	}
	return f.refresh
}

func (f *fakeControl) record(ctx context.Context, c controlCall) error {
	_, c.deadline = ctx.Deadline()
	c.requestID = requestid.From(ctx)
	f.mu.Lock()
	f.calls = append(f.calls, c)
	err, block, panics := f.err, f.block, f.panics
	f.mu.Unlock()
	if panics != "" {
		panic(panics)
	}
	if block {
		<-ctx.Done()
		return fmt.Errorf("ask: %w", actors.ErrAskTimeout)
	}
	return err
}

func (f *fakeControl) Calls() []controlCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fakeControl) Register(ctx context.Context, r actors.RegisterRequest) (persistence.Server, error) {
	if err := f.record(ctx, controlCall{method: "Register", req: r}); err != nil {
		return persistence.Server{}, err
	}
	s := persistence.Server{
		Name: r.Name, Description: r.Description, TransportType: r.TransportType,
		ConnectionConfig: r.ConnectionConfig, HealthCheckURL: r.HealthCheckURL, AutoConnect: r.AutoConnect,
		Status: persistence.StatusDisconnected,
	}
	if r.AutoConnect {
		s.Status = persistence.StatusConnecting
	}
	if err := f.store.CreateServer(ctx, &s, 0); err != nil {
		return persistence.Server{}, err
	}
	return s, nil
}

func (f *fakeControl) Update(ctx context.Context, id string, p persistence.ServerPatch) (persistence.Server, error) {
	if err := f.record(ctx, controlCall{method: "Update", id: id, patch: p}); err != nil {
		return persistence.Server{}, err
	}
	return f.store.UpdateServer(ctx, id, p)
}

func (f *fakeControl) Connect(ctx context.Context, id string) (actors.ConnectResult, error) {
	if err := f.record(ctx, controlCall{method: "Connect", id: id}); err != nil {
		return actors.ConnectResult{}, err
	}
	if _, err := f.store.GetServer(ctx, id); err != nil {
		return actors.ConnectResult{}, err
	}
	return f.connect, nil
}

func (f *fakeControl) Disconnect(ctx context.Context, id string, force bool) (actors.DisconnectResult, error) {
	if err := f.record(ctx, controlCall{method: "Disconnect", id: id, force: force}); err != nil {
		return actors.DisconnectResult{}, err
	}
	if _, err := f.store.GetServer(ctx, id); err != nil {
		return actors.DisconnectResult{}, err
	}
	return f.discon, nil
}

func (f *fakeControl) Remove(ctx context.Context, id string) error {
	if err := f.record(ctx, controlCall{method: "Remove", id: id}); err != nil {
		return err
	}
	return f.store.DeleteServer(ctx, id)
}

// RegisterKeyed records the call as "RegisterKeyed" and registers without the key (the real store's keys are
// tested through the real router in http/api/integration).
func (f *fakeControl) RegisterKeyed(ctx context.Context, r actors.RegisterRequest, _ persistence.IdempotencyKey) (persistence.Server, bool, error) {
	if err := f.record(ctx, controlCall{method: "RegisterKeyed", req: r}); err != nil {
		return persistence.Server{}, false, err
	}
	s, err := f.Register(ctx, r)
	return s, false, err
}
