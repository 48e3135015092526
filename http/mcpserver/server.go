// Package mcpserver is the aggregator's own MCP endpoint: one go-sdk server that lists every tool of every
// CONNECTED or DEGRADED backend under a client-safe alias, plus the aggregator's meta-tools, and routes each call
// through the use-case layer (package gateway) to the actors. It is served over streamable HTTP (/mcp), legacy SSE
// (/sse) and stdio. It runs on net/http rather than Fiber because Fiber's adaptor buffers whole responses, which
// would stop progress notifications and SSE streams from streaming.
package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	segjson "github.com/segmentio/encoding/json"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/internal/gopool"
	"github.com/mcpgw/aggregator/internal/telemetry"

	"github.com/mcpgw/aggregator/actors/requestid"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/gateway/exposure"
	"github.com/mcpgw/aggregator/gateway/tasks"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/internal/validate"
	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// Gateway is what the endpoint needs of the actor system: the admin Control plus a subscription to routing table
// changes (actors.System implements it).
type Gateway interface {
	actors.Control
	OnRoutesChanged(fn func(*routing.RouteTable)) (cancel func())
	// CallResult is Control.Call returning the go-sdk result object (no JSON round trip on one node).
	CallResult(ctx context.Context, r routing.Route, argsJSON []byte, progress func(*pb.Progress)) (*mcp.CallToolResult, *pb.CallToolReply, error)
}

// Options configure the endpoint.
type Options struct {
	Logger *slog.Logger
	// Version is reported in initialize.
	Version string
	// Metrics records the aggregator's share of each call (nil: nothing).
	Metrics *metrics.Metrics
	// SearchFirst lists only the meta-tools: clients with hundreds of backend tools search, then call (by
	// execute_external_tool, or by a tool's alias or namespaced name, which still work), instead of carrying
	// every schema in their context.
	SearchFirst bool
	// TokenBudget bounds the tokens of a tools/list answer when the whole toolset does not fit (budget.go):
	// DefaultTokenBudget when 0, none when negative. A client may ask for its own (TokenBudgetMetaKey,
	// TokenBudgetQuery).
	TokenBudget int
	// ConsoleURL is the web console's address (http://host:port/ui/): a call that needs the caller's own credential
	// asks a client that supports URL-mode elicitation to open the console's page for it (credential_ask.go).
	// Empty: such calls answer CREDENTIAL_REQUIRED at once.
	ConsoleURL string
	// Limiter rate-limits calls of backend tools and execute_external_tool per client (nil: no limit).
	Limiter *auth.Limiter
	// RequireIdentity refuses tool calls that carry no identity (set when tokens are configured; the HTTP listener
	// is then behind auth.Middleware). Without it such calls (stdio, auth off) act as an anonymous admin.
	RequireIdentity bool
	// AliasSeparator joins server and tool in the aliases (actors.Config.AliasSeparator; "__" when empty), named
	// in the server's instructions.
	AliasSeparator string
	// AskTimeout bounds the meta-tools' waits for an actor or the store (actors.Config.AskTimeout; 5 s when 0).
	AskTimeout time.Duration
	// SessionIdleTimeout ends a streamable HTTP session that sent no request for this long (10 minutes when 0;
	// negative: never). Legacy SSE sessions end when their stream closes.
	SessionIdleTimeout time.Duration
	// MaxSessions caps the sessions open at once over /mcp and /sse (1000 when 0; negative: no cap), and
	// MaxSessionsPerClient those of one client, by token name or, without auth, IP (100 when 0; negative: no cap).
	MaxSessions, MaxSessionsPerClient int
	// MaxCallsPerServer is reported in a SERVER_BUSY answer (actors' limit of calls in flight per server; 0: not
	// reported).
	MaxCallsPerServer int
	// HostGuarded says the listener checks Host and Origin itself (auth.HostGuard, with its allowed hosts): the
	// go-sdk's built-in loopback Host check is then off, so every MCP route decides alike.
	HostGuarded bool
	// InstanceID is the daemon's instance id for loop detection (loop.go); empty: the gateway's, if it has one.
	InstanceID string
	// InputWait is how long a call held for a 2026-07-28 client's input (its backend asked the client something)
	// waits for the client's retry before it is cancelled (DefaultInputWait when 0). See roundtrip.go.
	InputWait time.Duration
	// Gateway runs the calls, registrations and searches the tools decode and encode (nil: one over the Gateway
	// argument of New, with Metrics). The daemon shares one with REST.
	Gateway *gateway.Gateway
	// Tasks runs task-augmented tools/call requests and serves the tasks/* methods on streamable HTTP (tasks.go;
	// nil: tasks are not offered).
	Tasks *tasks.Manager
	// Scope restricts the endpoint to some profiles' tools (nil: every tool): it lists, resolves, searches and
	// executes only those, and a tool outside is not found. Views makes one such endpoint per profile (and per
	// set of profiles a client token is bound to).
	Scope routing.Scope
}

