// Package notifyorder keeps an MCP client session's notifications ahead of the response they precede.
//
// A backend sends a request's notifications (progress, log messages) before its response, and a proxy must forward
// them before it answers its own client: afterwards the downstream request's stream is closed and they are lost.
// The go-sdk client (github.com/modelcontextprotocol/go-sdk v1.8.0) does not keep that order. Its jsonrpc2 reader
// (internal/jsonrpc2/conn.go, readIncoming) hands a response to the waiting caller at once, on the reader's
// goroutine, while a notification is appended to a handler queue that another goroutine (handleAsync) works
// through; nothing makes a response wait for the notifications read before it. So the last progress notification
// of a call often reaches its handler after the call has returned, against any backend, over every transport.
//
// A Gate restores the order for one client session. The transport counts the notifications it passes up, the
// client's outermost receiving middleware counts those handled, and a response is passed up only once every
// notification read before it has been handled, or after maxWait (a notification the go-sdk dropped as malformed
// never reaches the middleware, and must delay one response, not every later one).
//
// Where the count is taken depends on the transport. Around a stdio (or any io) transport the gate wraps the
// mcp.Connection. The streamable HTTP client connection cannot be wrapped: after initialize the go-sdk hands it the
// session's state (the protocol version its requests must carry, the cue to open the standalone GET stream)
// through an unexported interface (clientConnection.sessionUpdated, found by a type assertion in mcp/client.go),
// which a wrapper hides. So for HTTP transports (streamable HTTP, and SSE with it, as both are built on an
// *http.Client) the gate wraps the client's RoundTripper and reads the bodies the go-sdk reads: an
// application/json body (a response) is held until the notifications before it are handled, and an event stream
// is re-parsed event by event, each event passed up unchanged once it has been classified as a notification
// (counted) or a response (held).
//
// Wiring, for a client whose transport is t or whose HTTP client is hc:
//
//	g := notifyorder.New(stopping)
//	hc.Transport = g.RoundTripper(hc.Transport) // SSE, streamable HTTP
//	t = g.Transport(t)                          // stdio, in-memory
//	client.AddReceivingMiddleware(g.Middleware) // last: the outermost middleware
package notifyorder
