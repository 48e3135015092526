package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	segjson "github.com/segmentio/encoding/json"

	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/actors/msglimit"
	"github.com/mcpgw/aggregator/actors/requestid"
	"github.com/mcpgw/aggregator/internal/strictjson"
)

// The fast backend hop (issue 26). The go-sdk client costs a call to a streamable HTTP backend five decodes of its
// answer through 32 KiB reading buffers (README, "Where we work around the go-sdk"), a decode of its own params
// to find a protocol version in _meta, and three goroutine hand-offs (the POST's reader, the jsonrpc2 reader, the
// waiting caller). For the commonest call, a plain tools/call on the server's own streamable HTTP session, the
// server actor POSTs the JSON-RPC request itself on the live session (its Mcp-Session-Id and protocol version,
// through the session's own *http.Client: outbound policy, configured headers, hop header, request id, the message
// guard's size bounds and budget, the session's connections) and reads the answer (application/json or an SSE
// stream) on the call's goroutine, decoding it once.
//
// Whether a call takes the hop is decided before anything is sent (fastEligible): never for stdio or SSE, a
// caller's own session (per_user, a relaying client's), a task, a progress token, a traced call (its span and the
// trace context in _meta are the go-sdk middleware's), a backend that has asked its client something, or a session
// on which the hop met an SSE event id (a backend that resumes streams). What arrives on the call's stream besides
// its answer is handled as the go-sdk client would: a notification (log message, progress, list_changed, ...) and a
// request (roots/list, sampling, elicitation) run through the client's own receiving chain (captured as its
// outermost middleware), a request's answer is POSTed back on the session, a ping is answered. A 404 on the session
// id makes the go-sdk session find it gone (a ping, which meets the same 404: session lost, reconnect); an answer
// the go-sdk would fail the connection over (an undecodable body or event, an unexpected HTTP status) closes the
// session, as the go-sdk's failure does. A stream that ends after event ids is resumed with a GET, as the go-sdk does.

// hopIDPrefix starts the ids of the hop's requests: the go-sdk numbers its own, so they never collide.
const hopIDPrefix = "mcp-aggregator-hop-"

// hopMaxErrorBody bounds the body of a refused POST read for its JSON-RPC error.
const hopMaxErrorBody = 64 << 10

// hopMaxDrain bounds what is read after the answer so the connection can be reused.
const hopMaxDrain = 64 << 10

// hopDrainWait bounds how long the rest of a call's stream is read after its answer was handed over (finishTail):
// a backend that keeps the stream open longer loses the connection, never the call's time.
const hopDrainWait = 5 * time.Second

// hopMaxFinishing bounds the streams of one session left to read after their answer at once (hopTail); past it,
// such a stream is read to its end before the answer is handed over, as any other.
const hopMaxFinishing = 64

// hopMaxRetries is the streamable transport's MaxRetries (backend.Dial): resumptions without progress.
const hopMaxRetries = 1

// hopReconnectDelay is the go-sdk's first reconnect delay when the stream named none.
const hopReconnectDelay = time.Second

// errRejected is the go-sdk's jsonrpc2.ErrRejected: the request did not reach the backend (code -32005).
var errRejected = &jsonrpc.Error{Code: -32005, Message: "rejected by transport"}

// fastHop is the fast hop of one streamable HTTP session.
type fastHop struct {
	client   *http.Client
	endpoint string
	hopID    string // the session's HopHeader value (backend.Conn.HopID)
	maxEvent int
	chain    mcp.MethodHandler // the client's receiving chain (capture)
	sess     atomic.Pointer[mcp.ClientSession]
	// off: the backend did something the hop leaves to the go-sdk from now on (SSE event ids: resumable streams).
	off    atomic.Bool
	nextID atomic.Uint64
	taken  atomic.Uint64 // calls sent by the hop (tests)
	events atomic.Uint64 // streams read event by event from the message guard (tests)
	lines  sync.Pool     // of *bufio.Reader: the stream readers of finished calls
	// finishing counts the streams left to read after their answer (hopTail); drainWait is hopDrainWait (tests
	// shorten it).
	finishing atomic.Int32
	drainWait time.Duration
}

