package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/http/api"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/persistence"

	"github.com/mcpgw/aggregator/http/mcpserver"
)

// Relay mode of `aggregator stdio`. A desktop client starts `aggregator stdio` itself, often while `aggregator serve`
// runs on the same store. Each server is owned by one process (actors/placement: Leases), so a stdio process with actors
// of its own would only stand by for the servers the daemon owns (or, worse, take over those it does not run yet).
// So when a live process on the store has an MCP endpoint (a heartbeat with an address: `serve`), stdio starts no
// actor and no backend: it relays the client's session on stdin/stdout to that process's aggregated endpoint,
// message by message, and the tools, calls and notifications all come from there.
//
// The relay speaks the legacy SSE transport to the node: a raw pump of the go-sdk's SSE client connection passes
// every message both ways, including the server's own requests and notifications on the GET stream. (The
// streamable client connection does not work as a raw pump: it opens its standalone GET stream only once the SDK's
// own client session tells it the initialize result.) A session lives in one process: when the node goes away the
// relay ends with an error, and the client starts the command again.

// relayConnectTimeout bounds opening the SSE stream to a node (the node is local and answers at once; one that
// accepts the connection but does not answer is treated as gone).
const relayConnectTimeout = 10 * time.Second

// relayIfServed looks for a live node with an MCP endpoint on the store and, if one accepts a session, relays the
// client on local to it until either side ends; relayed is then true and err is the relay's outcome. relayed is
// false (and err nil) when no such node answers: the caller serves by itself. A node that refuses the relay's token
// ends the command with an error naming what to configure; one that refuses the session otherwise (a session limit)
// ends it with its answer.
//
// With a profile, the relay opens the node's endpoint of that profile (/sse/profiles/{name}).
func relayIfServed(ctx context.Context, cfg config, logger *slog.Logger, local mcp.Transport, profile string) (relayed bool, err error) {
	// The plain store: the relay reads no connection_config, so it needs no credential key (and must not generate one
	// in a data directory it only shares).
	store, err := openStore(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		return false, err
	}
	defer store.Close()
	nodes, err := liveNodes(ctx, store, cfg.Actors.LeaseTTL)
	if err != nil {
		return false, fmt.Errorf("look for a running aggregator process on the store: %w", err)
	}
	if len(nodes) == 0 {
		logger.Info("mode: standalone; no aggregator process with an MCP endpoint runs on this store, so this process " +
			"starts the registered servers itself (each owned through its lease)")
		return false, nil
	}
	tok, err := relayToken(os.LookupEnv)
	if err != nil {
		return false, err
	}
	for _, n := range nodes {
		remote, err := dialNode(ctx, n, tok, cfg.Actors.MaxMessageBytes, relayConnectTimeout, ssePath(profile))
		if err != nil {
			if ctx.Err() != nil {
				return true, nil // a signal while connecting
			}
			if skippable(err) {
				logger.Warn("an aggregator process on this store has a fresh heartbeat but does not answer: not relaying to it",
					"node", n.ID, "address", n.Address, "error", err)
				continue
			}
			return true, relayConnectError(n, tok, err)
		}
		logger.Info("mode: relay; serving MCP on stdio through the aggregator process on this store (its servers, tools and "+
			"calls; no server is started here)", "node", n.ID, "address", n.Address, "store", store.Kind(), "token", tok.describe())
		lc, err := local.Connect(ctx)
		if err != nil {
			remote.Close()
			return true, fmt.Errorf("stdio: %w", err)
		}
		return true, relay(ctx, lc, remote, n, watchNode(store, n, cfg.Actors.LeaseTTL, logger), logger)
	}
	logger.Info("mode: standalone; no aggregator process on this store answers, so this process starts the registered " +
		"servers itself (each owned through its lease)")
	return false, nil
}

// liveNodes lists the nodes with an MCP endpoint whose heartbeat is recent (within three lease TTLs: a node writes
// one every third of a TTL), newest heartbeat first.
func liveNodes(ctx context.Context, store persistence.Store, ttl time.Duration) ([]persistence.Node, error) {
	nodes, err := store.ListNodes(ctx, 3*ttl)
	if err != nil {
		return nil, err
	}
	out := nodes[:0:0]
	for _, n := range nodes {
		if n.Address != "" {
			out = append(out, n)
		}
	}
	slices.SortStableFunc(out, func(a, b persistence.Node) int { return b.HeartbeatAt.Compare(a.HeartbeatAt) })
	return out, nil
}

