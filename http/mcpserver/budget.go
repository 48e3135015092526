package mcpserver

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	segjson "github.com/segmentio/encoding/json"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/gateway/exposure"
	"github.com/mcpgw/aggregator/http/auth"
)

// Token budget of tools/list: when the definitions of every tool an endpoint serves do not fit the budget, tools/list
// lists the meta-tools and, within what is left, the caller's recently called tools, then the catalogue's most
// used, one server's at a time (gateway/exposure). The others stay callable by their alias and are found by
// search_aggregated_tools. The answer says what it left out in its _meta.
const (
	// DefaultTokenBudget is the budget of an endpoint whose Options.TokenBudget is 0: about 50 to 100 typical tool
	// definitions, a few per cent of today's context windows.
	DefaultTokenBudget = 20_000
	// TokenBudgetMetaKey in a tools/list request's _meta sets the caller's budget for that answer (0: no budget);
	// TokenBudgetQuery, a query parameter of the endpoint's URL, likewise for every tools/list of the session.
	TokenBudgetMetaKey = "io.mcpgw.aggregator/tokenBudget"
	TokenBudgetQuery   = "token_budget"
	// OmittedMetaKey in a budgeted tools/list answer's _meta is how many tools the caller may call that it leaves
	// out; BudgetMetaKey is the budget it was chosen for.
	OmittedMetaKey = "io.mcpgw.aggregator/toolsOmitted"
	BudgetMetaKey  = TokenBudgetMetaKey
	// budgetHeader carries TokenBudgetQuery from the HTTP request to the MCP handlers (RequestExtra.Header).
	budgetHeader = "X-Mcp-Aggregator-Token-Budget"
	// usageHalfLife: a call counts half as much for the catalogue's ranking after a day.
	usageHalfLife = 24 * time.Hour
	// orderEvery bounds how often the catalogue's ranking is recomputed for use counts alone (a change of the
	// catalogue recomputes it at the next tools/list).
	orderEvery = 10 * time.Second
)

// budgeting is the endpoint's budget state: use counts and the cached ranking of the exposed tools.
type budgeting struct {
	usage    *exposure.Usage
	mu       sync.Mutex
	order    []exposure.Item
	gen      uint64 // the exposed set's generation the order was made from
	at       time.Time
	remaking bool // a goroutine is making the next order

	// followed is the profile budget (profileBudget) of the last routing table the sync loop saw, once seen; only
	// the sync loop reads and writes them (followBudget).
	followed     int
	followedSeen bool
}

// addMetaTool adds a meta-tool to the go-sdk server and remembers its definition, which a budgeted tools/list
// always lists.
func (s *Server) addMetaTool(t *mcp.Tool, h mcp.ToolHandler) {
	s.mcp.AddTool(t, h)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.metaTools == nil {
		s.metaTools = map[string]metaTool{}
	}
	s.metaTools[t.Name] = metaTool{tool: t, tokens: s.listedTokens(t, exposedEntry{}, false)}
}

type metaTool struct {
	tool   *mcp.Tool
	tokens int
}

// listingTokens is what the whole listing costs: every exposed tool and the meta-tools.
func (s *Server) listingTokens() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	total := s.exposedTokens
	for _, m := range s.metaTools {
		total += m.tokens
	}
	return total
}

// recordUse counts a call of a backend tool (by alias or name) for the budget's ranking.
func (s *Server) recordUse(caller, asked string) {
	if s.budget.usage == nil {
		return
	}
	s.mu.Lock()
	name := asked
	if e, ok := s.exposed[asked]; ok {
		name = e.name
	}
	s.mu.Unlock()
	s.budget.usage.Record(caller, name, time.Now())
}

// budgetOf is the budget of a tools/list request (<= 0: none), the first of: its _meta's, its URL's, its profile's
// (profileBudget), the endpoint's.
func (s *Server) budgetOf(req mcp.Request) int {
	if p, ok := req.GetParams().(*mcp.ListToolsParams); ok && p != nil {
		if v, ok := p.Meta[TokenBudgetMetaKey]; ok {
			if f, ok := v.(float64); ok && f >= 0 && f <= 1e9 {
				return int(f)
			}
		}
	}
	if extra := req.GetExtra(); extra != nil && extra.Header != nil {
		if v := extra.Header.Get(budgetHeader); v != "" {
			if n, err := strconv.Atoi(v); err == nil && n >= 0 {
				return n
			}
		}
	}
	if s.opts.Scope != nil {
		return profileBudget(s.gw.Routes(), s.opts.Scope, s.opts.TokenBudget)
	}
	return s.opts.TokenBudget
}

