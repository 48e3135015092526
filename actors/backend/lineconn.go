package backend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpgw/aggregator/actors/floodguard"
	"github.com/mcpgw/aggregator/actors/msglimit"
)

// lineConn is the go-sdk connection of a stdio session: newline-delimited JSON-RPC over a child's stdin and stdout,
// each line read through a msglimit guard and decoded straight from the guard's buffer, which goes back to the pool
// at once. The go-sdk's own IOTransport reads through a json.Decoder that keeps a buffer as large as the largest
// message it has read, and keeps the last message it decoded, for the life of the session: after discovery, about
// twice the tools/list answer per server (3 MB for 1,000 tools), 30 MB of the daemon's heap at 10,000 tools
// (BENCHMARKS.md, search at scale).
//
// Incoming batches (a JSON array on one line, which MCP dropped in 2025-06-18) are read as their messages in turn.
type lineConn struct {
	in      io.Closer
	out     io.WriteCloser
	writeMu sync.Mutex

	incoming chan lineMsg
	closed   chan struct{}
	queue    []jsonrpc.Message // the rest of a batch; reads are serialized by the go-sdk

	closeOnce sync.Once
	closeErr  error

	hop      stdioHop      // the requests the server actor sends itself (stdiohop.go)
	readDone chan struct{} // closed when the read loop has read its last message
}

type lineMsg struct {
	msgs []jsonrpc.Message
	err  error
}

// newLineConn starts reading lines from src (which reads the stream that in closes) and writes messages to out;
// pace (nil: none) slows the reading down while notifications come faster than its rate.
func newLineConn(src *msglimit.LineMessages, in io.Closer, out io.WriteCloser, pace *floodguard.Pacer) *lineConn {
	c := &lineConn{in: in, out: out, incoming: make(chan lineMsg), closed: make(chan struct{}), readDone: make(chan struct{})}
	go c.readLoop(src, pace)
	return c
}

// isNotification reports whether one of msgs is a notification (a request without an id).
func isNotification(msgs []jsonrpc.Message) bool {
	for _, m := range msgs {
		if r, ok := m.(*jsonrpc.Request); ok && !r.IsCall() {
			return true
		}
	}
	return false
}

// readLoop decodes one line at a time until the stream or a line fails. The go-sdk ends the session on a read
// error, as it does with its own transport.
func (c *lineConn) readLoop(src *msglimit.LineMessages, pace *floodguard.Pacer) {
	var ended sync.Once
	end := func() { ended.Do(func() { close(c.readDone) }) }
	defer end()
	for {
		var m lineMsg
		line, err := src.Next()
		if err != nil {
			m.err = err
		} else if line = bytes.TrimSpace(line); len(line) == 0 {
			continue // a blank line, which a json.Decoder skips as whitespace
		} else {
			m.msgs, m.err = decodeLine(line)
		}
		src.Release() // decoding copied what the messages keep
		if m.err != nil {
			end() // the hop's callers learn of it now, not once the go-sdk has read the error
		} else {
			if m.msgs = c.hop.take(m.msgs); len(m.msgs) == 0 {
				continue // only answers of the hop: nothing for the go-sdk
			}
		}
		if pace != nil && isNotification(m.msgs) && !pace.Wait(c.closed) {
			return
		}
		select {
		case c.incoming <- m:
		case <-c.closed:
			return
		}
		if m.err != nil {
			return
		}
	}
}

// decodeLine decodes one line: a message, or a batch of them.
func decodeLine(line []byte) ([]jsonrpc.Message, error) {
	if line[0] != '[' {
		msg, err := jsonrpc.DecodeMessage(line)
		if err != nil {
			return nil, fmt.Errorf("decode message: %w", err)
		}
		return []jsonrpc.Message{msg}, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(line, &raws); err != nil {
		return nil, fmt.Errorf("decode batch: %w", err)
	}
	if len(raws) == 0 {
		return nil, errors.New("empty batch")
	}
	msgs := make([]jsonrpc.Message, 0, len(raws))
	for _, raw := range raws {
		msg, err := jsonrpc.DecodeMessage(raw)
		if err != nil {
			return nil, fmt.Errorf("decode batch message: %w", err)
		}
		msgs = append(msgs, msg)
	}
	return msgs, nil
}

// Read implements mcp.Connection.
func (c *lineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(c.queue) > 0 {
		msg := c.queue[0]
		c.queue[0] = nil // not kept once handed over
		c.queue = c.queue[1:]
		return msg, nil
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.closed:
		return nil, io.EOF
	case m := <-c.incoming:
		if m.err != nil {
			return nil, m.err
		}
		if len(m.msgs) > 1 {
			c.queue = m.msgs[1:]
		}
		return m.msgs[0], nil
	}
}

// Write implements mcp.Connection: one message a line.
func (c *lineConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("encode message: %w", err)
	}
	data = append(data, '\n')
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if _, err := c.out.Write(data); err != nil {
		return fmt.Errorf("write message: %w", err)
	}
	return nil
}

// Close implements mcp.Connection: it closes both pipes, which ends the read loop, and unblocks a waiting Read.
func (c *lineConn) Close() error {
	c.closeOnce.Do(func() {
		c.closeErr = errors.Join(c.in.Close(), c.out.Close())
		close(c.closed)
	})
	return c.closeErr
}

// SessionID implements mcp.Connection: a stdio session has none.
func (c *lineConn) SessionID() string { return "" }
