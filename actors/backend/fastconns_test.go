package backend

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// connServer is a test backend that records, per request, the client's address (one per connection) and what it
// received, and tells when a request's connection went away.
type connServer struct {
	*httptest.Server
	mu    sync.Mutex
	seen  []seenRequest
	gone  chan string // the remote address of a request whose client went away
	route func(w http.ResponseWriter, r *http.Request)
}

type seenRequest struct {
	method, remote, body, host string
	header                     http.Header
	length                     int64
	chunked                    bool
}

func newConnServer(t *testing.T, route func(w http.ResponseWriter, r *http.Request)) *connServer {
	t.Helper()
	s := &connServer{gone: make(chan string, 16), route: route}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.seen = append(s.seen, seenRequest{method: r.Method, remote: r.RemoteAddr, body: string(body), host: r.Host,
			header: r.Header.Clone(), length: r.ContentLength, chunked: len(r.TransferEncoding) > 0})
		s.mu.Unlock()
		s.route(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *connServer) requests() []seenRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seenRequest(nil), s.seen...)
}

// fastFor is the bottom layer of a session with the server's URL, and asserts that it is fasthttp's.
func fastFor(t *testing.T, s *connServer) *fastTransport {
	t.Helper()
	u, _ := url.Parse(s.URL + "/mcp")
	ft, ok := newFastTransport(NewOutbound(OutboundConfig{}, "").Transport(), u).(*fastTransport)
	if !ok {
		t.Fatalf("a plain http endpoint did not get the fasthttp transport")
	}
	t.Cleanup(ft.CloseIdleConnections)
	return ft
}

func post(ctx context.Context, t *testing.T, rt http.RoundTripper, target, body string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return rt.RoundTrip(req)
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	_ = resp.Body.Close()
	return string(b)
}

func TestFastTransportSendsAsNetHTTP(t *testing.T) {
	s := newConnServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("X-Many", "a")
		w.Header().Add("X-Many", "b")
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("chunked") != "" {
			_, _ = io.WriteString(w, "first,")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "second")
			return
		}
		_, _ = io.WriteString(w, `{"ok":true}`)
	})
	ft := fastFor(t, s)
	ctx := context.Background()

	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/mcp?x=1%2F2", strings.NewReader(`{"a":1}`))
	req.Header["Mcp-Session-Id"] = []string{"s1"}
	req.Header["X-Two"] = []string{"one", "two"}
	resp, err := ft.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != `{"ok":true}` || resp.StatusCode != 200 || resp.Status != "200 OK" {
		t.Fatalf("answer %d %q %q", resp.StatusCode, resp.Status, got)
	}
	if resp.Header.Get("Content-Type") != "application/json" || strings.Join(resp.Header["X-Many"], ",") != "a,b" ||
		resp.ContentLength != int64(len(`{"ok":true}`)) || resp.Request != req {
		t.Fatalf("answer's head: %v length %d", resp.Header, resp.ContentLength)
	}

	// An unknown length goes chunked, both ways.
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/mcp?chunked=1", io.NopCloser(strings.NewReader("streamed")))
	req.ContentLength = -1
	req.Header.Set("Content-Type", "text/plain")
	resp, err = ft.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "first,second" || resp.ContentLength != -1 || len(resp.TransferEncoding) != 1 {
		t.Fatalf("chunked answer %q length %d encoding %v", got, resp.ContentLength, resp.TransferEncoding)
	}

	seen := s.requests()
	if len(seen) != 2 {
		t.Fatalf("the server saw %d requests", len(seen))
	}
	first := seen[0]
	if first.method != "POST" || first.body != `{"a":1}` || first.length != 7 || first.host != s.Listener.Addr().String() ||
		first.header.Get("Mcp-Session-Id") != "s1" || strings.Join(first.header["X-Two"], ",") != "one,two" ||
		first.header.Get("User-Agent") != goUserAgent || first.header["Content-Type"] != nil {
		t.Fatalf("the server saw %+v", first)
	}
	if second := seen[1]; second.body != "streamed" || !second.chunked || second.header.Get("Content-Type") != "text/plain" {
		t.Fatalf("the unknown-length request arrived as %+v", second)
	}
	if seen[0].remote != seen[1].remote {
		t.Fatalf("a read answer's connection was not reused: %s then %s", seen[0].remote, seen[1].remote)
	}
	if ft.hc.ConnsCount() != 1 {
		t.Fatalf("fasthttp holds %d connections, want the one reused", ft.hc.ConnsCount())
	}
}