// newFastHop returns the hop of a session over b, nil for stdio and SSE.
func newFastHop(b *backend.Conn) *fastHop {
	client, endpoint, maxEvent := b.Streamable()
	if client == nil {
		return nil
	}
	if maxEvent <= 0 {
		maxEvent = 1 << 20
	}
	return &fastHop{client: client, endpoint: endpoint, maxEvent: maxEvent, hopID: b.HopID(), drainWait: hopDrainWait}
}

// capture remembers the client's receiving chain; added last, it is the outermost middleware.
func (h *fastHop) capture(next mcp.MethodHandler) mcp.MethodHandler {
	h.chain = next
	return next
}

// ready reports whether the session can take a fast call: connected with a session id, on a revision with
// sessions, and nothing seen that leaves its calls to the go-sdk.
func (h *fastHop) ready() (*mcp.ClientSession, bool) {
	if h == nil || h.chain == nil || h.off.Load() {
		return nil, false
	}
	sess := h.sess.Load()
	if sess == nil || sess.ID() == "" {
		return nil, false
	}
	ir := sess.InitializeResult()
	if ir == nil || ir.ProtocolVersion != ProtocolVersion && ir.ProtocolVersion != "2025-06-18" {
		return nil, false
	}
	return sess, true
}

// hopMessage is a JSON-RPC message as the go-sdk decodes it (exact keys), fields left raw.
type hopMessage struct {
	JSONRPC json.RawMessage `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   *jsonrpc.Error  `json:"error"`
}

// hopMaxDepth is the go-sdk's bound on nesting (internal/json.defaultMaxDepth).
const hopMaxDepth = 1000

// hopDecode decodes data into v as the go-sdk's internal/json does (segmentio, exact keys, bounded nesting), but
// from the bytes in place: no 32 KiB reading buffer.
func hopDecode(data []byte, v any) error {
	if !strictjson.NestedAtMost(data, hopMaxDepth) {
		return fmt.Errorf("json: exceeded maximum nesting depth of %d", hopMaxDepth)
	}
	rest, err := segjson.Parse(data, v, segjson.DontMatchCaseInsensitiveStructFields)
	if err == nil && len(bytes.TrimSpace(rest)) > 0 {
		err = errors.New("json: data after the value")
	}
	return err
}

// decodeMessage decodes one JSON-RPC message; an error for anything the go-sdk's DecodeMessage refuses.
func decodeMessage(data []byte) (*hopMessage, error) {
	var m hopMessage
	if err := hopDecode(data, &m); err != nil {
		return nil, err
	}
	if string(m.JSONRPC) != `"2.0"` {
		return nil, errors.New("invalid message version tag; expected \"2.0\"")
	}
	if m.Method == "" && len(m.ID) == 0 {
		return nil, errors.New("invalid message: neither a request, a notification nor a response")
	}
	return &m, nil
}

// appendJSONString appends s as a JSON string: as it is between quotes when it is printable ASCII without quotes
// or backslashes (tool names, request ids), else as encoding/json writes it.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// mediaType is a Content-Type's media type, lower case, without parameters.
func mediaType(ct string) string {
	base, _, _ := strings.Cut(ct, ";")
	base = strings.TrimSpace(base)
	switch {
	case strings.EqualFold(base, "application/json"):
		return "application/json"
	case strings.EqualFold(base, "text/event-stream"):
		return "text/event-stream"
	}
	return strings.ToLower(base)
}

// call sends tools/call of tool with args (raw JSON) on sess and returns the raw result.
func (h *fastHop) call(ctx context.Context, sess *mcp.ClientSession, tool string, args json.RawMessage, requestID string, tail *hopTail) (json.RawMessage, error) {
	h.taken.Add(1)
	body := make([]byte, 0, 128+len(tool)+len(args)+len(requestID))
	body = append(body, `{"jsonrpc":"2.0","id":`...)
	start := len(body)
	body = append(body, `"`+hopIDPrefix...)
	body = strconv.AppendUint(body, h.nextID.Add(1), 10)
	body = append(body, '"')
	id := body[start:len(body):len(body)] // the id's JSON text, within body
	body = append(body, `,"method":"tools/call","params":{`...)
	if requestID != "" {
		body = append(body, `"_meta":{"`+RequestIDMetaKey+`":`...)
		body = appendJSONString(body, requestID)
		body = append(body, "},"...)
	}
	body = append(body, `"name":`...)
	body = appendJSONString(body, tool)
	body = append(body, `,"arguments":`...)
	body = append(body, args...)
	body = append(body, "}}"...)

	sid, version := sess.ID(), sess.InitializeResult().ProtocolVersion
	raw, err := h.send(ctx, sess, sid, version, body, id, tail)
	if err != nil && ctx.Err() != nil {
		// As the go-sdk does for a call given up: tell the backend.
		h.cancelled(sess, sid, version, id, ctx.Err())
		return nil, ctx.Err()
	}
	return raw, err
}

// The canonical forms (http.CanonicalHeaderKey) of requestid.Header and backend.HopHeader, the keys a header map
// holds them under (TestHopHeaderKeysCanonical).
const (
	hopRequestIDHeader = "X-Request-Id"
	hopViaHeader       = "Mcp-Aggregator-Via"
)

// hopBody is the body of a hop's POST: its bytes, and the id of the request they carry (nil for a notification or a
// response), which the message guard takes from it instead of reading the body's head again
// (msglimit.RequestIDer; TestRoundTripperTakesTheBodysID, TestFastHopBehavesAsTheGoSDK/big-noid).
type hopBody struct {
	bytes.Reader
	data []byte
	id   json.RawMessage
}

func (b *hopBody) Close() error { return nil }

// JSONRPCRequestID implements msglimit.RequestIDer.
func (b *hopBody) JSONRPCRequestID() json.RawMessage { return b.id }

// reopen is the request's GetBody: the same bytes from the start (a redirect, a retry on a fresh connection).
func (b *hopBody) reopen() (io.ReadCloser, error) {
	c := &hopBody{data: b.data, id: b.id}
	c.Reset(b.data)
	return c, nil
}

// post sends one JSON-RPC message on the session; id is the JSON text of its request id (nil for a notification or
// a response).
func (h *fastHop) post(ctx context.Context, sid, version string, body, id []byte) (*http.Response, error) {
	hb := &hopBody{data: body, id: id}
	hb.Reset(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.endpoint, hb)
	if err != nil {
		return nil, err
	}
	req.ContentLength, req.GetBody = int64(len(body)), hb.reopen
	// The headers by their canonical names in one map and one slice of values; with the request id and the hop
	// header already set, the session's transport sends the request without copying it (backend.Conn.HopID).
	vals := [6]string{"application/json", "application/json, text/event-stream", version, sid}
	req.Header = make(http.Header, 6)
	req.Header["Content-Type"] = vals[0:1:1]
	req.Header["Accept"] = vals[1:2:2]
	req.Header["Mcp-Protocol-Version"] = vals[2:3:3]
	req.Header["Mcp-Session-Id"] = vals[3:4:4]
	if rid := requestid.From(ctx); rid != "" {
		vals[4] = rid
		req.Header[hopRequestIDHeader] = vals[4:5:5]
	}
	if h.hopID != "" {
		vals[5] = h.hopID
		req.Header[hopViaHeader] = vals[5:6:6]
	}
	return h.client.Do(req)
}

// send POSTs the call and reads its answer.
func (h *fastHop) send(ctx context.Context, sess *mcp.ClientSession, sid, version string, body, id []byte, tail *hopTail) (json.RawMessage, error) {
	const summary = `sending "tools/call"`
	resp, err := h.post(ctx, sid, version, body, id)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", summary, errRejected, err)
	}
	if err := h.check(sess, sid, summary, resp); err != nil {
		return nil, err
	}
	switch ct := mediaType(resp.Header.Get("Content-Type")); ct {
	case "application/json":
		return h.readJSON(ctx, sess, sid, version, resp, id)
	case "text/event-stream":
		return h.readStream(ctx, sess, sid, version, resp, id, tail)
	default:
		_ = resp.Body.Close()
		return nil, fmt.Errorf("%s: unsupported content type %q", summary, ct)
	}
}