// Defaults of Options.
const (
	DefaultSessionIdleTimeout   = 10 * time.Minute
	DefaultMaxSessions          = 1000
	DefaultMaxSessionsPerClient = 100
	defaultAskTimeout           = 5 * time.Second
)

// Server is the aggregated MCP server. Its tool set follows the routing table: every change (connect, disconnect,
// rediscovery, health) adds or removes tools, and the go-sdk tells connected clients with tools/list_changed.
type Server struct {
	// heldCalls runs the calls of 2026-07-28 clients that can be asked for input (callRoundTrip), on goroutines kept
	// between calls (internal/gopool).
	heldCalls   *gopool.Pool
	gw          Gateway
	cases       *gateway.Gateway // the use cases (Options.Gateway)
	hostGuarded bool
	searchFirst bool
	store       persistence.Store
	log         *slog.Logger
	metrics     *metrics.Metrics
	mcp         *mcp.Server
	stop        func()
	syncCh      chan *routing.RouteTable
	limiter     *auth.Limiter
	// requireIdentity: see Options.RequireIdentity.
	requireIdentity bool
	opts            Options
	sessions        *sessionTable
	callers         *sessionCallers   // who each session's caller is, for policy changes (listchanged.go)
	skills          map[string]string // skill id -> name, for search_aggregated_tools' description (read only)
	notifyLog       *summary
	// instanceID: see Options.InstanceID.
	instanceID string

	backendTool  mcp.ToolHandler // s.callBackend, made once
	held         *heldCalls      // calls of 2026-07-28 clients waiting for their input
	taskSessions *ownerSessions  // the sessions of each task owner (tasks_relay.go)
	streams      *streamTaps     // the sessions' open standalone streams, for task notifications (tasks_notify.go)
	fronts       *frontSessions  // the SSE and stdio sessions, by our own id (tasks_front.go)
	listeners    *taskListeners  // the 2026-07-28 listen streams that take task status (tasks_listen.go)
	remote       *remoteInputs   // other nodes' tasks' pending requests relayed to sessions here (tasks_remote.go)
	stopNotify   func()
	fast         *fastCalls // the fast path of tools/call (fastcall.go)

	mu      sync.Mutex
	exposed map[string]exposedEntry // by alias: the backend tools added to the go-sdk server
	// exposedTokens is the estimated size of every exposed tool's definition, exposedGen counts the changes of the
	// exposed set, metaTools are the meta-tools' definitions (budget.go).
	exposedTokens int
	exposedGen    uint64
	metaTools     map[string]metaTool
	budget        budgeting
	keySeed       maphash.Seed // of entryKey
	done          chan struct{}

	// feat: the backends' prompts and resources (features.go; nil when the gateway serves tools only).
	feat *features
}

// exposedEntry is what the endpoint remembers of a backend tool it added: a hash of what the tool was made from
// (to add again only what changed) and its canonical and server names, which tools/list puts in its _meta
// (describeTools). The names are the routing table's strings, not copies.
type exposedEntry struct {
	key          uint64
	name, server string
	// served is the version of the server's served tools the entry was made from (0: not known).
	served uint64
	// tool is the definition given to the go-sdk server; tokens its estimated size (budget.go).
	tool   *mcp.Tool
	tokens int
}