func TestFastTransportLeavesTheRestToNetHTTP(t *testing.T) {
	s := newConnServer(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, r.Method) })
	ft := fastFor(t, s)
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		req, _ := http.NewRequest(method, s.URL+"/mcp", nil)
		resp, err := ft.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp); got != method {
			t.Fatalf("%s answered %q", method, got)
		}
	}
	if n := ft.hc.ConnsCount(); n != 0 {
		t.Fatalf("GET and DELETE went through fasthttp (%d connections)", n)
	}

	base := NewOutbound(OutboundConfig{}, "").Transport()
	tls, _ := url.Parse("https://example.test/mcp")
	if _, ok := newFastTransport(base, tls).(*http.Transport); !ok {
		t.Fatal("an https endpoint got the fasthttp transport (net/http negotiates HTTP/2 there)")
	}
	proxied := NewOutbound(OutboundConfig{}, "").Transport()
	proxied.Proxy = func(*http.Request) (*url.URL, error) { return url.Parse("http://proxy.test:3128") }
	plain, _ := url.Parse(s.URL)
	if _, ok := newFastTransport(proxied, plain).(*http.Transport); !ok {
		t.Fatal("an endpoint behind a proxy from the environment got the fasthttp transport")
	}
}

func TestFastTransportClosesABodyClosedUnread(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	s := newConnServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("big") != "" {
			_, _ = io.WriteString(w, big)
			return
		}
		_, _ = io.WriteString(w, "small")
	})
	ft := fastFor(t, s)
	resp, err := post(context.Background(), t, ft, s.URL+"/mcp?big=1", "{}")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if n := ft.hc.ConnsCount(); n != 0 {
		t.Fatalf("the connection of a body closed unread is kept (%d connections)", n)
	}
	if _, err := resp.Body.Read(make([]byte, 1)); !errors.Is(err, errBodyClosed) {
		t.Fatalf("a read after close returned %v", err)
	}
	// The next request must not read the rest of the big answer as its own.
	resp, err = post(context.Background(), t, ft, s.URL+"/mcp", "{}")
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "small" {
		t.Fatalf("the next answer read %d bytes starting %q", len(got), got[:min(len(got), 20)])
	}
	seen := s.requests()
	if seen[0].remote == seen[1].remote {
		t.Fatal("the connection of a body closed unread was pooled and reused")
	}
}

// newHangingServer answers nothing (or, for ?stream=1, the first event of an SSE stream) until the client goes away,
// which it reports on gone.
func newHangingServer(t *testing.T) *connServer {
	t.Helper()
	release := make(chan struct{})
	var s *connServer
	s = newConnServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("stream") != "" {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: first\n\n")
			w.(http.Flusher).Flush()
		}
		select {
		case <-r.Context().Done():
			s.gone <- r.RemoteAddr
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) }) // before the server's Close, which waits for its handlers
	return s
}

func TestFastTransportEndsWithTheContext(t *testing.T) {
	s := newHangingServer(t)
	ft := fastFor(t, s)

	// Waiting for the answer's head.
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := post(ctx, t, ft, s.URL+"/mcp", "{}")
		got <- err
	}()
	waitSeen(t, s, 1)
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("a request given up while its answer was awaited returned %v", err)
	}
	waitGone(t, s)

	// Reading the answer's body.
	ctx, cancel = context.WithCancel(context.Background())
	resp, err := post(ctx, t, ft, s.URL+"/mcp?stream=1", "{}")
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "data: first\n" {
		t.Fatalf("the stream's first line %q, %v", line, err)
	}
	cancel()
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("a stream given up read to its end")
	}
	_ = resp.Body.Close()
	waitGone(t, s)

	// A deadline already past sends nothing.
	past, cancelPast := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancelPast()
	if _, err := post(past, t, ft, s.URL+"/mcp", "{}"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a request past its deadline returned %v", err)
	}
	if n := len(s.requests()); n != 2 {
		t.Fatalf("the server saw %d requests, want 2", n)
	}
}

