package backend

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
)

// errSessionClosed refuses a request of a session that has been closed.
var errSessionClosed = errors.New("backend session closed")

// sessionConns is the bottom layer of an SSE/HTTP session's client: it ties every request to the session, so that
// closing the session ends its connections at once, including ones still in use (a hanging SSE GET, a POST whose
// stream the go-sdk is still draining). Without it, connections that became idle after the session closed stayed
// pooled, with their goroutines and file descriptors, until the 90 s idle timeout.
type sessionConns struct {
	base   idleCloser // fastTransport over the session's *http.Transport, or that transport alone
	ctx    context.Context
	cancel context.CancelFunc
}

func newSessionConns(base idleCloser) *sessionConns {
	ctx, cancel := context.WithCancel(context.Background())
	return &sessionConns{base: base, ctx: ctx, cancel: cancel}
}

// RoundTrip implements http.RoundTripper.
func (s *sessionConns) RoundTrip(req *http.Request) (*http.Response, error) {
	if s.ctx.Err() != nil {
		return nil, errSessionClosed
	}
	if ft, ok := s.base.(*fastTransport); ok && ft.takes(req) {
		// fasthttp's exchange watches the session's end itself: no context merging the request's and the
		// session's, no copy of the request to carry it, no body wrapper (issue 26: seven allocations less a /mcp call).
		return ft.send(req, s.ctx)
	}
	ctx, cancel := context.WithCancel(req.Context())
	stop := context.AfterFunc(s.ctx, cancel)
	resp, err := s.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		stop()
		cancel()
		return nil, err
	}
	resp.Body = &sessionBody{ReadCloser: resp.Body, conns: s, stop: stop, cancel: cancel}
	return resp, nil
}

// close cancels every request of the session (which closes their connections) and closes the idle ones.
func (s *sessionConns) close() {
	s.cancel()
	s.base.CloseIdleConnections()
}

// sessionBody ends its request's tie to the session once the body is read to the end or closed.
type sessionBody struct {
	io.ReadCloser
	conns  *sessionConns
	stop   func() bool
	cancel context.CancelFunc
	once   sync.Once // Close may run while a Read waits
}

func (b *sessionBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.once.Do(b.done)
	}
	return n, err
}

func (b *sessionBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.done)
	return err
}

// done unties the request from the session.
func (b *sessionBody) done() {
	b.stop()
	b.cancel()
	if b.conns.ctx.Err() != nil {
		// A connection that went back to the pool after the session closed: close it too.
		b.conns.base.CloseIdleConnections()
	}
}
