package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mcpgw/aggregator/actors/curation"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/persistence"
)

// CurationStore is what a Curator reads and writes. persistence.Store satisfies it.
type CurationStore interface {
	GetServer(ctx context.Context, id string) (persistence.Server, error)
	ListTools(ctx context.Context, f persistence.ListToolsFilter) ([]persistence.Tool, int, error)
	SetToolPolicy(ctx context.Context, serverID string, p persistence.ToolPolicyPatch) (persistence.Server, error)
	PutToolOverride(ctx context.Context, o persistence.ToolOverride) (persistence.ToolOverride, error)
	DeleteToolOverride(ctx context.Context, serverID, originalName string) error
	ResolveToolChange(ctx context.Context, serverID, originalName string, approve bool, hash string) (persistence.ToolPin, error)
	PutProfile(ctx context.Context, p persistence.Profile) (persistence.Profile, bool, error)
	GetProfile(ctx context.Context, name string) (persistence.Profile, error)
	DeleteProfile(ctx context.Context, name string) error
}

// Curator carries out the admin's curation changes (filters, pinning, overrides, approvals, profiles): each is
// checked, written to the store and then announced, so that every node's routing table, MCP endpoints and search
// index apply it without reconnecting the backend.
type Curator struct {
	Store CurationStore
	// Routes is the current routing table (who answers to a name now).
	Routes func() *routing.RouteTable
	// ServerChanged announces that a server's curation changed and returns once this node's table shows it;
	// ProfilesChanged likewise for the profiles.
	ServerChanged   func(ctx context.Context, srv persistence.Server)
	ProfilesChanged func(ctx context.Context)
	// Rediscover has a connected server's tools discovered again (after an approval); nil: never.
	Rediscover func(ctx context.Context, serverID string)
}

// SetToolPolicy changes a server's filter and pinning settings. Turning pinning on approves the server's stored
// tools as they are now (the baseline): from then on, a change of their definitions is held.
func (c *Curator) SetToolPolicy(ctx context.Context, serverID string, p persistence.ToolPolicyPatch) (persistence.Server, error) {
	if p.Pinning != nil && *p.Pinning {
		cur, err := c.Store.GetServer(ctx, serverID)
		if err != nil {
			return persistence.Server{}, fmt.Errorf("server %s: %w", serverID, err)
		}
		if !cur.Policy.Pinning {
			tools, _, err := c.Store.ListTools(ctx, persistence.ListToolsFilter{ServerID: serverID})
			if err != nil {
				return persistence.Server{}, fmt.Errorf("list tools for the pinning baseline: %w", err)
			}
			p.Baseline = append(p.Baseline, Baseline(serverID, tools, time.Now().UTC())...)
		}
	}
	srv, err := c.Store.SetToolPolicy(ctx, serverID, p)
	if err != nil {
		return srv, fmt.Errorf("set tool policy: %w", err)
	}
	c.ServerChanged(ctx, srv)
	return srv, nil
}

// Baseline is the pins that approve a server's stored tools as they are at now (a definition that cannot be
// hashed is left out).
func Baseline(serverID string, tools []persistence.Tool, now time.Time) []persistence.ToolPin {
	var out []persistence.ToolPin
	for _, t := range tools {
		h, err := curation.PinHash(t.Definition)
		if err != nil {
			continue
		}
		at := now
		out = append(out, persistence.ToolPin{ServerID: serverID, OriginalName: t.OriginalName,
			ApprovedHash: h, ApprovedDef: t.Definition, ApprovedAt: &at})
	}
	return out
}

// CheckExposedName refuses an exposed name for (serverID, original) that is a meta-tool's name or the alias of
// another tool in rt (listed, or still answering for clients that listed it): gateway.ErrNameTaken.
func CheckExposedName(rt *routing.RouteTable, serverID, original, name string) error {
	if routing.IsMetaToolName(name) {
		return fmt.Errorf("%q is one of the aggregator's own tools: %w", name, gateway.ErrNameTaken)
	}
	if e, ok := rt.AliasOwner(name); ok && (e.SourceServerID != serverID || e.OriginalName != original) {
		return fmt.Errorf("%q already names the tool %s: %w", name, e.Name, gateway.ErrNameTaken)
	}
	return nil
}

