package backend

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// The POSTs of an SSE/HTTP session on fasthttp's client (issue 26). `make compare`'s floors show the client side of
// a hop to be the larger part of what net/http costs a proxy (BENCHMARKS, "A third floor"): its connection's read
// and write goroutines and their hand-offs. fastTransport sends a session's POSTs to a plain http endpoint over one
// fasthttp.HostClient, on the caller's goroutine, and answers them as net/http types, so every RoundTripper above
// it (configured headers, the ordering gate, the message guard, the session's connections) is unchanged. What it
// does not take goes to the session's net/http transport: GETs (the long-lived SSE streams), DELETE, another
// origin (a redirect), an https endpoint (net/http negotiates HTTP/2 there), and an endpoint reached through a
// proxy from the environment.
//
// What net/http's transport gives and fasthttp's client does not is done here, with the HostClient's own pool
// primitives: a request's context ends its connection (while the request is written, while its answer is awaited,
// while its body is read); a body closed before its end closes its connection instead of pooling it; a pooled
// connection that the server has closed (an idle timeout; Node's is 5 s) is found before a request is written on
// it, as net/http's background read finds it; dials pass the outbound policy and end at the request's deadline.

// fastReadBuffer bounds an answer's status line and headers (net/http's bound is 1 MiB).
const fastReadBuffer = 32 << 10

// fastDialTimeout is the dial timeout of a request without a deadline (the outbound dialer's).
const fastDialTimeout = 30 * time.Second

// fastIdleTimeout is how long an idle connection stays pooled: below the commonest server keep-alive timeout
// (Node's 5 s), so the server rarely closes one under a request, and the bound on how long the HostClient's
// cleaner goroutine outlives a released session (it sleeps until the last connection's idle time is up).
const fastIdleTimeout = 3 * time.Second

// goUserAgent is what net/http sends when a request names no User-Agent.
const goUserAgent = "Go-http-client/1.1"

// idleCloser is the bottom layer of a session's client.
type idleCloser interface {
	http.RoundTripper
	CloseIdleConnections()
}

// fastTransport sends the POSTs to one plain http origin over fasthttp, anything else over next.
type fastTransport struct {
	next *http.Transport
	host string // the endpoint's URL.Host: requests to another origin go to next
	hc   *fasthttp.HostClient
}

// newFastTransport returns the bottom layer of a session with endpoint: base itself when fasthttp does not apply
// (not plain http, or a proxy from the environment for it).
func newFastTransport(base *http.Transport, endpoint *url.URL) idleCloser {
	if endpoint == nil || endpoint.Scheme != "http" || endpoint.Host == "" || endpoint.User != nil {
		return base
	}
	if base.Proxy != nil {
		if p, err := base.Proxy(&http.Request{Method: http.MethodPost, URL: endpoint, Header: http.Header{}}); err != nil || p != nil {
			return base
		}
	}
	addr := endpoint.Host
	if endpoint.Port() == "" {
		addr = net.JoinHostPort(endpoint.Hostname(), "80")
	}
	dial := base.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	hc := &fasthttp.HostClient{
		Addr: addr,
		DialTimeout: func(addr string, timeout time.Duration) (net.Conn, error) {
			if timeout <= 0 {
				timeout = fastDialTimeout
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			return dial(ctx, "tcp", addr)
		},
		MaxConns:                 math.MaxInt32, // as net/http: no bound (a slow call holds its connection)
		MaxIdleConnDuration:      fastIdleTimeout,
		ReadBufferSize:           fastReadBuffer,
		NoDefaultUserAgentHeader: true,
		DisablePathNormalizing:   true, // the path as given, as net/http sends it
	}
	return &fastTransport{next: base, host: endpoint.Host, hc: hc}
}

// CloseIdleConnections closes the idle connections of both clients.
func (t *fastTransport) CloseIdleConnections() {
	t.hc.CloseIdleConnections()
	t.next.CloseIdleConnections()
}

// RoundTrip implements http.RoundTripper.
func (t *fastTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.takes(req) {
		return t.next.RoundTrip(req)
	}
	return t.send(req, nil)
}

// takes reports whether req goes over fasthttp: a POST to the endpoint's own origin.
func (t *fastTransport) takes(req *http.Request) bool {
	return req.Method == http.MethodPost && req.URL.Scheme == "http" && req.URL.Host == t.host && req.URL.User == nil &&
		(req.Host == "" || req.Host == req.URL.Host)
}

// send sends a request that t takes. A request of a session (session not nil: sessionConns) ends its connection
// when either its own context or the session ends, and fails as a request whose context was cancelled when the
// session ends first.
func (t *fastTransport) send(req *http.Request, session context.Context) (*http.Response, error) {
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		closeBody(req)
		return nil, err
	}
	freq := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(freq)
	freq.Header.SetMethod(http.MethodPost)
	freq.Header.SetNoDefaultContentType(true) // none unless the request names one, as net/http
	freq.SetRequestURI(req.URL.RequestURI())
	freq.SetHost(req.URL.Host)
	agent := false
	for k, vs := range req.Header {
		switch k {
		case "Host", "Content-Length", "Connection", "Transfer-Encoding", "Keep-Alive", "Te", "Upgrade", "Proxy-Connection":
			continue
		case "User-Agent":
			agent = true
		}
		for _, v := range vs {
			freq.Header.Add(k, v)
		}
	}
	if !agent {
		freq.Header.SetUserAgent(goUserAgent)
	}
	if req.Body != nil && req.Body != http.NoBody {
		n := int(req.ContentLength)
		if req.ContentLength <= 0 || req.ContentLength > math.MaxInt32 {
			n = -1 // chunked
		}
		freq.SetBodyStream(req.Body, n) // closed once written
	} else {
		freq.Header.SetContentLength(0)
	}
	return t.exchange(ctx, session, req, freq)
}