// check is the go-sdk's checkResponse: a transient status or a JSON-RPC error body is a refusal (the session
// lives on); a 404 on the session id means the backend forgot the session, and any other failure status breaks
// the session, as it breaks the go-sdk's connection. The body is closed on error.
func (h *fastHop) check(sess *mcp.ClientSession, sid, summary string, resp *http.Response) error {
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return nil
	}
	defer resp.Body.Close()
	switch code {
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout,
		http.StatusTooManyRequests: // the go-sdk's isTransientHTTPStatus
		return fmt.Errorf("%w: %s: %v", errRejected, summary, http.StatusText(code))
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, hopMaxErrorBody))
	if m, err := decodeMessage(data); err == nil && m.Method == "" && m.Error != nil {
		return fmt.Errorf("%s: %w: %w: %v", summary, m.Error, errRejected, http.StatusText(code))
	}
	if code == http.StatusNotFound {
		// The go-sdk fails its connection with ErrSessionMissing at its next request: a ping meets the same 404.
		go func() {
			pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = sess.Ping(pctx, nil)
		}()
		return fmt.Errorf("%s: failed to connect (session ID: %v): %w", summary, sid, mcp.ErrSessionMissing)
	}
	err := fmt.Errorf("%s: %v", summary, http.StatusText(code))
	h.fail(sess)
	return err
}

