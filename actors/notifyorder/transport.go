package notifyorder

import (
	"bufio"
	"context"
	"io"
	"mime"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Transport puts the gate around the connections of t, for transports whose connection the go-sdk may see wrapped
// (stdio, io and in-memory transports; not SSE or streamable HTTP, which take RoundTripper instead).
func (g *Gate) Transport(t mcp.Transport) mcp.Transport {
	return &gatedTransport{Transport: t, gate: g}
}

type gatedTransport struct {
	mcp.Transport
	gate *Gate
}

// Connect implements mcp.Transport.
func (t *gatedTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &gatedConn{Connection: c, gate: t.gate}, nil
}

// gatedConn counts the notifications it reads and holds a response back until those before it are handled.
type gatedConn struct {
	mcp.Connection
	gate *Gate
}

// Read implements mcp.Connection.
func (c *gatedConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	switch m := msg.(type) {
	case *jsonrpc.Request:
		if !m.IsCall() {
			c.gate.saw(m.Method)
		}
	case *jsonrpc.Response:
		c.gate.hold(ctx)
	}
	return msg, err
}

// RoundTripper puts the gate under the HTTP bodies of an SSE or streamable HTTP client: base's event streams are
// re-parsed to count notifications and hold responses, its JSON bodies (responses) are held. A nil base is
// http.DefaultTransport.
func (g *Gate) RoundTripper(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &gatedRoundTripper{base: base, gate: g}
}

type gatedRoundTripper struct {
	base http.RoundTripper
	gate *Gate
}

// RoundTrip implements http.RoundTripper.
func (t *gatedRoundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch mt {
	case "text/event-stream":
		resp.Body = &gatedSSE{body: resp.Body, r: bufio.NewReader(resp.Body), gate: t.gate, ctx: r.Context()}
	case "application/json":
		resp.Body = &gatedJSON{ReadCloser: resp.Body, gate: t.gate, ctx: r.Context()}
	}
	return resp, nil
}

// gatedJSON holds a JSON answer (a response) back until the notifications before it are handled.
type gatedJSON struct {
	io.ReadCloser
	gate   *Gate
	ctx    context.Context
	waited bool
}

func (b *gatedJSON) Read(p []byte) (int, error) {
	if !b.waited {
		b.waited = true
		b.gate.hold(b.ctx)
	}
	return b.ReadCloser.Read(p)
}