// New builds the endpoint and starts following the routing table until Close.
func New(gw Gateway, store persistence.Store, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Version == "" {
		opts.Version = actors.Version
	}
	if opts.AliasSeparator == "" {
		opts.AliasSeparator = "__"
	}
	if opts.AskTimeout <= 0 {
		opts.AskTimeout = defaultAskTimeout
	}
	if opts.SessionIdleTimeout == 0 {
		opts.SessionIdleTimeout = DefaultSessionIdleTimeout
	}
	if opts.MaxSessions == 0 {
		opts.MaxSessions = DefaultMaxSessions
	}
	if opts.MaxSessionsPerClient == 0 {
		opts.MaxSessionsPerClient = DefaultMaxSessionsPerClient
	}
	if opts.TokenBudget == 0 {
		opts.TokenBudget = DefaultTokenBudget
	}
	if opts.Gateway == nil {
		opts.Gateway = gateway.New(gw, gateway.Options{Metrics: opts.Metrics})
	}
	s := &Server{heldCalls: gopool.New(), gw: gw, cases: opts.Gateway, hostGuarded: opts.HostGuarded, searchFirst: opts.SearchFirst, store: store, log: opts.Logger, metrics: opts.Metrics, exposed: map[string]exposedEntry{}, keySeed: maphash.MakeSeed(),
		syncCh: make(chan *routing.RouteTable, 1), done: make(chan struct{}), held: newHeldCalls(), taskSessions: newOwnerSessions(), streams: newStreamTaps(), fronts: newFrontSessions(), listeners: newTaskListeners(), remote: newRemoteInputs(), stopNotify: func() {},
		limiter: opts.Limiter, requireIdentity: opts.RequireIdentity, opts: opts, instanceID: instanceIDOf(gw, opts)}
	// The go-sdk logs every session at info, and a failed notification once per session: keep its warnings, and
	// fold the per-session notification failures into one line per event.
	s.notifyLog = newSummary(opts.Logger, "calling notifications/", "notifying MCP sessions failed")
	sopts := &mcp.ServerOptions{
		Logger:       actors.QuietLogger(slog.New(s.notifyLog), slog.LevelWarn),
		Instructions: instructions(opts.AliasSeparator),
	}
	s.featureOptions(sopts)
	impl := &mcp.Implementation{Name: "mcp-aggregator", Title: "MCP aggregator", Version: opts.Version}
	s.mcp = mcp.NewServer(impl, sopts)
	s.backendTool = s.callBackend
	s.budget.usage = exposure.NewUsage(usageHalfLife)
	s.sessions = newSessionTable(s)
	s.callers = &sessionCallers{by: map[*mcp.ServerSession]auth.Identity{}, listening: map[*mcp.ServerSession]auth.Identity{},
		listens: map[*mcp.ServerSession]listener{}, policy: s.cases.AccessPolicy()}
	// The request's span (telemetry.ServerMiddleware) is outermost: it covers all the rest. trackCalls is next so
	// that every tool call of a session, also one canonicalNames answers itself, is cancelled when the session is
	// deleted.
	s.mcp.AddReceivingMiddleware(telemetry.ServerMiddleware, s.trackCalls, s.canonicalNames, s.promptNames, s.reportInstance, s.rememberCaller, s.policyList, s.budgetList)
	s.mcp.AddSendingMiddleware(restoreElicitSchema, s.listenAcked)
	if opts.Tasks != nil {
		s.mcp.AddReceivingMiddleware(s.bindFront, s.taskCapability, s.taskTools)
		s.stopNotify = opts.Tasks.OnStatus(func(t persistence.Task) {
			s.notifyTaskStatus(t)
			s.notifyTaskListeners(t)
			s.remoteInputStatus(t)
		})
	}
	// The sending chain as it stands now (every sending middleware added), to notify one session of a policy change.
	s.mcp.AddSendingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler { s.callers.send = next; return next })
	s.fast = newFastCalls(s, impl) // after every other receiving middleware: it captures the whole chain
	s.addMetaTools()
	// The table as it stands is applied before the endpoint serves anything: a scoped view (views.go) is made on
	// its first request, which must list what the table already routes. Changes from then on reach the sync loop.
	s.stop = gw.OnRoutesChanged(s.enqueue)
	s.apply(gw.Routes())
	go s.syncLoop()
	s.startFeatures()
	return s
}