// fail ends the session, as a go-sdk connection failure does: its loss is noticed (session lost) and it reconnects.
func (h *fastHop) fail(sess *mcp.ClientSession) {
	h.off.Store(true)
	go func() { _ = sess.Close() }()
}

// readJSON reads a JSON answer (the message guard bounds it: a larger one arrives as its error answer).
func (h *fastHop) readJSON(ctx context.Context, sess *mcp.ClientSession, sid, version string, resp *http.Response, id []byte) (json.RawMessage, error) {
	data, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		h.fail(sess)
		return nil, fmt.Errorf(`sending "tools/call": failed to read body: %v`, err)
	}
	m, err := decodeMessage(data)
	if err != nil {
		h.fail(sess)
		return nil, fmt.Errorf(`sending "tools/call": failed to decode response: %v`, err)
	}
	if m.Method != "" {
		h.handle(ctx, sess, sid, version, m)
		return nil, errors.New(`sending "tools/call": the backend answered with a message that is not the call's response`)
	}
	if !bytes.Equal(m.ID, id) {
		return nil, fmt.Errorf(`sending "tools/call": the backend answered another request (id %s)`, m.ID)
	}
	return answer(m)
}

// answer is a response's result or error.
func answer(m *hopMessage) (json.RawMessage, error) {
	switch {
	case m.Error != nil:
		return nil, m.Error
	case len(m.Result) == 0 || string(m.Result) == "null":
		return nil, errors.New(`sending "tools/call": the response has neither a result nor an error`)
	}
	return m.Result, nil
}

// readStream reads the call's SSE stream until its answer, handling what comes before it; a stream that ends
// after event ids is resumed (GET with Last-Event-ID), at most hopMaxRetries times without progress.
func (h *fastHop) readStream(ctx context.Context, sess *mcp.ClientSession, sid, version string, resp *http.Response, id []byte, tail *hopTail) (json.RawMessage, error) {
	var prev string
	retries := 0
	for {
		res, done, lastID, delay, err := h.processStream(ctx, sess, sid, version, resp, id, tail)
		if done || err != nil {
			return res, err
		}
		if lastID == "" {
			return nil, errors.New("request terminated without response")
		}
		if lastID != prev {
			prev, retries = lastID, 0
		} else if retries++; retries > hopMaxRetries {
			return nil, fmt.Errorf(`sending "tools/call": exceeded %d retries without progress (session ID: %v)`, hopMaxRetries, sid)
		}
		if delay <= 0 {
			delay = hopReconnectDelay
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.endpoint, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", version)
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Last-Event-ID", lastID)
		if resp, err = h.client.Do(req); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			h.fail(sess)
			return nil, fmt.Errorf(`sending "tools/call": failed to reconnect (session ID: %v): %v`, sid, err)
		}
		if err := h.check(sess, sid, `sending "tools/call"`, resp); err != nil {
			h.fail(sess) // the go-sdk fails its connection when a resumption is refused
			return nil, err
		}
	}
}