// exchange writes freq on a pooled or new connection and reads its answer's head; the body is read by the caller.
// The connection is closed when ctx or session (if not nil) ends before the answer is read to its end.
func (t *fastTransport) exchange(ctx, session context.Context, req *http.Request, freq *fasthttp.Request) (*http.Response, error) {
	var timeout time.Duration
	if d, ok := ctx.Deadline(); ok {
		if timeout = time.Until(d); timeout <= 0 {
			return nil, context.DeadlineExceeded
		}
	}
	cc, err := t.hc.AcquireConn(timeout, false)
	for err == nil && peerClosed(cc.Conn()) {
		t.hc.CloseConn(cc) // the server closed it while it was idle: never write on it
		cc, err = t.hc.AcquireConn(timeout, false)
	}
	if err != nil {
		if err := givenUp(ctx, session); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("dial %s: %w", t.hc.Addr, err)
	}
	hc, conn := t.hc, cc.Conn()
	closeConn := func() { _ = conn.Close() }
	stop := context.AfterFunc(ctx, closeConn)
	stopSession := func() bool { return true }
	if session != nil {
		stopSession = context.AfterFunc(session, closeConn)
	}
	release := func(reuse bool) {
		kept := stop()
		if !stopSession() {
			kept = false
		}
		if !reuse || !kept {
			hc.CloseConn(cc)
			return
		}
		hc.ReleaseConn(cc)
		if session != nil && session.Err() != nil {
			// The session closed (and closed its idle connections) while this one went back to the pool.
			hc.CloseIdleConnections()
		}
	}
	fail := func(err error) (*http.Response, error) {
		release(false)
		if ended := givenUp(ctx, session); ended != nil {
			return nil, ended
		}
		return nil, err
	}

	bw := hc.AcquireWriter(conn)
	err = freq.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	hc.ReleaseWriter(bw)
	if err != nil {
		return fail(fmt.Errorf("write request: %w", err))
	}

	br := hc.AcquireReader(conn)
	fresp := fasthttp.AcquireResponse()
	fresp.StreamBody = true
	if err := fresp.ReadLimitBody(br, 0); err != nil {
		fasthttp.ReleaseResponse(fresp)
		hc.ReleaseReader(br)
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fail(fmt.Errorf("read response: %w", err))
	}
	resp := &http.Response{
		StatusCode:    fresp.StatusCode(),
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        respHeader(&fresp.Header),
		ContentLength: int64(fresp.Header.ContentLength()),
		Close:         fresp.ConnectionClose(),
		Request:       req,
	}
	switch msg := fresp.Header.StatusMessage(); {
	case resp.StatusCode == http.StatusOK && (len(msg) == 0 || string(msg) == "OK"):
		resp.Status = "200 OK" // nearly every answer: no string to build
	case len(msg) == 0:
		resp.Status = strconv.Itoa(resp.StatusCode) + " " + http.StatusText(resp.StatusCode)
	default:
		resp.Status = strconv.Itoa(resp.StatusCode) + " " + string(msg)
	}
	switch resp.ContentLength {
	case -1: // chunked
		resp.TransferEncoding = []string{"chunked"}
		resp.ContentLength = -1
	case -2: // until the connection closes
		resp.ContentLength = -1
		resp.Close = true
	}
	body := &fastBody{stream: fresp.BodyStream(), resp: fresp, br: br, hc: hc, conn: conn, release: release}
	if resp.ContentLength == 0 || body.stream == nil {
		body.finish(!resp.Close)
		resp.Body = http.NoBody
		return resp, nil
	}
	resp.Body = body
	return resp, nil
}

