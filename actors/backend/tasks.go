package backend

import (
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// WrapStreamable puts wrap around the HTTP requests of a streamable HTTP session (the go-sdk must see its
// connection unwrapped), before it connects, and reports whether it did: not for stdio nor SSE sessions. The
// server actor's task wire uses it (issue 30).
func (b *Conn) WrapStreamable(wrap func(http.RoundTripper) http.RoundTripper) bool {
	if b.client == nil {
		return false
	}
	if _, ok := b.transport.(*mcp.StreamableClientTransport); !ok {
		return false
	}
	b.client.Transport = wrap(b.client.Transport)
	return true
}

// Stdio reports whether the session runs a child process over stdio.
func (b *Conn) Stdio() bool { return b.proc != nil }

// Streamable is the HTTP client and endpoint of a streamable HTTP session (nil, "" for stdio and SSE): the server
// actor's fast hop POSTs a tools/call on the session itself through it, so the request passes the same layers as
// the go-sdk's (outbound policy, configured headers, hop header, request id, the message guard's bounds, the task
// wire, the session's connections); nil for a session authorized by OAuth. maxEvent is the go-sdk transport's bound of one SSE event (a backstop: the
// guard cuts a larger message first).
func (b *Conn) Streamable() (client *http.Client, endpoint string, maxEvent int) {
	t, ok := b.transport.(*mcp.StreamableClientTransport)
	if b.client == nil || !ok || t.OAuthHandler != nil {
		return nil, "", 0 // an OAuth session's token and 401 handling are the go-sdk transport's
	}
	return b.client, t.Endpoint, t.MaxEventSize
}
