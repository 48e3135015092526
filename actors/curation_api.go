package actors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mcpgw/aggregator/actors/curation"
	"github.com/mcpgw/aggregator/actors/routing"
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
// table, MCP endpoints and search index apply it at once, without reconnecting the backend.
type Curation interface {
	SetToolPolicy(ctx context.Context, serverID string, p persistence.ToolPolicyPatch) (persistence.Server, error)
	PutToolOverride(ctx context.Context, o persistence.ToolOverride) (persistence.ToolOverride, error)
	DeleteToolOverride(ctx context.Context, serverID, original string) error
	ResolveToolChange(ctx context.Context, serverID, original string, approve bool, hash string) (persistence.ToolPin, error)
	PutProfile(ctx context.Context, p persistence.Profile) (persistence.Profile, bool, error)
	DeleteProfile(ctx context.Context, name string) error
}

var _ Curation = (*System)(nil)

// curationChanged tells every node's router and indexer that a server's curation changed, and returns once this
// node's routing table shows it (the admin's next list or call sees the change).
func (s *System) curationChanged(ctx context.Context, srv persistence.Server) {
	s.sys.EventStream.Publish(&pb.ServerUpdated{ServerId: srv.ID, OldName: srv.Name, NewName: srv.Name})
	s.awaitRouter(ctx, "curation change")
}

// SetToolPolicy changes a server's filter and pinning settings. Turning pinning on approves the server's stored
// tools as they are now (the baseline): from then on, a change of their definitions is held.
func (s *System) SetToolPolicy(ctx context.Context, serverID string, p persistence.ToolPolicyPatch) (persistence.Server, error) {
	if p.Pinning != nil && *p.Pinning {
		cur, err := s.deps.Store.GetServer(ctx, serverID)
		if err != nil {
			return persistence.Server{}, fmt.Errorf("server %s: %w", serverID, err)
		}
		if !cur.Policy.Pinning {
			tools, _, err := s.deps.Store.ListTools(ctx, persistence.ListToolsFilter{ServerID: serverID})
			if err != nil {
				return persistence.Server{}, fmt.Errorf("list tools for the pinning baseline: %w", err)
			}
			now := time.Now().UTC()
			for _, t := range tools {
				h, err := curation.PinHash(t.Definition)
				if err != nil {
					continue
				}
				at := now
				p.Baseline = append(p.Baseline, persistence.ToolPin{ServerID: serverID, OriginalName: t.OriginalName,
					ApprovedHash: h, ApprovedDef: t.Definition, ApprovedAt: &at})
			}
		}
	}
	srv, err := s.deps.Store.SetToolPolicy(ctx, serverID, p)
	if err != nil {
		return srv, fmt.Errorf("set tool policy: %w", err)
	}
	s.curationChanged(ctx, srv)
	return srv, nil
}

// PutToolOverride creates or replaces a tool's override. An exposed name must not be the alias of another tool
// (listed, or still answering for clients that listed it), nor a meta-tool's name, nor another override's: that is
// ErrNameTaken (the store's unique index decides races between two writers).
func (s *System) PutToolOverride(ctx context.Context, o persistence.ToolOverride) (persistence.ToolOverride, error) {
	srv, err := s.deps.Store.GetServer(ctx, o.ServerID)
	if err != nil {
		return o, fmt.Errorf("server %s: %w", o.ServerID, err)
	}
	if o.ExposedName != nil {
		name := *o.ExposedName
		if routing.IsMetaToolName(name) {
			return o, fmt.Errorf("%q is one of the aggregator's own tools: %w", name, ErrNameTaken)
		}
		if e, ok := s.Routes().AliasOwner(name); ok && (e.SourceServerID != o.ServerID || e.OriginalName != o.OriginalName) {
			return o, fmt.Errorf("%q already names the tool %s: %w", name, e.Name, ErrNameTaken)
		}
	}
	out, err := s.deps.Store.PutToolOverride(ctx, o)
	if errors.Is(err, persistence.ErrAlreadyExists) {
		return o, fmt.Errorf("%q is another tool's exposed name: %w", *o.ExposedName, ErrNameTaken)
	}
	if err != nil {
		return out, fmt.Errorf("put tool override: %w", err)
	}
	s.curationChanged(ctx, srv)
	return out, nil
}

// DeleteToolOverride removes a tool's override: it is served under its own name and text again.
func (s *System) DeleteToolOverride(ctx context.Context, serverID, original string) error {
	srv, err := s.deps.Store.GetServer(ctx, serverID)
	if err != nil {
		return fmt.Errorf("server %s: %w", serverID, err)
	}
	if err := s.deps.Store.DeleteToolOverride(ctx, serverID, original); err != nil {
		return fmt.Errorf("delete tool override: %w", err)
	}
	s.curationChanged(ctx, srv)
	return nil
}

// ResolveToolChange approves or rejects a held definition change (hash, when given, must be the pending one:
// the admin approves what they saw). An approved change is served at once; a rejected one keeps the approved
// definition served (or the new tool withheld) and is not announced again.
func (s *System) ResolveToolChange(ctx context.Context, serverID, original string, approve bool, hash string) (persistence.ToolPin, error) {
	srv, err := s.deps.Store.GetServer(ctx, serverID)
	if err != nil {
		return persistence.ToolPin{}, fmt.Errorf("server %s: %w", serverID, err)
	}
	pin, err := s.deps.Store.ResolveToolChange(ctx, serverID, original, approve, hash)
	if err != nil {
		return pin, fmt.Errorf("resolve tool change: %w", err)
	}
	s.curationChanged(ctx, srv)
	// A fresh discovery on the owner sets the pending-changes metric (and serves a tool that changed again).
	if e, ok := s.Routes().Server(serverID); ok && callable(e.Status) {
		_ = s.RefreshTools(ctx, serverID)
	}
	return pin, nil
}

// PutProfile creates or replaces a profile (created reports which).
func (s *System) PutProfile(ctx context.Context, p persistence.Profile) (persistence.Profile, bool, error) {
	out, created, err := s.deps.Store.PutProfile(ctx, p)
	if err != nil {
		return out, false, fmt.Errorf("put profile: %w", err)
	}
	s.profilesChanged(ctx)
	return out, created, nil
}

// DeleteProfile removes a profile. One that still binds client tokens, OAuth subjects or claim values is refused
// (ErrProfileInUse): a caller bound to it alone would otherwise see every tool.
func (s *System) DeleteProfile(ctx context.Context, name string) error {
	p, err := s.deps.Store.GetProfile(ctx, name)
	if err != nil {
		return fmt.Errorf("profile %q: %w", name, err)
	}
	if n := len(p.Clients) + len(p.Bindings); n > 0 {
		return fmt.Errorf("profile %q binds %d client(s): %w", name, n, ErrProfileInUse)
	}
	if err := s.deps.Store.DeleteProfile(ctx, name); err != nil {
		return fmt.Errorf("delete profile: %w", err)
	}
	s.profilesChanged(ctx)
	return nil
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
