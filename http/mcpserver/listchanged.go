package mcpserver

import (
	"context"
	"encoding/json"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/gateway/policy"
	"github.com/mcpgw/aggregator/http/auth"
)

// A change of the access policy changes no tool of the go-sdk server (tools/list is filtered per request:
// policyList), so the go-sdk tells nobody. The endpoint tells each session itself: it remembers who each session's
// caller is (from its initialize and tools/list requests) and, when the policy in force changes, compares what
// each caller may list under the old and the new policy; the sessions whose callers' listing changed, and only
// those, get notifications/tools/list_changed. The policy decides on tools only: prompts and resources are listed
// alike under every policy, so a policy change never announces them.
//
// Clients of the sessionless revision (2026-07-28) hear list changes only on a subscriptions/listen stream that
// opted in to them: the endpoint remembers each such stream (its caller, its context, which routes a message onto
// it, and its subscription id, from the acknowledgement the go-sdk sends first) while it is open, and notifies it
// alike.

// sessionCallers is the caller of each session the endpoint may notify, and the policy they were last told about.
type sessionCallers struct {
	mu     sync.Mutex
	by     map[*mcp.ServerSession]auth.Identity
	policy *policy.Set
	// listening is the caller of each subscriptions/listen being served; listens those of them that opted in to
	// tools/list_changed, once acknowledged.
	listening map[*mcp.ServerSession]auth.Identity
	listens   map[*mcp.ServerSession]listener
	// send is the go-sdk server's sending chain, to notify one session (the go-sdk notifies only all).
	send mcp.MethodHandler
}

// listener is an open subscriptions/listen stream that takes tools/list_changed.
type listener struct {
	ctx    context.Context // the listen request's: a notification sent with it goes onto that stream
	sub    any             // its subscription id (the listen request's id), stamped on every notification
	caller auth.Identity
}

// maxRememberedCallers bounds the sessions remembered between two prunings (a session that ended is forgotten at
// the next policy change, or when this many are remembered).
const maxRememberedCallers = 4096

// rememberCaller is the receiving middleware that records the caller of each stateful session (streamable HTTP
// with a session id, legacy SSE, stdio), from the notification that ends its initialisation and its tools/list
// requests.
func (s *Server) rememberCaller(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "subscriptions/listen" {
			ss, ok := req.GetSession().(*mcp.ServerSession)
			id, known := s.callerOf(ctx, req.GetExtra())
			if !ok || ss == nil || !known {
				return next(ctx, method, req)
			}
			c := s.callers
			c.mu.Lock()
			c.listening[ss] = id
			c.mu.Unlock()
			defer func() {
				c.mu.Lock()
				delete(c.listening, ss)
				delete(c.listens, ss)
				c.mu.Unlock()
			}()
			return next(ctx, method, req)
		}
		if method == "notifications/initialized" || method == "tools/list" {
			if ss, ok := req.GetSession().(*mcp.ServerSession); ok && ss != nil && stateful(ss) {
				if id, ok := s.callerOf(ctx, req.GetExtra()); ok {
					s.callers.remember(s, ss, id)
				}
			}
		}
		return next(ctx, method, req)
	}
}

// listenAcked is the sending middleware that sees the acknowledgement a subscriptions/listen stream gets first:
// a stream that takes tools/list_changed is remembered with its context and subscription id.
func (s *Server) listenAcked(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "notifications/subscriptions/acknowledged" {
			ss, ok := req.GetSession().(*mcp.ServerSession)
			p, isAck := req.GetParams().(*mcp.SubscriptionsAcknowledgedParams)
			if ok && ss != nil && isAck && p != nil && p.Notifications.ToolsListChanged {
				c := s.callers
				c.mu.Lock()
				if id, listening := c.listening[ss]; listening {
					c.listens[ss] = listener{ctx: ctx, sub: p.Meta[mcp.MetaKeySubscriptionID], caller: id}
				}
				c.mu.Unlock()
			}
		}
		return next(ctx, method, req)
	}
}

func (c *sessionCallers) remember(s *Server, ss *mcp.ServerSession, id auth.Identity) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.by) >= maxRememberedCallers {
		c.pruneLocked(s)
	}
	c.by[ss] = id
}

// pruneLocked forgets the sessions that ended (c.mu held).
func (c *sessionCallers) pruneLocked(s *Server) {
	live := map[*mcp.ServerSession]bool{}
	for ss := range s.mcp.Sessions() {
		live[ss] = true
	}
	for ss := range c.by {
		if !live[ss] {
			delete(c.by, ss)
		}
	}
}