// instructions tells the client how the tools are named.
func instructions(sep string) string {
	return "This server aggregates the tools of many MCP servers. Backend tools are named " +
		"{server}" + sep + "{tool}; search_aggregated_tools finds tools by what they do, execute_external_tool calls " +
		"any tool by its namespaced name {server}.{tool}."
}

// Close stops following the routing table.
func (s *Server) Close() {
	s.stopNotify()
	s.stop()
	s.stopFeatures()
	s.fast.close()
	close(s.done)
	s.notifyLog.flush()
}

// StreamableHandler serves MCP over streamable HTTP (stateful sessions). Sessions idle for
// Options.SessionIdleTimeout end; new sessions beyond Options.MaxSessions or Options.MaxSessionsPerClient are
// refused; a DELETE cancels the session's calls in flight before ending it.
func (s *Server) StreamableHandler() http.Handler {
	timeout := s.opts.SessionIdleTimeout
	if timeout < 0 {
		timeout = 0
	}
	logger := actors.QuietLogger(s.log, slog.LevelWarn)
	server := func(*http.Request) *mcp.Server { return s.mcp }
	sdk := mcp.NewStreamableHTTPHandler(server,
		&mcp.StreamableHTTPOptions{Logger: logger, SessionTimeout: timeout, DisableLocalhostProtection: s.hostGuarded})
	// Protocol 2026-07-28 has no sessions, and the go-sdk serves it over HTTP only from a stateless handler: one
	// beside the stateful one, on the same server (tools, prompts, resources, notifications), chosen per request.
	modern := mcp.NewStreamableHTTPHandler(server,
		&mcp.StreamableHTTPOptions{Logger: logger, Stateless: true, DisableLocalhostProtection: s.hostGuarded})
	return s.LoopGuard(s.taskRequests(s.fast.handler(s.sessions.streamable(sdk, s.fast.modernHandler(modern)))))
}

// ModernProtocol is the first protocol revision without sessions (SEP-2575): its requests carry their version in
// the Mcp-Protocol-Version header, and the client's capabilities in each request's _meta.
const ModernProtocol = "2026-07-28"

// isModern reports whether an HTTP request to the streamable endpoint speaks a sessionless revision (2026-07-28 or
// later; revisions are dates, so they order as strings). A request of an older revision carries a session id, or
// is an initialize without the header.
func isModern(r *http.Request) bool {
	return r.Header.Get("Mcp-Session-Id") == "" && r.Header.Get("Mcp-Protocol-Version") >= ModernProtocol
}

// SSEHandler serves MCP over the legacy HTTP+SSE transport; a session lasts as long as its stream and counts
// against the same caps.
func (s *Server) SSEHandler() http.Handler {
	return s.LoopGuard(s.sseTasks(s.sessions.legacy(mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return s.mcp },
		&mcp.SSEOptions{DisableLocalhostProtection: s.hostGuarded}))))
}

// RunStdio serves one client over stdin/stdout until ctx ends or the client leaves.
func (s *Server) RunStdio(ctx context.Context) error {
	if s.opts.Tasks != nil {
		return s.runStdioTasks(ctx, os.Stdin, os.Stdout) // tasks_stdio.go
	}
	return s.mcp.Run(ctx, &mcp.StdioTransport{})
}

// enqueue hands the newest table to the sync loop without blocking the router (older pending tables are dropped:
// only the newest matters).
func (s *Server) enqueue(t *routing.RouteTable) {
	for {
		select {
		case s.syncCh <- t:
			return
		default:
			select {
			case <-s.syncCh:
			default:
			}
		}
	}
}

func (s *Server) syncLoop() {
	for {
		select {
		case <-s.done:
			return
		case t := <-s.syncCh:
			s.apply(t)
		}
	}
}

// apply makes the endpoint serve table t: its tools and features, the budget and the access policy.
func (s *Server) apply(t *routing.RouteTable) {
	s.mu.Lock()
	gen := s.exposedGen
	s.mu.Unlock()
	s.sync(t)
	s.followBudget(t, gen)
	s.followPolicy(t)
}