// PutToolOverride creates or replaces a tool's override. An exposed name must not be the alias of another tool,
// nor a meta-tool's name (CheckExposedName), nor another override's: that is gateway.ErrNameTaken (the store's
// unique index decides races between two writers).
func (c *Curator) PutToolOverride(ctx context.Context, o persistence.ToolOverride) (persistence.ToolOverride, error) {
	srv, err := c.Store.GetServer(ctx, o.ServerID)
	if err != nil {
		return o, fmt.Errorf("server %s: %w", o.ServerID, err)
	}
	if o.ExposedName != nil {
		if err := CheckExposedName(c.Routes(), o.ServerID, o.OriginalName, *o.ExposedName); err != nil {
			return o, err
		}
	}
	out, err := c.Store.PutToolOverride(ctx, o)
	if errors.Is(err, persistence.ErrAlreadyExists) {
		return o, fmt.Errorf("%q is another tool's exposed name: %w", *o.ExposedName, gateway.ErrNameTaken)
	}
	if err != nil {
		return out, fmt.Errorf("put tool override: %w", err)
	}
	c.ServerChanged(ctx, srv)
	return out, nil
}

// DeleteToolOverride removes a tool's override: it is served under its own name and text again.
func (c *Curator) DeleteToolOverride(ctx context.Context, serverID, original string) error {
	srv, err := c.Store.GetServer(ctx, serverID)
	if err != nil {
		return fmt.Errorf("server %s: %w", serverID, err)
	}
	if err := c.Store.DeleteToolOverride(ctx, serverID, original); err != nil {
		return fmt.Errorf("delete tool override: %w", err)
	}
	c.ServerChanged(ctx, srv)
	return nil
}

// ResolveToolChange approves or rejects a held definition change (hash, when given, must be the pending one:
// the admin approves what they saw). An approved change is served at once; a rejected one keeps the approved
// definition served (or the new tool withheld) and is not announced again.
func (c *Curator) ResolveToolChange(ctx context.Context, serverID, original string, approve bool, hash string) (persistence.ToolPin, error) {
	srv, err := c.Store.GetServer(ctx, serverID)
	if err != nil {
		return persistence.ToolPin{}, fmt.Errorf("server %s: %w", serverID, err)
	}
	pin, err := c.Store.ResolveToolChange(ctx, serverID, original, approve, hash)
	if err != nil {
		return pin, fmt.Errorf("resolve tool change: %w", err)
	}
	c.ServerChanged(ctx, srv)
	// A fresh discovery on the owner sets the pending-changes metric (and serves a tool that changed again).
	if c.Rediscover != nil {
		c.Rediscover(ctx, serverID)
	}
	return pin, nil
}

// PutProfile creates or replaces a profile (created reports which).
func (c *Curator) PutProfile(ctx context.Context, p persistence.Profile) (persistence.Profile, bool, error) {
	out, created, err := c.Store.PutProfile(ctx, p)
	if err != nil {
		return out, false, fmt.Errorf("put profile: %w", err)
	}
	c.ProfilesChanged(ctx)
	return out, created, nil
}

// DeleteProfile removes a profile. One that still binds client tokens, OAuth subjects or claim values is refused
// (gateway.ErrProfileInUse): a caller bound to it alone would otherwise see every tool.
func (c *Curator) DeleteProfile(ctx context.Context, name string) error {
	p, err := c.Store.GetProfile(ctx, name)
	if err != nil {
		return fmt.Errorf("profile %q: %w", name, err)
	}
	if n := len(p.Clients) + len(p.Bindings); n > 0 {
		return fmt.Errorf("profile %q binds %d client(s): %w", name, n, gateway.ErrProfileInUse)
	}
	if err := c.Store.DeleteProfile(ctx, name); err != nil {
		return fmt.Errorf("delete profile: %w", err)
	}
	c.ProfilesChanged(ctx)
	return nil
}
