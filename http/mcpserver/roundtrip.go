package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/internal/telemetry"
)

// A client of protocol 2026-07-28 cannot be sent requests during a call: there is no session to send them on.
// Instead (SEP-2322, "multi round trip") a tool call that needs the client's input answers with the input requests
// and an opaque request state, and the client calls the tool again with its responses and that state. A backend
// of the older revision still asks the aggregator mid-call (elicitation, sampling, roots), and waits for the
// answer. The bridge here joins the two: the backend call keeps running, held by the aggregator under a fresh
// random request state; its requests become the answer's inputRequests; the client's retry (same tool, that state,
// its responses) finds the held call, hands the responses to the waiting backend requests, and waits for the next
// thing the call does: another request (another round) or its result. Each round has a new state, so a state is
// used once, and only the identity that made the call may resume it. A held call the client does not come back to
// within Options.InputWait is cancelled, and the backend's waiting request gets an error.

// DefaultInputWait is how long a call held for a 2026-07-28 client's input waits for its retry, by default.
const DefaultInputWait = 5 * time.Minute

// maxHeldCalls bounds the calls held at once for their clients' input: past it, a backend's request to a
// 2026-07-28 client is refused (the backend gets an error) rather than held.
const maxHeldCalls = 10000

// errHeldGone is what a backend's request gets when its held call ended (expired, or its client left).
var errHeldGone = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the client did not come back with its input in time"}

// heldCalls are the calls of 2026-07-28 clients waiting for their client's retry, by request state.
type heldCalls struct {
	mu    sync.Mutex
	calls map[string]*heldCall
	count atomic.Int64 // calls running with a round-trip relay (held or not), for maxHeldCalls
}

func newHeldCalls() *heldCalls { return &heldCalls{calls: map[string]*heldCall{}} }

// heldCall is one tool call of a 2026-07-28 client whose backend may ask it things.
type heldCall struct {
	owner, tool string // who may resume it, and the tool name it was called by
	asks        chan *inputAsk
	done        chan callOutcome // buffered: the call's outcome
	gone        chan struct{}    // closed when the call is abandoned
	goneOnce    sync.Once
	cancel      context.CancelFunc
	// waiting are the requests handed to the client in the last answer, by input request id; only the handler
	// that holds the call (taken out of heldCalls) touches it.
	waiting map[string]*inputAsk
	next    int
	expiry  *time.Timer
}

type callOutcome struct {
	res *mcp.CallToolResult
	err error
}

// inputAsk is one backend request waiting for the client's response.
type inputAsk struct {
	req   mcp.InputRequest
	reply chan inputAnswer // buffered
}

type inputAnswer struct {
	res mcp.InputResponse
	err error
}

// abandon ends a held call: its backend requests get errHeldGone, and the backend call is cancelled.
func (h *heldCall) abandon() {
	h.goneOnce.Do(func() {
		close(h.gone)
		h.cancel()
	})
}

// ask hands a backend request to the call's client and waits for its response.
func (h *heldCall) ask(ctx context.Context, req mcp.InputRequest) (mcp.InputResponse, error) {
	a := &inputAsk{req: req, reply: make(chan inputAnswer, 1)}
	select {
	case h.asks <- a:
	case <-h.gone:
		return nil, errHeldGone
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case ans := <-a.reply:
		return ans.res, ans.err
	case <-h.gone:
		return nil, errHeldGone
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// park files h under a new request state until its client comes back, or wait passes.
func (hc *heldCalls) park(h *heldCall, wait time.Duration) string {
	var b [18]byte
	_, _ = rand.Read(b[:])
	state := "agg1." + base64.RawURLEncoding.EncodeToString(b[:])
	hc.mu.Lock()
	hc.calls[state] = h
	h.expiry = time.AfterFunc(wait, func() {
		hc.mu.Lock()
		_, still := hc.calls[state]
		delete(hc.calls, state)
		hc.mu.Unlock()
		if still {
			h.abandon()
		}
	})
	hc.mu.Unlock()
	return state
}

// take removes the call parked under state, if owner made it with tool.
func (hc *heldCalls) take(state, owner, tool string) (*heldCall, error) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	h, ok := hc.calls[state]
	if !ok {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "unknown or expired requestState: call the tool again without it"}
	}
	if h.owner != owner || h.tool != tool {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "requestState belongs to another call"}
	}
	delete(hc.calls, state)
	h.expiry.Stop()
	return h, nil
}

// held reports how many calls are parked (for tests and metrics).
func (hc *heldCalls) held() int {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	return len(hc.calls)
}

// roundTripRelayKey carries a 2026-07-28 call's relay to the aggregator's own asks (credential_ask.go).
type roundTripRelayKey struct{}

// roundTripRelayOf is the relay of the 2026-07-28 call running with ctx (nil: none).
func roundTripRelayOf(ctx context.Context) urlAsker {
	if r, ok := ctx.Value(roundTripRelayKey{}).(*roundTripRelay); ok && r != nil {
		return r
	}
	return nil
}

// roundTripRelay is the actors.Relay of a 2026-07-28 client's call: the backend's requests go into the call's
// answer as input requests.
type roundTripRelay struct {
	caps *mcp.ClientCapabilities
	h    *heldCall
	ss   atomic.Pointer[mcp.ServerSession] // the client's request open now, for log messages
}

func (r *roundTripRelay) Supports(method string) bool {
	if r.caps == nil {
		return false
	}
	switch method {
	case "elicitation/create":
		return r.caps.Elicitation != nil
	case "sampling/createMessage":
		return r.caps.Sampling != nil
	case "roots/list":
		return r.caps.RootsV2 != nil
	}
	return false
}

// A relayed request is a span below the call's (telemetry.Relayed) from the backend's request to the client's
// answer in its retry, when the call is traced. A 2026-07-28 client has no session id.