// followPolicy tells the sessions whose callers may list other tools than before when the policy in force is not
// the one they were last told about. The sync loop calls it after every routing table (a policy change is
// announced as one: the policy actor tells the table's followers again).
func (s *Server) followPolicy(t *routing.RouteTable) {
	now := s.cases.AccessPolicy()
	c := s.callers
	c.mu.Lock()
	old := c.policy
	if now == old || (now.Empty() && old.Empty()) || (now != nil && old != nil && reflect.DeepEqual(now.Document(), old.Document())) {
		c.policy = now // a reload of the same document (every node reloads on every profile change) changes nothing
		c.mu.Unlock()
		return
	}
	c.policy = now
	c.pruneLocked(s)
	type group struct {
		id       auth.Identity
		sessions []*mcp.ServerSession
		listens  map[*mcp.ServerSession]listener
	}
	groups := map[string]*group{}
	groupOf := func(id auth.Identity) *group {
		k := identityKey(id)
		g := groups[k]
		if g == nil {
			g = &group{id: id, listens: map[*mcp.ServerSession]listener{}}
			groups[k] = g
		}
		return g
	}
	for ss, id := range c.by {
		if stateful(ss) {
			g := groupOf(id)
			g.sessions = append(g.sessions, ss)
		}
	}
	for ss, l := range c.listens {
		if l.ctx.Err() == nil {
			groupOf(l.caller).listens[ss] = l
		}
	}
	c.mu.Unlock()
	if len(groups) == 0 {
		return
	}
	// The backend tools listed; search-first, only the meta-tools are, but search_aggregated_tools' description
	// counts the tools the caller may see (policyList), so a change of those changes the listing too.
	var names []string
	if s.searchFirst {
		for _, e := range t.CallableIn(s.opts.Scope) {
			names = append(names, e.Name)
		}
	} else {
		s.mu.Lock()
		names = make([]string, 0, len(s.exposed))
		for _, e := range s.exposed {
			names = append(names, e.name)
		}
		s.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, g := range groups {
		if !listingChanged(ctx, old, now, g.id, t, names) {
			continue
		}
		s.tellToolsChanged(ctx, "a policy change", g.sessions, g.listens)
	}
}

// tellToolsChanged sends notifications/tools/list_changed to each of sessions (stateful ones) and of listens
// (subscriptions/listen streams, stamped with their subscription id); why names the change in the debug log of a
// failed notification.
func (s *Server) tellToolsChanged(ctx context.Context, why string, sessions []*mcp.ServerSession, listens map[*mcp.ServerSession]listener) {
	c := s.callers
	for _, ss := range sessions {
		if _, err := c.send(ctx, "notifications/tools/list_changed",
			&mcp.ServerRequest[*mcp.ToolListChangedParams]{Session: ss, Params: &mcp.ToolListChangedParams{}}); err != nil {
			s.log.Debug("notify a session of "+why, "session", ss.ID(), "error", err)
		}
	}
	for ss, l := range listens {
		lctx, lcancel := context.WithTimeout(l.ctx, 10*time.Second)
		_, err := c.send(lctx, "notifications/tools/list_changed", &mcp.ServerRequest[*mcp.ToolListChangedParams]{Session: ss,
			Params: &mcp.ToolListChangedParams{Meta: mcp.Meta{mcp.MetaKeySubscriptionID: l.sub}}})
		lcancel()
		if err != nil {
			s.log.Debug("notify a listen stream of "+why, "error", err)
		}
	}
}

// tellAllToolsChanged sends notifications/tools/list_changed to every stateful session of the endpoint and every
// open subscriptions/listen stream that opted in to it: for a change of the listing that changes no tool of the
// go-sdk server (which would tell them itself).
func (s *Server) tellAllToolsChanged(why string) {
	var sessions []*mcp.ServerSession
	for ss := range s.mcp.Sessions() {
		if stateful(ss) {
			sessions = append(sessions, ss)
		}
	}
	c := s.callers
	c.mu.Lock()
	listens := make(map[*mcp.ServerSession]listener, len(c.listens))
	for ss, l := range c.listens {
		if l.ctx.Err() == nil {
			listens[ss] = l
		}
	}
	c.mu.Unlock()
	if len(sessions) == 0 && len(listens) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.tellToolsChanged(ctx, why, sessions, listens)
}

// listingChanged reports whether caller may list other tools of names (canonical names in t) under now than
// under old.
func listingChanged(ctx context.Context, old, now *policy.Set, caller auth.Identity, t *routing.RouteTable, names []string) bool {
	for _, name := range names {
		e, ok := t.Tool(name)
		if !ok {
			continue
		}
		if gateway.ListedUnder(ctx, old, caller, t, e) != gateway.ListedUnder(ctx, now, caller, t, e) {
			return true
		}
	}
	return false
}

// identityKey is what the policy can tell callers apart by: subject, role, whether anonymous or OAuth, and the
// token's claims.
func identityKey(id auth.Identity) string {
	claims, _ := json.Marshal(id.Claims) // map keys are sorted
	return strconv.Quote(id.Name) + "|" + id.Scope.String() + "|" + strconv.FormatBool(id.Anonymous) + "|" +
		strconv.FormatBool(id.OAuth) + "|" + string(claims)
}

// stateful reports whether a session was initialised with a revision that has sessions (before 2026-07-28): the
// endpoint may notify it on its own.
func stateful(ss *mcp.ServerSession) bool {
	p := ss.InitializeParams()
	return p != nil && p.ProtocolVersion < ModernProtocol
}