// processStream reads one SSE response. done: the call's answer (res or err) was read; otherwise the stream ended
// without it, after event lastID (retry delay as the stream said).
func (h *fastHop) processStream(ctx context.Context, sess *mcp.ClientSession, sid, version string, resp *http.Response, id []byte, tail *hopTail) (res json.RawMessage, done bool, lastID string, delay time.Duration, err error) {
	if src, ok := resp.Body.(msglimit.EventSource); ok {
		return h.processEvents(ctx, sess, sid, version, resp, src, id, tail)
	}
	br, _ := h.lines.Get().(*bufio.Reader)
	if br == nil {
		br = bufio.NewReaderSize(resp.Body, 4096)
	} else {
		br.Reset(resp.Body)
	}
	answered := false
	defer func() {
		// A kept rest is read from the body itself: what br holds past the answer is of no use.
		if !answered || !tail.keep(h, resp.Body) {
			_, _ = io.CopyN(io.Discard, resp.Body, hopMaxDrain)
			_ = resp.Body.Close()
		}
		br.Reset(nil)
		h.lines.Put(br)
	}()
	var data []byte
	var name string
	hasData := false
	st := streamState{}
	for {
		line, rerr := readLine(br, h.maxEvent)
		if rerr != nil {
			if ctx.Err() != nil {
				return nil, true, "", 0, ctx.Err()
			}
			if errors.Is(rerr, errEventTooLarge) {
				h.fail(sess)
				return nil, true, "", 0, fmt.Errorf(`sending "tools/call": %v`, rerr)
			}
			return nil, false, st.lastID, st.delay, nil // the stream ended (or broke): resume or report
		}
		if len(line) > 0 {
			field, value, _ := bytes.Cut(line, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			switch string(field) {
			case "event":
				name = string(value)
			case "id":
				h.eventID(&st, string(value))
			case "retry":
				st.retry(string(value))
			case "data":
				if hasData {
					data = append(data, '\n')
				}
				if len(data)+len(value) > h.maxEvent {
					h.fail(sess)
					return nil, true, "", 0, fmt.Errorf(`sending "tools/call": %v`, errEventTooLarge)
				}
				data, hasData = append(data, value...), true
			}
			continue
		}
		// A blank line ends the event.
		ev, evName := data, name
		data, name, hasData = data[:0], "", false
		if res, done, answered, err = h.event(ctx, sess, sid, version, evName, ev, id); done {
			return res, true, "", 0, err
		}
	}
}

// streamState is what the events of one stream leave for its resumption: the last event id and retry delay.
type streamState struct {
	lastID string
	delay  time.Duration
}

// eventID notes an event id: the stream can be resumed from it, and the session's later calls go to the go-sdk
// (resumable streams).
func (h *fastHop) eventID(st *streamState, id string) {
	st.lastID = id
	h.off.Store(true)
}

// retry notes a retry field (milliseconds).
func (st *streamState) retry(v string) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		st.delay = time.Duration(n) * time.Millisecond
	}
}

