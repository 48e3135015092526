package actors

import (
	"context"
	"time"

	"github.com/mcpgw/aggregator/actors/registry"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// ErrProfileInUse means a profile still has client tokens bound to it: deleting it would widen what they see
// (409); unbind them first.
var ErrProfileInUse = gateway.ErrProfileInUse

// ErrNameTaken means an override's exposed name is already a tool's name on the MCP endpoint (409).
var ErrNameTaken = gateway.ErrNameTaken

// Curation is what the front ends ask to manage tool curation (filters, pinning, overrides, approvals, profiles).
// Every change is written to the store and then announced like a registration change, so that every node's routing
// table, MCP endpoints and search index apply it at once, without reconnecting the backend. The checks and the
// order are registry.Curator's; System gives it the store, the table and the announcements.
type Curation interface {
	SetToolPolicy(ctx context.Context, serverID string, p persistence.ToolPolicyPatch) (persistence.Server, error)
	PutToolOverride(ctx context.Context, o persistence.ToolOverride) (persistence.ToolOverride, error)
	DeleteToolOverride(ctx context.Context, serverID, original string) error
	ResolveToolChange(ctx context.Context, serverID, original string, approve bool, hash string) (persistence.ToolPin, error)
	PutProfile(ctx context.Context, p persistence.Profile) (persistence.Profile, bool, error)
	DeleteProfile(ctx context.Context, name string) error
}

var _ Curation = (*System)(nil)

// curator is the curation use of this node: its store, routing table and announcements.
func (s *System) curator() *registry.Curator {
	return &registry.Curator{Store: s.deps.Store, Routes: s.Routes, ServerChanged: s.curationChanged, ProfilesChanged: s.profilesChanged,
		Rediscover: func(ctx context.Context, id string) {
			if e, ok := s.Routes().Server(id); ok && callable(e.Status) {
				_ = s.RefreshTools(ctx, id)
			}
		}}
}

// SetToolPolicy implements Curation (registry.Curator.SetToolPolicy).
func (s *System) SetToolPolicy(ctx context.Context, serverID string, p persistence.ToolPolicyPatch) (persistence.Server, error) {
	return s.curator().SetToolPolicy(ctx, serverID, p)
}

// PutToolOverride implements Curation (registry.Curator.PutToolOverride).
func (s *System) PutToolOverride(ctx context.Context, o persistence.ToolOverride) (persistence.ToolOverride, error) {
	return s.curator().PutToolOverride(ctx, o)
}

// DeleteToolOverride implements Curation (registry.Curator.DeleteToolOverride).
func (s *System) DeleteToolOverride(ctx context.Context, serverID, original string) error {
	return s.curator().DeleteToolOverride(ctx, serverID, original)
}

// ResolveToolChange implements Curation (registry.Curator.ResolveToolChange).
func (s *System) ResolveToolChange(ctx context.Context, serverID, original string, approve bool, hash string) (persistence.ToolPin, error) {
	return s.curator().ResolveToolChange(ctx, serverID, original, approve, hash)
}

// PutProfile implements Curation (registry.Curator.PutProfile).
func (s *System) PutProfile(ctx context.Context, p persistence.Profile) (persistence.Profile, bool, error) {
	return s.curator().PutProfile(ctx, p)
}

// DeleteProfile implements Curation (registry.Curator.DeleteProfile).
func (s *System) DeleteProfile(ctx context.Context, name string) error {
	return s.curator().DeleteProfile(ctx, name)
}

// curationChanged tells every node's router and indexer that a server's curation changed, and returns once this
// node's routing table shows it (the admin's next list or call sees the change).
func (s *System) curationChanged(ctx context.Context, srv persistence.Server) {
	s.sys.EventStream.Publish(&pb.ServerUpdated{ServerId: srv.ID, OldName: srv.Name, NewName: srv.Name})
	s.awaitRouter(ctx, "curation change")
}

// profilesChanged announces a profile change and waits for this node's router to apply it, so that the admin's
// next request (opening /mcp/profiles/{name}, say) sees what they just wrote. The event reaches the router's
// mailbox before Publish returns; the router answers readyMsg only after it, having published the new table.
// Other nodes apply it when the event reaches them.
func (s *System) profilesChanged(ctx context.Context) {
	s.sys.EventStream.Publish(&pb.ProfilesChanged{})
	s.awaitRouter(ctx, "profile change")
}

// awaitRouter waits (at most 5 s) until this node's router has handled every event published before the call. If
// it does not answer in time the write still stands and its event is on the way; the caller only returns sooner.
func (s *System) awaitRouter(ctx context.Context, what string) {
	if _, err := s.askActor(ctx, s.router, &readyMsg{}, 5*time.Second); err != nil {
		s.deps.Logger.Warn(what+": router slow to apply it", "error", err)
	}
}
