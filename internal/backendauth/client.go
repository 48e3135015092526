package backendauth

import (
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/internal/connconfig"
)

// Bounds of the OAuth requests the daemon makes (metadata, registration, token): a backend and its authorization
// server are untrusted.
const (
	// MaxResponseBytes bounds each response body read.
	MaxResponseBytes = 1 << 20
	// RequestTimeout bounds each request.
	RequestTimeout = 30 * time.Second
)

// Client is the HTTP client of every OAuth request (protected resource metadata, authorization server metadata,
// dynamic client registration, code exchange, refresh, token exchange): every URL, the discovered ones and every
// redirect, passes the outbound policy (no cloud metadata or link-local address, the operator's deny list, never
// the daemon itself; checked on the resolved address at dial time) and needs https (plain http only to loopback);
// each response is read up to MaxResponseBytes, each request within RequestTimeout. allowInsecure allows plain
// http anywhere (the server's allow_insecure_http).
func Client(out *backend.Outbound, allowInsecure bool) *http.Client {
	base := out.HealthClient() // guarded dials and the hop header; no configured header is ever sent
	return &http.Client{Timeout: RequestTimeout, CheckRedirect: connconfig.CheckRedirect(allowInsecure),
		Transport: &guarded{base: base.Transport, out: out, allowInsecure: allowInsecure}}
}

type guarded struct {
	base          http.RoundTripper
	out           *backend.Outbound
	allowInsecure bool
}

func (g *guarded) RoundTrip(r *http.Request) (*http.Response, error) {
	u := r.URL.String()
	problem := connconfig.PlainHTTPProblem(u, g.allowInsecure)
	if problem == "" {
		problem = g.out.URLProblem(u)
	}
	if problem != "" {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, fmt.Errorf("OAuth request to %s refused: %s", r.URL.Host, problem)
	}
	res, err := g.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	res.Body = &limitedBody{r: io.LimitReader(res.Body, MaxResponseBytes), c: res.Body}
	return res, nil
}

type limitedBody struct {
	r io.Reader
	c io.Closer
}

func (b *limitedBody) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b *limitedBody) Close() error               { return b.c.Close() }