// processEvents is processStream on a stream the message guard reads (every response of a session dialled by
// backend.Dial): its events are taken as the guard completed them, with the guard's bounds and replacements, instead
// of re-encoded as text by the guard and parsed again here (issue 26). The fields are the ones the text parser
// above reads back from the guard's encoding (TestFastHopReadsGuardedEvents).
func (h *fastHop) processEvents(ctx context.Context, sess *mcp.ClientSession, sid, version string, resp *http.Response, src msglimit.EventSource, id []byte, tail *hopTail) (res json.RawMessage, done bool, lastID string, delay time.Duration, err error) {
	h.events.Add(1)
	answered := false
	defer func() {
		if !answered || !tail.keep(h, resp.Body) {
			_, _ = io.CopyN(io.Discard, resp.Body, hopMaxDrain)
			_ = resp.Body.Close()
		}
	}()
	st := streamState{}
	for {
		ev, rerr := src.NextEvent()
		if rerr != nil {
			if ctx.Err() != nil {
				return nil, true, "", 0, ctx.Err()
			}
			return nil, false, st.lastID, st.delay, nil // the stream ended (or broke): resume or report
		}
		if ev.ID != "" {
			h.eventID(&st, ev.ID)
		}
		if ev.Retry != "" {
			st.retry(ev.Retry)
		}
		if len(ev.Data) > h.maxEvent {
			h.fail(sess)
			return nil, true, "", 0, fmt.Errorf(`sending "tools/call": %v`, errEventTooLarge)
		}
		if res, done, answered, err = h.event(ctx, sess, sid, version, ev.Name, ev.Data, id); done {
			return res, true, "", 0, err
		}
	}
}

// event handles one complete event of the call's stream; done when it was the call's answer (res or err, answered)
// or broke the session. An answer is decoded into memory of its own (hopDecode copies), not the event's.
func (h *fastHop) event(ctx context.Context, sess *mcp.ClientSession, sid, version, name string, data, id []byte) (res json.RawMessage, done, answered bool, err error) {
	if len(data) == 0 || name != "" && name != "message" {
		return nil, false, false, nil
	}
	m, derr := decodeMessage(data)
	if derr != nil {
		h.fail(sess)
		return nil, true, false, fmt.Errorf(`sending "tools/call": failed to decode event: %v`, derr)
	}
	if m.Method != "" {
		h.handle(ctx, sess, sid, version, m)
		return nil, false, false, nil
	}
	if !bytes.Equal(m.ID, id) {
		return nil, false, false, nil // another request's answer: the go-sdk would not give it to this call either
	}
	res, err = answer(m)
	return res, true, true, err
}

// hopTail is what is left of a call's answer stream once the answer is read from it: the caller hands the answer
// over first and then reads the rest (finishTail), as the go-sdk's client hands an answer over at once and reads on
// its stream. So the answer never waits for the stream's end, even from a backend that keeps the stream open after
// it (closing it is a SHOULD of the protocol, not a MUST), and the connection still serves the next call once the
// stream ends. The call's context must stay alive until finishTail: it is the stream's.
type hopTail struct {
	h    *fastHop
	body io.ReadCloser
}

// keep leaves body for finishTail; false (nothing kept) without a tail or past hopMaxFinishing streams.
func (t *hopTail) keep(h *fastHop, body io.ReadCloser) bool {
	if t == nil {
		return false
	}
	if h.finishing.Add(1) > hopMaxFinishing {
		h.finishing.Add(-1)
		return false
	}
	t.h, t.body = h, body
	return true
}

// finishTail reads the rest of the stream, at most hopMaxDrain bytes for at most the hop's drain wait, and closes
// it; end ends the call's context, which closes the stream's connection when the wait runs out. Nothing to do
// when no stream was kept.
func (t *hopTail) finishTail(end func()) {
	if t.body == nil {
		return
	}
	timer := time.AfterFunc(t.h.drainWait, end)
	_, _ = io.CopyN(io.Discard, t.body, hopMaxDrain)
	_ = t.body.Close()
	timer.Stop()
	t.h.finishing.Add(-1)
	t.body = nil
}

// errEventTooLarge refuses an SSE line or event beyond the bound.
var errEventTooLarge = errors.New("event exceeds the size limit")

// readLine reads one line of an event stream (without its line ending), at most max bytes.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		buf := append([]byte(nil), line...)
		for err == bufio.ErrBufferFull {
			if len(buf) > max {
				return nil, errEventTooLarge
			}
			line, err = br.ReadSlice('\n')
			buf = append(buf, line...)
		}
		line = buf
	}
	if err != nil {
		return nil, err
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r")), nil
}