// profileBudget is the budget of a profile endpoint (scope: its profile, or the profiles a client token is bound
// to), read from the routing table at each request so a profile's change applies at once: a profile's
// TokenBudget, or the endpoint's (def) where it sets none. A union of profiles gets the largest of theirs, none
// (<= 0) when one of them has none: its caller may see each profile's whole listing anyway.
func profileBudget(rt *routing.RouteTable, scope routing.Scope, def int) int {
	if len(scope) == 0 {
		return def
	}
	out := -1
	for i, name := range scope {
		b := def
		if p, ok := rt.Profile(name); ok && p.TokenBudget != nil {
			b = *p.TokenBudget
		}
		if b <= 0 {
			return b
		}
		if i == 0 || b > out {
			out = b
		}
	}
	return out
}

// followBudget tells the endpoint's sessions their tool list changed when the routing table t changes the budget of
// the endpoint's profiles (profileBudget) so that their listing changes: when one of the old and the new budget
// cuts the listing. genBefore is the exposed set's generation before t was synced: when t changed the exposed
// tools too, the go-sdk has told every session already. A session whose client set its own budget (the URL's
// token_budget, a _meta hint) is told too: list_changed only asks it to list again. The main endpoint's budget
// (Options.TokenBudget) does not change while it runs.
func (s *Server) followBudget(t *routing.RouteTable, genBefore uint64) {
	if s.opts.Scope == nil || s.searchFirst {
		return
	}
	b := &s.budget
	now := profileBudget(t, s.opts.Scope, s.opts.TokenBudget)
	old, seen := b.followed, b.followedSeen
	b.followed, b.followedSeen = now, true
	if !seen || now == old {
		return
	}
	s.mu.Lock()
	gen := s.exposedGen
	s.mu.Unlock()
	if gen != genBefore {
		return
	}
	total := s.listingTokens()
	whole := func(limit int) bool { return limit <= 0 || total <= limit }
	if whole(old) && whole(now) {
		return
	}
	s.tellAllToolsChanged("a change of its profile's token budget")
}

// withBudgetQuery carries the endpoint URL's token_budget into a header the MCP handlers read.
func withBudgetQuery(r *http.Request) *http.Request {
	if v := r.URL.Query().Get(TokenBudgetQuery); v != "" {
		r.Header.Set(budgetHeader, v)
	} else {
		r.Header.Del(budgetHeader)
	}
	return r
}

// budgetList answers tools/list within the caller's token budget when the whole toolset does not fit; otherwise
// (and in search-first mode, which lists the meta-tools only) the answer passes as it is. A budgeted answer is one
// page: a request for a further page gets an empty one.
func (s *Server) budgetList(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/list" || s.searchFirst {
			return next(ctx, method, req)
		}
		limit := s.budgetOf(req)
		if limit <= 0 || s.listingTokens() <= limit {
			return next(ctx, method, req)
		}
		id, ok := s.callerOf(ctx, req.GetExtra())
		if !ok {
			return next(ctx, method, req) // the handler answers the missing identity
		}
		out := &mcp.ListToolsResult{Tools: []*mcp.Tool{}}
		if p, ok := req.GetParams().(*mcp.ListToolsParams); ok && p != nil && p.Cursor != "" {
			return out, nil
		}
		left := limit
		s.mu.Lock()
		for _, m := range s.metaTools {
			out.Tools = append(out.Tools, m.tool)
			left -= m.tokens
		}
		s.mu.Unlock()
		rt := s.gw.Routes()
		keep := s.cases.ListFilter(ctx, id, rt)
		var allowed func(exposure.Item) bool
		if keep != nil {
			allowed = func(it exposure.Item) bool {
				e, found := rt.Tool(it.Name)
				return !found || keep(e)
			}
		}
		chosen, more := exposure.Choose(s.budgetOrder(), s.budget.usage.Recent(actorName(id)), max(left, 0), allowed)
		s.mu.Lock()
		for _, it := range chosen {
			if e, ok := s.exposed[it.Alias]; ok && e.tool != nil {
				out.Tools = append(out.Tools, e.tool)
			}
		}
		s.mu.Unlock()
		out.Meta = mcp.Meta{OmittedMetaKey: more, BudgetMetaKey: limit}
		return out, nil
	}
}