// givenUp is the error of a request given up: its own context's, or context.Canceled once its session (if any)
// ended, as the session's requests said when their contexts merged the two.
func givenUp(ctx, session context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if session != nil && session.Err() != nil {
		return context.Canceled
	}
	return nil
}

// respHeader is an answer's head as net/http's: its map, one string holding every name and value, and one array
// of the value slices, where a string for each name and each value and a slice for each header took three
// allocations a header (13 for the echo backend's answer, issue 26). Transfer-Encoding is left out, as net/http
// leaves it (the response says chunked in TransferEncoding).
func respHeader(h *fasthttp.ResponseHeader) http.Header {
	n, size := 0, 0
	for k, v := range h.All() {
		n++
		size += len(k) + len(v)
	}
	hdr := make(http.Header, n)
	if n == 0 {
		return hdr
	}
	var sb strings.Builder
	sb.Grow(size)
	for k, v := range h.All() {
		sb.Write(k)
		sb.Write(v)
	}
	all, vals := sb.String(), make([]string, 0, n)
	off := 0
	for k, v := range h.All() {
		if off+len(k)+len(v) > len(all) {
			break // the head changed between the passes: it cannot, nothing writes to it meanwhile
		}
		key, val := all[off:off+len(k)], all[off+len(k):off+len(k)+len(v)]
		off += len(k) + len(v)
		if key == "Transfer-Encoding" {
			continue
		}
		if prev, ok := hdr[key]; ok {
			hdr[key] = append(prev, val) // a repeated name (Set-Cookie): a slice of its own
			continue
		}
		vals = append(vals, val)
		hdr[key] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	return hdr
}

// errBodyClosed is net/http's answer to a Read after Close.
var errBodyClosed = errors.New("http: read on closed response body")

// fastBody is an answer's body: its connection goes back to the pool once the body is read to its end, and is
// closed if the body is closed before (a Close while a Read waits ends the Read).
type fastBody struct {
	mu      sync.Mutex // held by Read; Close takes it after ending the connection
	stream  io.Reader
	resp    *fasthttp.Response
	br      *bufio.Reader
	hc      *fasthttp.HostClient
	conn    net.Conn
	release func(reuse bool)
	done    bool  // finished: the connection released or closed
	end     error // what a Read returns once done: io.EOF, the read's error, or errBodyClosed
	closing sync.Once
}

func (b *fastBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return 0, b.end
	}
	n, err := b.stream.Read(p)
	if err != nil {
		b.end = err
	}
	if err == io.EOF {
		b.finish(!b.resp.ConnectionClose() && b.resp.Header.ContentLength() != -2)
	} else if err != nil {
		b.finish(false)
	}
	return n, err
}

// Close implements io.Closer.
func (b *fastBody) Close() error {
	b.closing.Do(func() {
		if !b.mu.TryLock() {
			_ = b.conn.Close() // a Read waits: end it
			b.mu.Lock()
		}
		defer b.mu.Unlock()
		b.end = errBodyClosed
		if !b.done {
			b.finish(false)
		}
	})
	return nil
}

// finish gives the connection back (reuse) or closes it, and frees the answer's buffers. b.mu held (or b not
// shared yet).
func (b *fastBody) finish(reuse bool) {
	b.done = true
	if !reuse {
		_ = b.conn.Close()
	}
	fasthttp.ReleaseResponse(b.resp)
	b.hc.ReleaseReader(b.br)
	b.release(reuse)
}

// peerClosed reports whether the server closed an idle connection (or sent on it unasked): a read that does not
// wait and does not consume finds end of file or data where nothing should be.
func peerClosed(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	closed := false
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = n >= 0 && err == nil || err != nil && !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EINTR)
		return true // never wait
	})
	return closed || err != nil
}