// sync makes the exposed backend tools equal to the table's callable tools. A tool of a server whose served
// tools kept their version (RouteTable.ServedVersion, the router's deltas) is left as it is without looking at it
// again, and one whose entry did not change (entryKey) without decoding its definition and schema again: at
// 10,000 tools the table changes with every classified batch.
func (s *Server) sync(t *routing.RouteTable) {
	s.mu.Lock()
	defer s.mu.Unlock()
	want := map[string]bool{}
	for _, e := range t.CallableIn(s.opts.Scope) {
		if s.searchFirst {
			break // only the meta-tools are listed
		}
		// The router's deltas say when a server's served tools change: while its version stands, its exposed
		// tools stand too (their alias is the key), without hashing them again.
		served := t.ServedVersion(e.SourceServerID)
		old, ok := s.exposed[e.Alias]
		if ok && served != 0 && old.served == served && old.server == e.ServerName {
			want[e.Alias] = true
			continue
		}
		key := entryKey(s.keySeed, e)
		if ok && old.key == key {
			old.served = served
			s.exposed[e.Alias] = old
			want[e.Alias] = true
			continue
		}
		tool, err := exposedTool(e)
		if err != nil {
			s.log.Warn("tool not exposed on the MCP endpoint", "tool", e.Name, "error", err)
			continue
		}
		want[e.Alias] = true
		entry := exposedEntry{key: key, name: e.Name, server: e.ServerName, served: served, tool: tool}
		entry.tokens = s.listedTokens(tool, entry, true)
		s.exposedTokens += entry.tokens - old.tokens // old is the zero entry when the alias is new
		s.exposedGen++
		s.exposed[e.Alias] = entry
		s.mcp.AddTool(tool, s.backendTool)
	}
	var gone []string
	for alias := range s.exposed {
		if e := s.exposed[alias]; !want[alias] {
			gone = append(gone, alias)
			s.exposedTokens -= e.tokens
			s.exposedGen++
			delete(s.exposed, alias)
		}
	}
	if len(gone) > 0 {
		s.mcp.RemoveTools(gone...)
	}
	s.syncFeatures(t)
}

// schemaType reads the "type" member of a schema (has: present, also as null) and whether the schema is a JSON
// object, as decoding it into a map would see them (the last of a repeated member, names matched exactly), without
// decoding the rest: every exposed tool's schema is read when the table changes (TestSchemaType).
func schemaType(schema []byte) (typ any, has, isObject bool) {
	var v struct {
		Type json.RawMessage `json:"type"`
	}
	rest, err := segjson.Parse(schema, &v, segjson.DontMatchCaseInsensitiveStructFields)
	if err != nil || len(bytes.TrimLeft(rest, " \t\r\n")) != 0 || bytes.Equal(bytes.TrimSpace(schema), []byte("null")) {
		return nil, false, false
	}
	if v.Type == nil {
		return nil, false, true
	}
	if err := json.Unmarshal(v.Type, &typ); err != nil {
		return nil, false, false
	}
	return typ, true, true
}

// entryKey hashes everything exposedTool and describeTools make a tool from (64 bits: two different entries of
// one alias collide with a probability of 2⁻⁶⁴, and then only delay that tool's update to its next change).
func entryKey(seed maphash.Seed, e *routing.ToolEntry) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	for _, part := range []string{e.Alias, e.Name, e.ServerName, e.Description} {
		h.WriteString(part)
		h.WriteByte(0)
	}
	h.Write(e.InputSchema)
	h.WriteByte(0)
	h.Write(e.Definition)
	return h.Sum64()
}