// handle runs a backend's notification or request read on a fast call's stream through the client's receiving
// chain, as the go-sdk client would, and POSTs a request's answer back on the session.
func (h *fastHop) handle(ctx context.Context, sess *mcp.ClientSession, sid, version string, m *hopMessage) {
	isRequest := len(m.ID) > 0
	var req mcp.Request
	var err error
	switch m.Method {
	case "ping":
	case "roots/list":
		req, err = clientRequest[mcp.ListRootsParams](sess, m.Params, func(s *mcp.ClientSession, p *mcp.ListRootsParams) mcp.Request {
			return &mcp.ListRootsRequest{Session: s, Params: p}
		})
	case "sampling/createMessage":
		// The go-sdk's client takes sampling as the with-tools request whichever handler it was given.
		req, err = clientRequest[mcp.CreateMessageWithToolsParams](sess, m.Params, func(s *mcp.ClientSession, p *mcp.CreateMessageWithToolsParams) mcp.Request {
			return &mcp.CreateMessageWithToolsRequest{Session: s, Params: p}
		})
	case "elicitation/create":
		req, err = clientRequest[mcp.ElicitParams](sess, m.Params, func(s *mcp.ClientSession, p *mcp.ElicitParams) mcp.Request {
			return &mcp.ElicitRequest{Session: s, Params: p}
		})
	case "notifications/message":
		req, err = clientRequest[mcp.LoggingMessageParams](sess, m.Params, func(s *mcp.ClientSession, p *mcp.LoggingMessageParams) mcp.Request {
			return &mcp.LoggingMessageRequest{Session: s, Params: p}
		})
	case "notifications/progress":
		req, err = clientRequest[mcp.ProgressNotificationParams](sess, m.Params, func(s *mcp.ClientSession, p *mcp.ProgressNotificationParams) mcp.Request {
			return &mcp.ProgressNotificationClientRequest{Session: s, Params: p}
		})
	case "notifications/tools/list_changed":
		req, err = clientRequest[mcp.ToolListChangedParams](sess, m.Params, func(s *mcp.ClientSession, p *mcp.ToolListChangedParams) mcp.Request {
			return &mcp.ToolListChangedRequest{Session: s, Params: p}
		})
	case "notifications/prompts/list_changed":
		req, err = clientRequest[mcp.PromptListChangedParams](sess, m.Params, func(s *mcp.ClientSession, p *mcp.PromptListChangedParams) mcp.Request {
			return &mcp.PromptListChangedRequest{Session: s, Params: p}
		})
	case "notifications/resources/list_changed":
		req, err = clientRequest[mcp.ResourceListChangedParams](sess, m.Params, func(s *mcp.ClientSession, p *mcp.ResourceListChangedParams) mcp.Request {
			return &mcp.ResourceListChangedRequest{Session: s, Params: p}
		})
	case "notifications/resources/updated":
		req, err = clientRequest[mcp.ResourceUpdatedNotificationParams](sess, m.Params, func(s *mcp.ClientSession, p *mcp.ResourceUpdatedNotificationParams) mcp.Request {
			return &mcp.ResourceUpdatedNotificationRequest{Session: s, Params: p}
		})
	case "notifications/elicitation/complete":
		req, err = clientRequest[mcp.ElicitationCompleteParams](sess, m.Params, func(s *mcp.ClientSession, p *mcp.ElicitationCompleteParams) mcp.Request {
			return &mcp.ElicitationCompleteNotificationRequest{Session: s, Params: p}
		})
	default:
		if !isRequest {
			return // a notification the client does not handle
		}
		err = &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found: " + m.Method}
	}
	var res any = struct{}{}
	switch {
	case err != nil:
	case req != nil:
		var r mcp.Result
		r, err = h.runChain(ctx, m.Method, req)
		if r != nil {
			res = r
		}
	}
	if !isRequest {
		return
	}
	msg := struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  any             `json:"result,omitempty"`
		Error   *jsonrpc.Error  `json:"error,omitempty"`
	}{JSONRPC: "2.0", ID: m.ID}
	if err != nil {
		msg.Error = toWireError(err)
	} else {
		msg.Result = res
	}
	body, merr := json.Marshal(msg)
	if merr != nil {
		return
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if resp, err := h.post(pctx, sid, version, body, nil); err == nil {
		_, _ = io.CopyN(io.Discard, resp.Body, hopMaxDrain)
		_ = resp.Body.Close()
	}
}