// relayAuth is the bearer token the relay presents, and where it was configured (logged instead of the token).
type relayAuth struct {
	token, source string
}

func (a relayAuth) describe() string {
	if a.token == "" {
		return "none"
	}
	return a.source
}

// relayToken picks the token the relay sends from the same settings `serve` reads (already validated by
// loadConfig): the first admin token if any (MCP_AGGREGATOR_ADMIN_TOKENS, then the admin lines of
// MCP_AGGREGATOR_TOKENS_FILE), else the first client token (MCP_AGGREGATOR_CLIENT_TOKENS, then the file's client
// lines): auth.FirstToken. None: the zero relayAuth.
func relayToken(lookup func(string) (string, bool)) (relayAuth, error) {
	get := func(name string) string {
		v, _ := lookup(name)
		return strings.TrimSpace(v)
	}
	tok, where, err := auth.FirstToken(get("MCP_AGGREGATOR_ADMIN_TOKENS"), get("MCP_AGGREGATOR_CLIENT_TOKENS"), get("MCP_AGGREGATOR_TOKENS_FILE"))
	if err != nil {
		return relayAuth{}, err
	}
	return relayAuth{token: tok, source: where}, nil
}

// relayRefused is an HTTP answer of the node, to the relay's GET or POST, with a status other than 2xx.
type relayRefused struct {
	Method string
	Status int
	Body   string // the start of the answer's body
}