// exposedTool is the backend's own tool definition under its alias; tools/list adds its canonical name to _meta
// (describeTools), so that the stored tool needs no _meta map of its own. The go-sdk accepts only object input
// schemas; a tool without a type gets one, anything else is refused.
func exposedTool(e *routing.ToolEntry) (*mcp.Tool, error) {
	var t mcp.Tool
	if len(e.Definition) > 0 {
		if err := json.Unmarshal(e.Definition, &t); err != nil {
			return nil, fmt.Errorf("decode definition: %w", err)
		}
	}
	typ, hasType, isObject := schemaType(e.InputSchema)
	if !isObject { // not an object (or not JSON): the empty object schema
		t.InputSchema = map[string]any{"type": "object"}
	} else if !hasType {
		var schema map[string]any
		if err := json.Unmarshal(e.InputSchema, &schema); err != nil || schema == nil {
			schema = map[string]any{}
		}
		schema["type"] = "object"
		t.InputSchema = schema
	} else if typ != "object" {
		return nil, fmt.Errorf("input schema type %v is not object", typ)
	} else {
		// The stored bytes as they are, shared with the routing table: a decoded schema of every tool would hold
		// several times its text (about 40 MB at 10,000 tools).
		t.InputSchema = json.RawMessage(e.InputSchema)
	}
	if t.OutputSchema != nil {
		if m, ok := t.OutputSchema.(map[string]any); !ok || m["type"] != "object" {
			t.OutputSchema = nil
		}
	}
	t.Name = e.Alias
	t.Description = e.Description
	return &t, nil
}

// canonicalNames lets a client call a backend tool by its canonical {server}.{tool} name (or any name the router
// resolves) even though tools/list shows aliases, and answers the calls the go-sdk's tool set cannot: a tool of a
// known server that is not callable right now (an isError SERVER_UNAVAILABLE result naming the server and its
// state, not "unknown tool"), and a bare name several servers have (-32602 naming the candidates' aliases).
func (s *Server) canonicalNames(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/call" {
			return next(ctx, method, req)
		}
		creq, ok := req.(*mcp.CallToolRequest)
		if !ok || creq.Params == nil {
			return next(ctx, method, req)
		}
		p := creq.Params
		s.mu.Lock()
		_, exposed := s.exposed[p.Name]
		s.mu.Unlock()
		if exposed || isMetaTool(p.Name) {
			return next(ctx, method, req)
		}
		rt := s.gw.Routes()
		route, err := rt.ResolveIn(s.opts.Scope, p.Name, "")
		var amb *routing.AmbiguousToolError
		switch {
		case errors.As(err, &amb):
			e := apierror.RouteError(err, apierror.Resolution{Name: p.Name, Candidates: gateway.Candidates(rt, amb)})
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: e.Message(), Data: mustJSON(e.ToolResult())}
		case err != nil:
			return next(ctx, method, req) // the go-sdk's "unknown tool"
		}
		if s.searchFirst && apierror.NotCallable(route) == nil {
			// Not listed, still callable: run it as execute_external_tool would, by its namespaced name.
			return s.direct(ctx, creq, route.Name)
		}
		// Resolved but not (or not yet) in the go-sdk's tool set: answer it here.
		return s.direct(ctx, creq, p.Name)
	}
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// callBackend routes a call of an exposed tool through the actors, streaming the backend's progress to the client
// when it asked for progress. It is the handler of every backend tool: the go-sdk calls it under the name the tool
// was added with, its alias (one handler instead of a closure per tool).
func (s *Server) callBackend(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	return s.directAt(ctx, req, req.Params.Name, time.Now())
}

// direct runs a direct call of a backend tool (by alias or name): admitted, validated, then through the gateway,
// with the same metadata as execute_external_tool.
func (s *Server) direct(ctx context.Context, req *mcp.CallToolRequest, asked string) (*mcp.CallToolResult, error) {
	return s.directAt(ctx, req, asked, time.Now())
}

func (s *Server) directAt(ctx context.Context, req *mcp.CallToolRequest, asked string, start time.Time) (*mcp.CallToolResult, error) {
	id, denied := s.admitCall(ctx, req)
	if denied != nil {
		return denied, nil
	}
	if fe := validate.ToolName(asked); fe != "" {
		return apierror.Validation([]apierror.FieldError{{Loc: []any{"params", "name"}, Msg: fe, Type: apierror.FieldValueError}}).CallToolResult(), nil
	}
	args, ferrs := validate.Arguments(req.Params.Arguments)
	if len(ferrs) > 0 {
		return apierror.Validation(ferrs).CallToolResult(), nil
	}
	if s.opts.Tasks != nil {
		// A tool its backend runs only as a task is refused without one, as the tasks revision says (tasks.go).
		if e := s.requiresTaskError(asked); e != nil {
			if modernClient(req) {
				// A 2026-07-28 client gets a task only when its request declares the extension (tasks_v2.go).
				return nil, missingTasksCapability("tool " + asked + " runs only as a task")
			}
			return nil, e
		}
	}
	s.recordUse(actorName(id), asked)
	return s.relayedCall(ctx, req, id, gateway.CallRequest{Caller: id, Name: asked, Within: s.opts.Scope, Arguments: args, Start: start})
}