// runChain runs the client's receiving chain for one message of the call's stream; a panic in it (a handler, or
// the go-sdk's own type assertions) is the message's error, not the daemon's end.
func (h *fastHop) runChain(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("handling %s failed", method)}
		}
	}()
	return h.chain(ctx, method, req)
}

// clientRequest decodes a request's params into a new P and makes the go-sdk's request of it.
func clientRequest[P any](sess *mcp.ClientSession, raw json.RawMessage, mk func(*mcp.ClientSession, *P) mcp.Request) (mcp.Request, error) {
	p := new(P)
	if len(raw) > 0 && string(raw) != "null" {
		if err := hopDecode(raw, p); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "invalid params: " + err.Error()}
		}
	}
	return mk(sess, p), nil
}

// toWireError is the error object the go-sdk's JSON-RPC connection makes of a handler's error.
func toWireError(err error) *jsonrpc.Error {
	if e, ok := err.(*jsonrpc.Error); ok {
		return e
	}
	out := &jsonrpc.Error{Message: err.Error()}
	var wrapped *jsonrpc.Error
	if errors.As(err, &wrapped) {
		out.Code = wrapped.Code
	}
	return out
}

// cancelled tells the backend that the call id was given up (notifications/cancelled), as the go-sdk does.
func (h *fastHop) cancelled(sess *mcp.ClientSession, sid, version string, id []byte, cause error) {
	body := make([]byte, 0, 128)
	body = append(body, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`...)
	body = append(body, id...)
	body = append(body, `,"reason":`...)
	body = appendJSONString(body, cause.Error())
	body = append(body, "}}"...)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), taskCancelTimeout)
		defer cancel()
		if resp, err := h.post(ctx, sid, version, body, nil); err == nil {
			_, _ = io.CopyN(io.Discard, resp.Body, hopMaxDrain)
			_ = resp.Body.Close()
		}
	}()
	_ = sess
}

// hopResult is a CallToolResult whose content is text only, decoded in place: what the go-sdk's
// CallToolResult.UnmarshalJSON makes of it (TextContent.fromWire reads text, _meta and annotations).
type hopResult struct {
	Meta              mcp.Meta        `json:"_meta"`
	Content           []hopContent    `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	IsError           bool            `json:"isError"`
	ResultType        json.RawMessage `json:"resultType"`
}

type hopContent struct {
	Type        string           `json:"type"`
	Text        string           `json:"text"`
	Meta        mcp.Meta         `json:"_meta"`
	Annotations *mcp.Annotations `json:"annotations"`
}

// decodeResult is the go-sdk's CallToolResult of a raw result: decoded in place when its content is text only and
// it has no structured content; by the go-sdk's own decoder otherwise.
func decodeResult(raw json.RawMessage) (*mcp.CallToolResult, error) {
	var r hopResult
	if hopDecode(raw, &r) == nil && textOnly(&r) {
		// Never nil content: the go-sdk's decode makes an empty list of a missing one.
		res := &mcp.CallToolResult{Meta: r.Meta, IsError: r.IsError, Content: make([]mcp.Content, len(r.Content))}
		for i := range r.Content {
			c := &r.Content[i]
			res.Content[i] = &mcp.TextContent{Text: c.Text, Meta: c.Meta, Annotations: c.Annotations}
		}
		return res, nil
	}
	res := &mcp.CallToolResult{}
	if err := json.Unmarshal(raw, res); err != nil {
		return nil, fmt.Errorf("calling \"tools/call\": %w", err)
	}
	return res, nil
}

// textOnly reports whether the in-place decode says all the go-sdk's would.
func textOnly(r *hopResult) bool {
	if len(r.StructuredContent) > 0 && string(r.StructuredContent) != "null" || len(r.ResultType) > 0 {
		return false
	}
	for i := range r.Content {
		if r.Content[i].Type != "text" {
			return false
		}
	}
	return true
}
