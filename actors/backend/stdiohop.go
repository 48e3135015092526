package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The stdio hop (issue 25): a request the server actor sends on a stdio child's session itself, beside the
// go-sdk's client, and whose answer it reads raw. Listing a catalogue through the go-sdk cost, per tool, a decode of
// its schemas into maps, a re-encoding and second decode of each input schema (the go-sdk's check of the
// 2026-07-28 x-mcp-header annotations, which mean nothing without HTTP) and our encoding of the result again: 18 %
// of what the daemon allocated while 10,000 tools were indexed (BENCHMARKS.md). The hop's requests have string ids
// of their own (the go-sdk numbers its requests), are written on the child's stdin between the go-sdk's lines, and
// their answers are taken out of the stream before the go-sdk reads it, so the go-sdk never sees either. Every
// answer is read through the same message guard as the go-sdk's (an oversized one becomes an error answer for its
// id); a caller waits at most until its context ends or the child's stdout does.

// stdioHopIDPrefix starts the ids of the hop's requests.
const stdioHopIDPrefix = "mcp-aggregator-stdio-"

// ErrNoStdioHop: the session is not a stdio child's, or its child has not been started.
var ErrNoStdioHop = errors.New("no stdio session to send on")

// errStdoutEnded: the child's stdout ended (or failed) before the answer came: the session's connection is
// closed, as the go-sdk would have said (its loss is reported with the exit status by the session's end).
var errStdoutEnded = fmt.Errorf("stdio session ended before the answer: %w", mcp.ErrConnectionClosed)

// stdioHop is the hop's bookkeeping on one lineConn: the callers waiting, by request id.
type stdioHop struct {
	mu      sync.Mutex
	next    uint64
	waiting map[string]chan *jsonrpc.Response
}

// wait registers a new request id and the channel its answer will arrive on.
func (h *stdioHop) wait() (string, chan *jsonrpc.Response) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next++
	id := stdioHopIDPrefix + strconv.FormatUint(h.next, 10)
	if h.waiting == nil {
		h.waiting = make(map[string]chan *jsonrpc.Response)
	}
	ch := make(chan *jsonrpc.Response, 1)
	h.waiting[id] = ch
	return id, ch
}

// forget drops a request id that no longer waits.
func (h *stdioHop) forget(id string) {
	h.mu.Lock()
	delete(h.waiting, id)
	h.mu.Unlock()
}

// take removes the hop's answers from msgs (the messages of one line) and hands each to its waiting caller; an
// answer nobody waits for any more (its caller gave up) is dropped. It returns the messages left for the go-sdk.
func (h *stdioHop) take(msgs []jsonrpc.Message) []jsonrpc.Message {
	kept := msgs[:0]
	for _, msg := range msgs {
		if r, ok := msg.(*jsonrpc.Response); ok {
			if id, ok := r.ID.Raw().(string); ok && strings.HasPrefix(id, stdioHopIDPrefix) {
				h.mu.Lock()
				ch := h.waiting[id]
				delete(h.waiting, id)
				h.mu.Unlock()
				if ch != nil {
					ch <- r // buffered: never blocks the reading
				}
				continue
			}
		}
		kept = append(kept, msg)
	}
	return kept
}

// request writes one request of the hop and waits for its answer's result.
func (c *lineConn) request(ctx context.Context, method string, params any) (json.RawMessage, error) {
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("encode %s params: %w", method, err)
	}
	id, ch := c.hop.wait()
	defer c.hop.forget(id)
	rid, err := jsonrpc.MakeID(id)
	if err != nil {
		return nil, err
	}
	if err := c.Write(ctx, &jsonrpc.Request{ID: rid, Method: method, Params: raw}); err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		if r.Error != nil {
			var rpcErr *jsonrpc.Error
			if errors.As(r.Error, &rpcErr) {
				return nil, rpcErr
			}
			return nil, r.Error
		}
		return r.Result, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.readDone:
		return nil, errStdoutEnded
	}
}

// StdioRequest sends one JSON-RPC request on a stdio session outside the go-sdk's client and returns its answer's
// result as the child wrote it (ErrNoStdioHop for other transports). A JSON-RPC error answer (also the message
// guard's, for an oversized answer) comes back as a *jsonrpc.Error. The caller must only send what the go-sdk's
// session does not need to know of (a listing, not a call that may be cancelled or report progress).
func (b *Conn) StdioRequest(ctx context.Context, method string, params any) (json.RawMessage, error) {
	if b == nil || b.proc == nil {
		return nil, ErrNoStdioHop
	}
	b.proc.mu.Lock()
	conn := b.proc.line
	b.proc.mu.Unlock()
	if conn == nil {
		return nil, ErrNoStdioHop
	}
	return conn.request(ctx, method, params)
}