// relayedCall runs a call whose backend's requests and log messages go to its client: over the client's session
// (2025-11-25 and older, see relay.go), or, for a 2026-07-28 client, in the call's answers (roundtrip.go).
func (s *Server) relayedCall(ctx context.Context, req *mcp.CallToolRequest, id auth.Identity, c gateway.CallRequest) (*mcp.CallToolResult, error) {
	ctx = withRequestID(ctx, req)
	c.Progress = progressFunc(ctx, req)
	c.Object = true
	if modernClient(req) {
		return s.callRoundTrip(ctx, req, actorName(id), func(ctx context.Context) (*mcp.CallToolResult, error) {
			return s.call(s.withCredentialAsk(ctx, roundTripRelayOf(ctx), id), c)
		})
	}
	if req != nil && req.Session != nil {
		ctx = s.withCredentialAsk(ctx, sessionRelay{req.Session}, id)
	}
	return s.call(withCallRelay(ctx, req), c)
}

// progressFunc forwards backend progress to the client that asked for it with a progress token.
func progressFunc(ctx context.Context, req *mcp.CallToolRequest) func(*pb.Progress) {
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return nil
	}
	return func(p *pb.Progress) {
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
			ProgressToken: token, Progress: p.Progress, Total: p.Total, Message: p.Message,
		})
	}
}

// call runs a call through the gateway and turns the outcome into an MCP answer: the backend's result unchanged
// with the routing metadata in _meta; a backend's JSON-RPC error as a JSON-RPC error; every other failure (a name
// that does not resolve, an unavailable or busy server, a timeout, an oversized answer, a loop) as a tool error in
// the shared error body.
func (s *Server) call(ctx context.Context, c gateway.CallRequest) (*mcp.CallToolResult, error) {
	res, err := s.cases.Call(ctx, c)
	if err != nil && s.askCredential(ctx, err) {
		res, err = s.cases.Call(ctx, c) // the caller stored their credential meanwhile
	}
	if err != nil {
		return s.callFailure(ctx, err)
	}
	out := res.Object
	if out.Meta == nil {
		out.Meta = mcp.Meta{}
	}
	out.Meta["metadata"] = res.Call.MetadataJSON() // encoded once, without a map of boxed values
	return out, nil
}

// callFailure answers a failed call: the backend's own error (EXECUTION_FAILED) as a JSON-RPC error, an ambiguous
// name with the candidates' aliases, everything else in the shared error body (apierror).
func (s *Server) callFailure(ctx context.Context, err error) (*mcp.CallToolResult, error) {
	var ce *gateway.CallError
	var re *gateway.RouteError
	switch {
	case errors.As(err, &ce) && ce.Info != nil:
		if ce.Info.Code == errcode.ExecutionFailed {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: ce.Info.Message}
		}
		ce.Call.MaxCallsPerServer = s.opts.MaxCallsPerServer
		return apierror.CallError(ce.Call, ce.Info).CallToolResult(), nil
	case errors.As(err, &re):
		r := apierror.Resolution{Name: re.Name, ServerID: re.ServerID, Candidates: re.Candidates()}
		if e := apierror.RouteError(re.Err, r); e != nil {
			return e.CallToolResult(), nil
		}
	}
	return s.failureFor(ctx, err, apierror.Subject{}), nil
}

// withRequestID gives a call the client's X-Request-ID (streamable HTTP and SSE carry the HTTP headers), or a
// new id, so that it can be followed in the logs through the actors to the backend.
func withRequestID(ctx context.Context, req *mcp.CallToolRequest) context.Context {
	if requestid.From(ctx) != "" {
		return ctx
	}
	if req != nil && req.Extra != nil && req.Extra.Header != nil {
		if rid := requestid.Sanitize(req.Extra.Header.Get(requestid.Header)); rid != "" {
			return requestid.With(ctx, rid)
		}
	}
	return requestid.With(ctx, uuid.NewString())
}
