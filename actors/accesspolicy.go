package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway/policy"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// The access policy (issue 27): the store holds the document; on every node one actor, the policy actor, is its
// only reader, compiles it and publishes the compiled Set for the gateway's Policy hook to read without locks. A
// change is announced the way profile changes are (ProfilesChanged, over the feed to the other processes): every
// node's policy actor reloads the document, as its router reloads the profiles.

// reloadPolicy asks the policy actor to reload the document now and answer once it did.
type reloadPolicy struct{}

// policyActor loads, compiles and publishes the access policy.
type policyActor struct {
	deps *Deps
	set  *atomic.Pointer[policy.Set]
	// routes and hooks: after a change, the routing table's followers are told again (the per-server MCP
	// endpoints apply the policy to the tools they mirror when told). version is the document's, loaded last.
	routes  *atomic.Pointer[routing.RouteTable]
	hooks   *routeHooks
	version int64
	loaded  bool
}

func (a *policyActor) Receive(c actor.Context) {
	switch c.Message().(type) {
	case *actor.Started, *pb.ProfilesChanged, *resync:
		a.load()
	case *reloadPolicy:
		a.load()
		c.Respond(&reloadPolicy{})
	}
}

// load reads the stored document and publishes it compiled. A store that does not answer keeps the policy in
// force; a stored document that no longer compiles (written by a newer version) denies everything until fixed:
// the policy fails closed.
func (a *policyActor) load() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := a.deps.Store.GetAccessPolicy(ctx)
	if err != nil {
		a.deps.Logger.Warn("access policy: not reloaded; the one in force stays", "error", err)
		return
	}
	set, err := compileStored(p)
	if err != nil {
		a.deps.Logger.Error("access policy: the stored policy does not compile; every call is denied until it is replaced",
			"version", p.Version, "error", err)
		set, _ = policy.Compile(policy.Document{Default: policy.Deny})
	}
	a.set.Store(set)
	changed := a.loaded && p.Version != a.version
	a.version, a.loaded = p.Version, true
	if t := a.routes.Load(); changed && t != nil {
		a.hooks.call(t)
	}
}

// compileStored compiles a stored policy (none: the empty set, which allows everything).
func compileStored(p persistence.AccessPolicy) (*policy.Set, error) {
	if len(p.Document) == 0 {
		return policy.Compile(policy.Document{})
	}
	var doc policy.Document
	if err := json.Unmarshal(p.Document, &doc); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	return policy.Compile(doc)
}

// startAccessPolicy spawns the policy actor and waits for its first load, so the first call sees the policy.
func (s *System) startAccessPolicy(ctx context.Context) error {
	s.policySet = &atomic.Pointer[policy.Set]{}
	pid, err := s.sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor {
		return &policyActor{deps: s.deps, set: s.policySet, routes: s.routes, hooks: s.hooks}
	}, s.guardian), "access-policy")
	if err != nil {
		return fmt.Errorf("spawn access policy: %w", err)
	}
	s.policyActor = pid
	if _, err := s.askActor(ctx, pid, &reloadPolicy{}, 30*time.Second); err != nil {
		return fmt.Errorf("access policy did not load: %w", err)
	}
	return nil
}

// AccessPolicy is the access policy in force on this node, compiled (gateway.PolicySource). nil allows all.
func (s *System) AccessPolicy() *policy.Set {
	if s.policySet == nil {
		return nil
	}
	return s.policySet.Load()
}

// GetAccessPolicy returns the stored access policy document and its version (the empty document, version 0, when
// none was written).
func (s *System) GetAccessPolicy(ctx context.Context) (policy.Document, persistence.AccessPolicy, error) {
	p, err := s.deps.Store.GetAccessPolicy(ctx)
	if err != nil {
		return policy.Document{}, p, fmt.Errorf("get access policy: %w", err)
	}
	set, err := compileStored(p)
	if err != nil {
		return policy.Document{}, p, fmt.Errorf("stored access policy: %w", err)
	}
	return set.Document(), p, nil
}

// PutAccessPolicy validates and compiles doc (a *policy.ValidationError when it does not), stores it, and
// announces it to every node; it returns once this node applies it.
func (s *System) PutAccessPolicy(ctx context.Context, doc policy.Document) (policy.Document, persistence.AccessPolicy, error) {
	set, err := policy.Compile(doc)
	if err != nil {
		return policy.Document{}, persistence.AccessPolicy{}, err
	}
	doc = set.Document()
	raw, err := json.Marshal(doc)
	if err != nil {
		return policy.Document{}, persistence.AccessPolicy{}, fmt.Errorf("encode access policy: %w", err)
	}
	p, err := s.deps.Store.PutAccessPolicy(ctx, raw)
	if err != nil {
		return policy.Document{}, p, fmt.Errorf("put access policy: %w", err)
	}
	// On this node the policy actor is asked directly, so the admin's next call sees the new rules; then
	// ProfilesChanged carries the change to every other node (its router reloads the profiles, its policy actor
	// the policy).
	if _, err := s.askActor(ctx, s.policyActor, &reloadPolicy{}, 5*time.Second); err != nil && !errors.Is(err, context.Canceled) {
		s.deps.Logger.Warn("access policy: slow to apply here", "error", err)
	}
	s.sys.EventStream.Publish(&pb.ProfilesChanged{})
	return doc, p, nil
}