func TestFastTransportCloseEndsAWaitingRead(t *testing.T) {
	s := newHangingServer(t)
	ft := fastFor(t, s)
	resp, err := post(context.Background(), t, ft, s.URL+"/mcp?stream=1", "{}")
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(resp.Body)
		read <- err
	}()
	waitSeen(t, s, 1)
	_ = resp.Body.Close()
	if err := <-read; err == nil {
		t.Fatal("a read waiting on a closed body ended without an error")
	}
	waitGone(t, s)
}

func TestFastTransportSessionCloseEndsItsRequests(t *testing.T) {
	s := newHangingServer(t)
	conns := newSessionConns(fastFor(t, s))
	got := make(chan error, 1)
	go func() {
		_, err := post(context.Background(), t, conns, s.URL+"/mcp", "{}")
		got <- err
	}()
	waitSeen(t, s, 1)
	// A stream of the session being read when it closes.
	resp, err := post(context.Background(), t, conns, s.URL+"/mcp?stream=1", "{}")
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "data: first\n" {
		t.Fatalf("the stream's first line %q, %v", line, err)
	}
	conns.close()
	select {
	case err := <-got:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a request of a closed session returned %v, want it cancelled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a request waiting for its answer outlived its session's close")
	}
	waitGone(t, s)
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("a stream of a closed session read to its end")
	}
	_ = resp.Body.Close()
	waitGone(t, s)
	if n := conns.base.(*fastTransport).hc.ConnsCount(); n != 0 {
		t.Fatalf("%d connections of a closed session are kept", n)
	}
	if _, err := post(context.Background(), t, conns, s.URL+"/mcp", "{}"); !errors.Is(err, errSessionClosed) {
		t.Fatalf("a request after the session closed returned %v", err)
	}
}

func TestFastTransportSkipsConnectionsTheServerClosed(t *testing.T) {
	// A server that closes every connection once it has answered, without saying so (as an idle timeout does).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			}()
		}
	}()
	u, _ := url.Parse("http://" + ln.Addr().String() + "/mcp")
	ft := newFastTransport(NewOutbound(OutboundConfig{}, "").Transport(), u).(*fastTransport)
	defer ft.CloseIdleConnections()
	for i := range 3 {
		resp, err := post(context.Background(), t, ft, u.String(), "{}")
		if err != nil {
			t.Fatalf("request %d on a pool the server closed behind: %v", i, err)
		}
		if got := readAll(t, resp); got != "ok" {
			t.Fatalf("request %d answered %q", i, got)
		}
		// Let the server's FIN arrive before the next request takes the pooled connection.
		waitFor(t, func() bool { return ft.hc.IdleConnsCount() == 0 || closedIdle(ft) }, "the server's close to arrive")
	}
}

// closedIdle reports whether the pool's idle connection has been closed by the server.
func closedIdle(ft *fastTransport) bool {
	cc, err := ft.hc.AcquireConn(time.Second, false)
	if err != nil {
		return false
	}
	closed := peerClosed(cc.Conn())
	ft.hc.ReleaseConn(cc)
	return closed
}