func (e *relayRefused) Error() string {
	msg := fmt.Sprintf("%s answered %d %s", e.Method, e.Status, http.StatusText(e.Status))
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// sessionGone reports whether the refusal says the node no longer has the relayed session (the go-sdk's SSE handler
// answers 404 "session not found", or 400 "session closed" while it ends).
func (e *relayRefused) sessionGone() bool {
	return e.Status == http.StatusNotFound || e.Status == http.StatusBadRequest && strings.Contains(e.Body, "session closed")
}

// relayTransport adds the bearer token to the requests for the node's origin (only there) and turns an answer other
// than 2xx into a *relayRefused error carrying the status and the start of the body. (The go-sdk's SSE client keeps
// only the status text; the relay needs the code to tell an authentication failure, a session that is gone and a
// refused message apart.) Redirects are never followed: the node does not redirect, and a 3xx is refused too.
type relayTransport struct {
	base   http.RoundTripper
	token  string
	origin string // scheme://host[:port] of the node
}

func (t *relayTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.token != "" && originOf(req.URL) == t.origin {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+t.token)
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return resp, nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	resp.Body.Close()
	return nil, &relayRefused{Method: req.Method, Status: resp.StatusCode, Body: strings.TrimSpace(string(body))}
}

func originOf(u *url.URL) string {
	return strings.ToLower(u.Scheme + "://" + u.Host)
}

// errNodeTimeout: the node accepted the connection but did not open the stream in time.
var errNodeTimeout = errors.New("the MCP endpoint did not answer in time")

// dialNode opens an SSE session on the node's aggregated endpoint (Address + /sse). The returned connection lives
// until it is closed or ctx ends; opening it is bounded by timeout. Every SSE event is bounded by maxBytes.
func dialNode(ctx context.Context, node persistence.Node, tok relayAuth, maxBytes int, timeout time.Duration, path string) (mcp.Connection, error) {
	endpoint, err := url.Parse(strings.TrimRight(node.Address, "/") + path)
	if err != nil || endpoint.Host == "" {
		return nil, fmt.Errorf("address %q is not a URL", node.Address)
	}
	base := &http.Transport{
		Proxy:                 nil, // a process on the same store: straight there
		DialContext:           (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0, // the GET's headers come at once; POSTs wait while the node is busy
	}
	client := &http.Client{
		Transport:     &relayTransport{base: base, token: tok.token, origin: originOf(endpoint)},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	sctx, cancel := context.WithCancel(ctx) // the GET stream's life
	timer := time.AfterFunc(timeout, cancel)
	conn, err := (&mcp.SSEClientTransport{Endpoint: endpoint.String(), HTTPClient: client, MaxEventSize: maxBytes}).Connect(sctx)
	if !timer.Stop() {
		if conn != nil {
			conn.Close()
		}
		cancel()
		return nil, errNodeTimeout
	}
	if err != nil {
		cancel()
		base.CloseIdleConnections()
		return nil, err
	}
	return &nodeConn{Connection: conn, stop: func() { cancel(); base.CloseIdleConnections() }}, nil
}

// nodeConn ends the SSE stream's context and the idle connections when closed.
type nodeConn struct {
	mcp.Connection
	stop func()
}

func (c *nodeConn) Close() error {
	err := c.Connection.Close()
	c.stop()
	return err
}

// skippable reports whether a failure to open a session on a node means it is not (or no longer) there: nothing
// listens at its address (its heartbeat is still fresh after a crash), it does not answer, or what answers is not
// an aggregator's MCP endpoint. The next node is tried, else stdio serves by itself.
func skippable(err error) bool {
	var ref *relayRefused
	if errors.As(err, &ref) {
		return ref.Status == http.StatusNotFound
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, errNodeTimeout) || strings.Contains(err.Error(), "missing endpoint")
}

// relayConnectError words a node's refusal of the relay's session; a refused token names what to configure.
func relayConnectError(n persistence.Node, tok relayAuth, err error) error {
	var ref *relayRefused
	if errors.As(err, &ref) && (ref.Status == http.StatusUnauthorized || ref.Status == http.StatusForbidden) {
		what := "this command has no token"
		if tok.token != "" {
			what = "it refused the token of " + tok.source
		}
		return fmt.Errorf("the aggregator process %s at %s requires a bearer token and %s (%d %s); set "+
			"MCP_AGGREGATOR_ADMIN_TOKENS or MCP_AGGREGATOR_CLIENT_TOKENS (or MCP_AGGREGATOR_TOKENS_FILE) in the environment "+
			"of `aggregator stdio` to a token that process accepts (the first admin token is sent, else the first client token)",
			n.ID, n.Address, what, ref.Status, http.StatusText(ref.Status))
	}
	return fmt.Errorf("the aggregator process %s at %s refused a relayed session: %w", n.ID, n.Address, err)
}

// nodeLostError ends a relayed session whose node went away.
type nodeLostError struct {
	node persistence.Node
	why  string
}

func (e *nodeLostError) Error() string {
	return fmt.Sprintf("lost the session with the aggregator process %s at %s: %s; an MCP session cannot move to another "+
		"process, so `aggregator stdio` exits and the MCP client must start it again (it then serves through another "+
		"live process on the store, or by itself)", e.node.ID, e.node.Address, e.why)
}

// errClientLeft ends the relay when the client closes stdin (a normal end).
var errClientLeft = errors.New("the client closed stdin")

// relay passes messages between the client (local) and the node (remote), each direction in order, until the client
// leaves (nil), the node is lost (*nodeLostError), watch reports the node dead, or ctx ends (nil: a signal).
func relay(ctx context.Context, local, remote mcp.Connection, node persistence.Node, watch func(context.Context) error, logger *slog.Logger) error {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ends := make(chan error, 3)
	go func() { ends <- pumpToNode(rctx, local, remote, node, logger) }()
	go func() { ends <- pumpToClient(rctx, remote, local, node, logger) }()
	if watch != nil {
		go func() { ends <- watch(rctx) }()
	}
	var err error
	select {
	case err = <-ends:
	case <-ctx.Done():
	}
	cancel()
	_ = remote.Close()
	_ = local.Close()
	switch {
	case ctx.Err() != nil:
		logger.Info("relay: signal received; the relayed session ends")
		return nil
	case errors.Is(err, errClientLeft):
		logger.Info("relay: the client closed stdin; the relayed session ends")
		return nil
	}
	return err
}

// pumpToNode reads the client's messages from stdin and posts them to the node. A message the node answers with an
// HTTP error (other than "no such session") is not fatal: a request gets a JSON-RPC error from the relay, as it
// would from the go-sdk's server over stdio, and the session goes on. A server/discover is answered by the relay
// (discoverRefused): the session it relays is a legacy one.
func pumpToNode(ctx context.Context, local, remote mcp.Connection, node persistence.Node, logger *slog.Logger) error {
	for {
		msg, err := local.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, io.EOF) {
				return errClientLeft
			}
			return fmt.Errorf("relay: read the client's message on stdin (a message may be at most "+
				"MCP_AGGREGATOR_MAX_MESSAGE_BYTES): %w", err)
		}
		if req, ok := msg.(*jsonrpc.Request); ok && req.Method == methodDiscover && req.IsCall() {
			// The node's legacy SSE session does not serve 2026-07-28, and the go-sdk's SSE handler may still
			// offer it to a server/discover that arrives before it has set what its transport supports: the
			// relay answers it itself, and the client falls back to initialize (an earlier version).
			if err := local.Write(ctx, discoverRefused(req)); err != nil && ctx.Err() == nil {
				return fmt.Errorf("relay: write to stdout: %w", err)
			}
			continue
		}
		err = remote.Write(ctx, msg)
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		var ref *relayRefused
		if !errors.As(err, &ref) {
			return &nodeLostError{node: node, why: lostCause(node, "posting a message failed ("+err.Error()+")")}
		}
		if ref.sessionGone() {
			return &nodeLostError{node: node, why: "it no longer has this session (" + ref.Error() + ")"}
		}
		req, isReq := msg.(*jsonrpc.Request)
		method := ""
		if isReq {
			method = req.Method
		}
		logger.Warn("relay: the aggregator process refused a message of the client", "method", method, "status", ref.Status)
		if isReq && req.IsCall() {
			code := int64(jsonrpc.CodeInvalidRequest)
			if strings.Contains(ref.Body, "unsupported") {
				code = jsonrpc.CodeMethodNotFound
			}
			resp := &jsonrpc.Response{ID: req.ID, Error: &jsonrpc.Error{Code: code,
				Message: "the aggregator process refused the message: " + ref.Error()}}
			if err := local.Write(ctx, resp); err != nil && ctx.Err() == nil {
				return fmt.Errorf("relay: write to stdout: %w", err)
			}
		}
	}
}

// methodDiscover is the request with which a client of the sessionless revision (2026-07-28, SEP-2575) starts.
const methodDiscover = "server/discover"

// discoverRefused is the relay's answer to a client's server/discover: the method is not offered, as the go-sdk
// answers it on a transport without 2026-07-28; a client then falls back to the initialize handshake.
func discoverRefused(req *jsonrpc.Request) *jsonrpc.Response {
	return &jsonrpc.Response{ID: req.ID, Error: &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound,
		Message: fmt.Sprintf("%q is not relayed: the relay speaks the legacy SSE transport to the aggregator process, "+
			"which does not offer protocol %s; initialize with an earlier version", methodDiscover, mcpserver.ModernProtocol)}}
}