// budgetOrder is the exposed tools ranked for a budgeted listing (exposure.Order). It is remade when the exposed set
// changed or orderEvery passed, in the background while an older one serves (ranking 10,000 tools takes
// milliseconds, which a tools/list should not wait for); only the first is made in the request.
func (s *Server) budgetOrder() []exposure.Item {
	s.mu.Lock()
	gen := s.exposedGen
	s.mu.Unlock()
	b := &s.budget
	b.mu.Lock()
	order, fresh := b.order, b.gen == gen && time.Since(b.at) < orderEvery
	if order != nil && !fresh && !b.remaking {
		b.remaking = true
		go func() {
			o, g := s.rankExposed()
			b.mu.Lock()
			b.order, b.gen, b.at, b.remaking = o, g, time.Now(), false
			b.mu.Unlock()
		}()
	}
	b.mu.Unlock()
	if order != nil {
		return order
	}
	o, g := s.rankExposed()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.order, b.gen, b.at = o, g, time.Now()
	return o
}

// rankExposed ranks the exposed tools by use, then one server's at a time (by server, then alias).
func (s *Server) rankExposed() ([]exposure.Item, uint64) {
	s.mu.Lock()
	gen := s.exposedGen
	items := make([]exposure.Item, 0, len(s.exposed))
	for alias, e := range s.exposed {
		items = append(items, exposure.Item{Alias: alias, Name: e.name, Server: e.server, Tokens: e.tokens})
	}
	s.mu.Unlock()
	sortItems(items)
	w := s.budget.usage.Weights(time.Now())
	return exposure.Order(items, func(n string) float64 { return w[n] }), gen
}

// listedTokens estimates what a tool costs as tools/list serves it (described, see describeTool), JSON and all.
func (s *Server) listedTokens(t *mcp.Tool, e exposedEntry, backendTool bool) int {
	// segmentio's encoder writes encoding/json's bytes for a tool (TestToolEncodingMatchesEncodingJSON) at a third of
	// its cost: every exposed tool is counted when the table changes.
	b, err := segjson.Marshal(s.describeTool(t, e, backendTool))
	if err != nil {
		return 0
	}
	return exposure.Tokens(b)
}

// sortItems orders items by server, then alias.
func sortItems(items []exposure.Item) {
	slices.SortFunc(items, func(a, b exposure.Item) int {
		if c := strings.Compare(a.Server, b.Server); c != 0 {
			return c
		}
		return strings.Compare(a.Alias, b.Alias)
	})
}

// listFound adds what a search found to the caller's budgeted listing (exposure.Usage.Found): a client that calls
// only the tools it lists can then call them. When the endpoint's listing is budgeted, the searching session is
// told its list changed (a 2025-11-25 session; a 2026-07-28 client lists again when it wants).
func (s *Server) listFound(ctx context.Context, req *mcp.CallToolRequest, id auth.Identity, hits []gateway.SearchHit) {
	if s.searchFirst || len(hits) == 0 {
		return
	}
	names := make([]string, 0, len(hits))
	for _, h := range hits {
		if h.Tool != nil {
			names = append(names, h.Tool.Name)
		}
	}
	s.budget.usage.Found(actorName(id), names)
	limit := s.budgetOf(req)
	if limit <= 0 || s.listingTokens() <= limit || req.Session == nil || !stateful(req.Session) || s.callers == nil || s.callers.send == nil {
		return
	}
	if _, err := s.callers.send(ctx, "notifications/tools/list_changed",
		&mcp.ServerRequest[*mcp.ToolListChangedParams]{Session: req.Session, Params: &mcp.ToolListChangedParams{}}); err != nil {
		s.log.Debug("notify a session of the tools its search added to its listing", "error", err)
	}
}