func (r *roundTripRelay) Elicit(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	var out mcp.ElicitResult
	return &out, r.roundTrip(ctx, "elicitation/create", p, &out)
}

func (r *roundTripRelay) CreateMessage(ctx context.Context, p *mcp.CreateMessageParams) (_ *mcp.CreateMessageResult, err error) {
	ctx, end := telemetry.Relayed(ctx, "sampling/createMessage", "")
	defer func() { end(err) }()
	res, err := r.h.ask(ctx, p)
	if err != nil {
		return nil, err
	}
	// The client answers sampling in the 2026-07-28 shape (a list of contents); the older revision the backend
	// asked in has one content.
	var with mcp.CreateMessageWithToolsResult
	if err := recode(res, &with); err != nil {
		return nil, err
	}
	if len(with.Content) != 1 {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("sampling answered with %d contents; the backend takes one", len(with.Content))}
	}
	return &mcp.CreateMessageResult{Meta: with.Meta, Content: with.Content[0], Model: with.Model, Role: with.Role, StopReason: with.StopReason}, nil
}

func (r *roundTripRelay) ListRoots(ctx context.Context, p *mcp.ListRootsParams) (*mcp.ListRootsResult, error) {
	var out mcp.ListRootsResult
	return &out, r.roundTrip(ctx, "roots/list", p, &out)
}

// Log passes a backend's log message to the client's request open now, if any.
func (r *roundTripRelay) Log(ctx context.Context, p *mcp.LoggingMessageParams) {
	if ss := r.ss.Load(); ss != nil {
		_ = ss.Log(ctx, p)
	}
}

func (r *roundTripRelay) roundTrip(ctx context.Context, method string, req mcp.InputRequest, out any) (err error) {
	ctx, end := telemetry.Relayed(ctx, method, "")
	defer func() { end(err) }()
	res, err := r.h.ask(ctx, req)
	if err != nil {
		return err
	}
	return recode(res, out)
}

// recode converts the client's response to the type the backend's request expects.
func recode(in, out any) error {
	raw, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encode the client's response: %w", err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "the client's response does not fit the request: " + err.Error()}
	}
	return nil
}

// modernClient reports whether the call's client speaks 2026-07-28 or later (no session to send requests on).
func modernClient(req *mcp.CallToolRequest) bool {
	if req == nil || req.Session == nil {
		return false
	}
	p := req.Session.InitializeParams()
	return p != nil && p.ProtocolVersion >= ModernProtocol
}

// callRoundTrip runs a 2026-07-28 client's call of a backend tool: a fresh call, or the retry of a held one.
func (s *Server) callRoundTrip(ctx context.Context, req *mcp.CallToolRequest, owner string, start func(context.Context) (*mcp.CallToolResult, error)) (*mcp.CallToolResult, error) {
	if state := req.Params.RequestState; state != "" {
		h, err := s.held.take(state, owner, req.Params.Name)
		if err != nil {
			return nil, err
		}
		for id, a := range h.waiting {
			if res, ok := req.Params.InputResponses[id]; ok && res != nil {
				a.reply <- inputAnswer{res: res}
			} else {
				a.reply <- inputAnswer{err: &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "the client sent no response to input request " + id}}
			}
		}
		clear(h.waiting)
		return s.awaitHeld(ctx, h)
	}
	var caps *mcp.ClientCapabilities
	if p := req.Session.InitializeParams(); p != nil {
		caps = p.Capabilities
	}
	if caps == nil || (caps.Elicitation == nil && caps.Sampling == nil && caps.RootsV2 == nil) {
		return start(ctx) // nothing to ask it: the backend's requests are answered -32601, as for older clients
	}
	if s.held.count.Add(1) > maxHeldCalls {
		s.held.count.Add(-1)
		return start(ctx) // too many held: its backend's requests fail rather than grow memory
	}
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h := &heldCall{owner: owner, tool: req.Params.Name, asks: make(chan *inputAsk), done: make(chan callOutcome, 1),
		gone: make(chan struct{}), cancel: cancel} // waiting: made when the backend first asks
	relay := &roundTripRelay{caps: caps, h: h}
	relay.ss.Store(req.Session)
	// On a goroutine kept between calls: a new one grew its stack through the gateway and the actor ask on every
	// call (issue 26).
	s.heldCalls.Go(func() {
		defer s.held.count.Add(-1)
		defer cancel()
		res, err := start(context.WithValue(actors.WithRelay(cctx, relay), roundTripRelayKey{}, relay))
		h.done <- callOutcome{res, err}
	})
	return s.awaitHeld(ctx, h)
}

// awaitHeld waits for what the call does next: its result, or requests for the client (answered as input requests
// under a new request state). If the client's request ends first, the call is abandoned.
func (s *Server) awaitHeld(ctx context.Context, h *heldCall) (*mcp.CallToolResult, error) {
	select {
	case o := <-h.done:
		return o.res, o.err
	case a := <-h.asks:
		reqs := mcp.InputRequestMap{}
		if h.waiting == nil {
			h.waiting = map[string]*inputAsk{}
		}
		add := func(a *inputAsk) {
			h.next++
			id := "r" + strconv.Itoa(h.next)
			h.waiting[id] = a
			reqs[id] = a.req
		}
		add(a)
		for more := true; more; {
			select {
			case a := <-h.asks:
				add(a)
			default:
				more = false
			}
		}
		wait := s.opts.InputWait
		if wait <= 0 {
			wait = DefaultInputWait
		}
		return &mcp.CallToolResult{InputRequests: reqs, RequestState: s.held.park(h, wait)}, nil
	case <-ctx.Done():
		h.abandon()
		return nil, fmt.Errorf("the client left during the call: %w", ctx.Err())
	}
}