func TestFastTransportDialsThroughThePolicy(t *testing.T) {
	s := newConnServer(t, func(w http.ResponseWriter, r *http.Request) {})
	u, _ := url.Parse(s.URL + "/mcp")
	deny := NewOutbound(OutboundConfig{Deny: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, "")
	ft := newFastTransport(deny.Transport(), u).(*fastTransport)
	if _, err := post(context.Background(), t, ft, u.String(), "{}"); err == nil || !strings.Contains(err.Error(), "outbound target refused") {
		t.Fatalf("a dial the policy refuses returned %v", err)
	}
	if n := len(s.requests()); n != 0 {
		t.Fatalf("the server saw %d requests", n)
	}
}

func waitSeen(t *testing.T, s *connServer, n int) {
	t.Helper()
	waitFor(t, func() bool { return len(s.requests()) >= n }, "the server to see the request")
}

func waitGone(t *testing.T, s *connServer) {
	t.Helper()
	select {
	case <-s.gone:
	case <-time.After(30 * time.Second):
		t.Fatal("the server never saw the connection end")
	}
}

// A streamable HTTP or SSE session dialled for a plain http endpoint sends its POSTs over fasthttp, with what the
// layers above the bottom add (configured headers, the hop header).
func TestDialSendsPOSTsOverFasthttp(t *testing.T) {
	s := newConnServer(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	for _, transport := range []string{persistence.TransportHTTP, persistence.TransportSSE} {
		t.Run(transport, func(t *testing.T) {
			key := "base_url"
			if transport == persistence.TransportSSE {
				key = "url"
			}
			cfg, _ := json.Marshal(map[string]any{key: s.URL + "/mcp", "headers": map[string]string{"X-Api-Key": "k3y"}})
			o := Options{Env: func(string) (string, bool) { return "", false }, Outbound: NewOutbound(OutboundConfig{}, "instance-a")}
			b, err := Dial(persistence.Server{TransportType: transport, ConnectionConfig: cfg}, o)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Release()
			ft, ok := b.conns.base.(*fastTransport)
			if !ok {
				t.Fatalf("the session's bottom layer is %T", b.conns.base)
			}
			resp, err := b.client.Post(s.URL+"/mcp", "application/json", strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, resp); got != "ok" {
				t.Fatalf("answer %q", got)
			}
			seen := s.requests()
			h := seen[len(seen)-1].header
			if h.Get("X-Api-Key") != "k3y" || h.Get(HopHeader) != "instance-a" || ft.hc.ConnsCount() != 1 {
				t.Fatalf("the POST carried %v over %d fasthttp connections", h, ft.hc.ConnsCount())
			}
		})
	}
}

// A backend is untrusted: whatever it writes back, the request fails with an error (no panic, no hang past the
// request's deadline), and the connection it wrote on is never pooled.
func TestFastTransportRefusesHostileAnswers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer string // written after reading the request; the connection is then held open until the test ends
		body   bool   // the head is fine: the failure comes while reading the body
	}{
		{"garbage", "SSH-2.0-OpenSSH_9.6\r\n\r\n", false},
		{"headers beyond the bound", "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", fastReadBuffer+1) + "\r\n\r\n", false},
		{"endless interim answers", strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", 200), false},
		{"bad chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n", true},
		{"short body", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", true},
		{"silence", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			hold := make(chan struct{})
			defer close(hold)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				_, _ = io.WriteString(c, tc.answer)
				if tc.name == "short body" {
					return // and close: the body ends early
				}
				<-hold
			}()
			u, _ := url.Parse("http://" + ln.Addr().String() + "/mcp")
			ft := newFastTransport(NewOutbound(OutboundConfig{}, "").Transport(), u).(*fastTransport)
			defer ft.CloseIdleConnections()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			resp, err := post(ctx, t, ft, u.String(), "{}")
			if err == nil {
				if !tc.body {
					t.Fatalf("a hostile answer was taken: %d %v", resp.StatusCode, resp.Header)
				}
				_, err = io.ReadAll(resp.Body)
				_ = resp.Body.Close()
			}
			if err == nil {
				t.Fatal("a hostile answer was read without an error")
			}
			if n := ft.hc.ConnsCount(); n != 0 {
				t.Fatalf("the connection of a hostile answer is kept (%d connections)", n)
			}
		})
	}
}
