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
