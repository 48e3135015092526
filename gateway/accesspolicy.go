package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway/policy"
	"github.com/mcpgw/aggregator/http/auth"
)

// PolicySource holds the access policy currently in force, compiled (actors.System: loaded from the store and
// reloaded when a node announces a change). nil answers allow everything.
type PolicySource interface {
	AccessPolicy() *policy.Set
}

// DeniedError is a call or a tool the access policy refuses: Rule names the rule that decided ("" : the
// document's default), Err is set when the rule failed to evaluate (the policy fails closed). It wraps ErrDenied.
type DeniedError struct {
	Rule string
	Tool string
	Err  error
}

func (e *DeniedError) Error() string {
	if e.Rule == "" {
		return fmt.Sprintf("%s: %v: the policy's default", e.Tool, ErrDenied)
	}
	return fmt.Sprintf("%s: %v: rule %q", e.Tool, ErrDenied, e.Rule)
}

func (e *DeniedError) Unwrap() error { return ErrDenied }

// Rules is the Policy (and the list filter) that applies the access policy's rules (package policy) of a
// PolicySource: one compiled Set evaluated once per call, with the caller, the tool as the routing table serves it
// (its skills and annotations, after curation) and, only when some rule reads them, the call's arguments.
type Rules struct {
	Source PolicySource
	// Logger receives the rules that fail to evaluate (never the arguments); nil: slog.Default.
	Logger *slog.Logger
}

var (
	_ Policy = (*Rules)(nil)
	_ Lister = (*Rules)(nil)
)

// Lister is what a Policy implements when it also hides tools from the listings (tools/list, search): Listed
// reports whether caller may see tool e of rt.
type Lister interface {
	Listed(ctx context.Context, caller auth.Identity, rt *routing.RouteTable, e *routing.ToolEntry) bool
}

// Listed reports whether the caller may see tool e of rt in a listing: true unless the Gateway's Policy is a
// Lister that hides it. Front ends that list tools (tools/list on every MCP endpoint) ask it per tool.
func (g *Gateway) Listed(ctx context.Context, caller auth.Identity, rt *routing.RouteTable, e *routing.ToolEntry) bool {
	l, ok := g.policy.(Lister)
	return !ok || l.Listed(ctx, caller, rt, e)
}

// ListFilter is Listed for one caller, or nil when the Gateway's Policy hides nothing from it (no rule), so that
// a listing without rules costs nothing per tool.
func (g *Gateway) ListFilter(ctx context.Context, caller auth.Identity, rt *routing.RouteTable) func(*routing.ToolEntry) bool {
	l, ok := g.policy.(Lister)
	if !ok {
		return nil
	}
	if r, ok := l.(*Rules); ok && r.Source.AccessPolicy().Empty() {
		return nil
	}
	return func(e *routing.ToolEntry) bool { return l.Listed(ctx, caller, rt, e) }
}

// AllowCall implements Policy: nil when the policy allows the call, else a *DeniedError.
func (p *Rules) AllowCall(ctx context.Context, c PolicyCall) error {
	set := p.Source.AccessPolicy()
	if set.Empty() {
		return nil
	}
	in := input(set, c.Caller, c.Table, c.Route.Name)
	in.Server, in.Tool, in.Name = c.Route.ServerName, c.Route.Tool, c.Route.Name
	if set.Reads("args") && len(c.Arguments) > 0 {
		if err := json.Unmarshal(c.Arguments, &in.Arguments); err != nil {
			in.Arguments = nil // not an object: rules see {} (the backend answers the bad arguments)
		}
	}
	d := set.Decide(&in)
	return p.verdict(ctx, d, c.Caller, c.Route.Name, "call")
}

// Listed reports whether the access policy lets the caller see a tool of rt (some call of it could be allowed):
// tools/list, the per-server and profile endpoints and search leave the others out.
func (p *Rules) Listed(ctx context.Context, caller auth.Identity, rt *routing.RouteTable, e *routing.ToolEntry) bool {
	set := p.Source.AccessPolicy()
	if set.Empty() {
		return true
	}
	in := input(set, caller, rt, e.Name)
	d := set.Listed(&in)
	return p.verdict(ctx, d, caller, e.Name, "list") == nil
}

func (p *Rules) verdict(ctx context.Context, d policy.Decision, caller auth.Identity, tool, action string) error {
	if d.Allowed {
		return nil
	}
	if d.Err != nil {
		log := p.Logger
		if log == nil {
			log = slog.Default()
		}
		// The error names the expression's failure (a missing key, a type), never an argument's value.
		log.WarnContext(ctx, "access policy: a rule failed to evaluate; denied", "rule", d.Rule, "tool", tool,
			"action", action, "subject", caller.Actor(), "error", d.Err)
	}
	return &DeniedError{Rule: d.Rule, Tool: tool, Err: d.Err}
}

// input is what the rules see of a caller and a tool of rt (by namespaced name).
func input(set *policy.Set, caller auth.Identity, rt *routing.RouteTable, name string) policy.Input {
	in := policy.Input{Subject: caller.Name, Claims: caller.Claims, Role: caller.Scope.String()}
	if caller.Anonymous || in.Subject == "" {
		in.Subject = auth.AnonymousName
	}
	if rt == nil {
		return in
	}
	e, ok := rt.Tool(name)
	if !ok || e.Tool == nil {
		return in
	}
	in.Server, in.Tool, in.Name, in.Skills = e.ServerName, e.OriginalName, e.Name, e.SkillIDs
	var def struct {
		Annotations map[string]any `json:"annotations"`
	}
	if set.Reads("annotations") && len(e.Definition) > 0 && json.Unmarshal(e.Definition, &def) == nil {
		in.Annotations = def.Annotations
	}
	return in
}

// AccessPolicy is the compiled access policy the Gateway applies now: its Policy's, when that is Rules; nil (which
// allows everything) otherwise. Each change of the document is a new *policy.Set, so a front end that remembers
// the pointer knows when the policy changed.
func (g *Gateway) AccessPolicy() *policy.Set {
	if r, ok := g.policy.(*Rules); ok && r.Source != nil {
		return r.Source.AccessPolicy()
	}
	return nil
}

// ListedUnder is Rules.Listed under a given compiled policy rather than the one in force: whether set lets caller
// see tool e of rt in a listing. A front end compares two versions of the policy with it (who sees a change).
// Rules that fail to evaluate deny, unlogged (the policy in force logs them when it applies them).
func ListedUnder(ctx context.Context, set *policy.Set, caller auth.Identity, rt *routing.RouteTable, e *routing.ToolEntry) bool {
	if set.Empty() {
		return true
	}
	r := Rules{Source: fixedPolicy{set}, Logger: slog.New(slog.DiscardHandler)}
	return r.Listed(ctx, caller, rt, e)
}

// fixedPolicy is a PolicySource of one compiled set.
type fixedPolicy struct{ set *policy.Set }

func (f fixedPolicy) AccessPolicy() *policy.Set { return f.set }