// pumpToClient reads the node's messages from the SSE stream and writes them to stdout. The stream's end means the
// session is lost: the node stopped, crashed or closed it.
func pumpToClient(ctx context.Context, remote, local mcp.Connection, node persistence.Node, logger *slog.Logger) error {
	for {
		msg, err := remote.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, io.EOF) {
				return &nodeLostError{node: node, why: lostCause(node, "its stream ended")}
			}
			// A single event that does not decode (the stream goes on).
			logger.Warn("relay: dropped a message of the aggregator process that does not decode", "error", err)
			continue
		}
		if err := local.Write(ctx, msg); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("relay: write to stdout: %w", err)
		}
	}
}

// lostCause completes what went wrong with the session with whether the node still answers: the process is gone
// (its listener no longer answers), or it still runs and ended the session itself.
func lostCause(node persistence.Node, what string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(node.Address, "/")+api.LivePath, nil)
	if err == nil {
		client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			return what + " while the process still answers (it is shutting down, or it ended the session, e.g. after " +
				"a message larger than MCP_AGGREGATOR_MAX_MESSAGE_BYTES)"
		}
	}
	return what + " and the process is gone (it no longer answers)"
}

// watchNode ends the relay when the node stops heartbeating (it hangs, or it lost the store): its SSE stream may
// stay open while it answers nothing. A store that cannot be read says nothing about the node.
func watchNode(store persistence.Store, node persistence.Node, ttl time.Duration, logger *slog.Logger) func(context.Context) error {
	return func(ctx context.Context) error {
		tick := time.NewTicker(ttl)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
			lctx, cancel := context.WithTimeout(ctx, ttl)
			nodes, err := store.ListNodes(lctx, 3*ttl)
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				logger.Debug("relay: cannot read the nodes", "error", err)
				continue
			}
			if !slices.ContainsFunc(nodes, func(n persistence.Node) bool { return n.ID == node.ID }) {
				return &nodeLostError{node: node, why: fmt.Sprintf("it recorded no heartbeat in the store for %s", 3*ttl)}
			}
		}
	}
}

// ssePath is the node's legacy SSE endpoint a relay opens: /sse, or a profile's /sse/profiles/{name}.
func ssePath(profile string) string {
	if profile == "" {
		return "/sse"
	}
	return mcpserver.SSEProfilesPrefix + profile
}
