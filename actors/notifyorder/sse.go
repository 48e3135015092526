package notifyorder

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
)

// gatedSSE passes an event stream up event by event, unchanged, counting notifications and holding responses
// back. It parses only what it needs: the data lines of an event, joined as the SSE format joins them, and the
// "id" and "method" members of the JSON-RPC message they carry.
type gatedSSE struct {
	body    io.ReadCloser
	r       *bufio.Reader
	gate    *Gate
	ctx     context.Context
	pending []byte // the rest of the current event, not yet read
	err     error  // the stream's error, returned once pending is drained
}

func (b *gatedSSE) Close() error { return b.body.Close() }

func (b *gatedSSE) Read(p []byte) (int, error) {
	for len(b.pending) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		b.next()
	}
	n := copy(p, b.pending)
	b.pending = b.pending[n:]
	return n, nil
}

// next reads one event (up to its blank line, or the end of the stream) and classifies its data.
func (b *gatedSSE) next() {
	var event, data []byte
	for {
		line, err := b.r.ReadBytes('\n')
		event = append(event, line...)
		trimmed := bytes.TrimRight(line, "\r\n")
		if v, ok := bytes.CutPrefix(trimmed, []byte("data:")); ok {
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimPrefix(v, []byte(" "))...)
		}
		if err != nil {
			b.err = err
			break
		}
		if len(trimmed) == 0 {
			break
		}
	}
	if len(data) > 0 {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(data, &m) == nil {
			switch {
			case m.Method != "" && len(m.ID) == 0:
				b.gate.saw(m.Method)
			case m.Method == "" && len(m.ID) > 0:
				b.gate.hold(b.ctx)
			}
		}
	}
	b.pending = event
}
