package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/valyala/fasthttp"

	"github.com/mcpgw/aggregator/internal/loadgen"
)

// The floors: three proxies that know nothing of MCP, each in front of the same backend. A gateway's hop can cost
// no less than a proxy that only copies bytes, so their ratios to the direct call are the physical limit of "one
// more hop" on this machine, measured in the same run: HAProxy (C, event loop, the cheapest production proxy
// at hand), Go's net/http ReverseProxy (the same HTTP stack as this daemon's /mcp listener and its hop) and a Go
// proxy on fasthttp (server and client: the HTTP stack of the REST front end), which tells what Go can reach
// when neither side is net/http.
const (
	floorHAProxy   = "haproxy"
	floorGoProxy   = "go-proxy"
	floorFastProxy = "fasthttp-proxy"

	// reverseProxyCommand runs this program as the net/http floor (a child process, so that its CPU is its own);
	// fastProxyCommand as the fasthttp floor.
	reverseProxyCommand = "serve-reverse-proxy"
	fastProxyCommand    = "serve-fasthttp-proxy"
)

// floors are the floors in the table's order.
func floors() []peerSpec { return []peerSpec{haproxyFloor(), goProxyFloor(), fastProxyFloor()} }

// haproxyFloor is HAProxy in HTTP mode with the backend as its one server: keep-alive on both sides, no
// logging. It is not installed here (Debian package haproxy; `make compare` installs it).
func haproxyFloor() peerSpec {
	return peerSpec{
		name:  floorHAProxy,
		label: "floor: HAProxy (HTTP mode, no MCP)",
		install: func(context.Context, options, *slog.Logger) (string, error) {
			bin, err := exec.LookPath("haproxy")
			if err != nil {
				return "", errors.New("haproxy not found: install the Debian package haproxy (make haproxy)")
			}
			return bin, nil
		},
		start: func(ctx context.Context, bin, backend, runDir string, port int, logs io.Writer) (*loadgen.Process, mcp.Transport, error) {
			u, err := url.Parse(backend)
			if err != nil {
				return nil, nil, fmt.Errorf("backend URL: %w", err)
			}
			cfg := filepath.Join(runDir, "haproxy.cfg")
			if err := os.WriteFile(cfg, []byte(haproxyConfig(port, u.Host)), 0o644); err != nil {
				return nil, nil, fmt.Errorf("write config: %w", err)
			}
			cmd := exec.Command(bin, "-db", "-f", cfg) // -db: foreground
			cmd.Stdout, cmd.Stderr = logs, logs
			p, err := loadgen.Start(cmd)
			if err != nil {
				return nil, nil, err
			}
			base := fmt.Sprintf("http://127.0.0.1:%d", port)
			if err := loadgen.WaitHTTP(ctx, p, base+u.Path, 30*time.Second); err != nil {
				p.Stop(time.Second)
				return nil, nil, err
			}
			return p, &mcp.StreamableClientTransport{Endpoint: base + u.Path, HTTPClient: loadgen.HTTPClient()}, nil
		},
	}
}

// haproxyConfig passes every request on to server (host:port). The long client and server timeouts keep the
// MCP session's idle GET stream open for the whole run.
func haproxyConfig(port int, server string) string {
	return fmt.Sprintf(`global
    maxconn 4096
defaults
    mode http
    option http-keep-alive
    timeout connect 5s
    timeout client 30m
    timeout server 30m
frontend floor
    bind 127.0.0.1:%d
    default_backend echo
backend echo
    http-reuse always
    server echo %s
`, port, server)
}

// goProxyFloor is net/http's ReverseProxy in a child process of this program (reverseProxyCommand), with the
// daemon's collector setting (GOGC=400) and as many idle backend connections as the daemon keeps.
func goProxyFloor() peerSpec {
	return childFloor(floorGoProxy, "floor: Go net/http ReverseProxy (no MCP)", reverseProxyCommand)
}

// fastProxyFloor is a fasthttp server passing every request to the backend through a fasthttp.HostClient, in a
// child process of this program (fastProxyCommand), GOGC=400 as the daemon.
func fastProxyFloor() peerSpec {
	return childFloor(floorFastProxy, "floor: Go fasthttp proxy (no MCP)", fastProxyCommand)
}

// childFloor is a floor served by this program itself, started as `self command addr backend`.
func childFloor(name, label, command string) peerSpec {
	return peerSpec{
		name:  name,
		label: label,
		install: func(context.Context, options, *slog.Logger) (string, error) {
			self, err := os.Executable()
			if err != nil {
				return "", fmt.Errorf("this program's path: %w", err)
			}
			return self, nil
		},
		start: func(ctx context.Context, self, backend, _ string, port int, logs io.Writer) (*loadgen.Process, mcp.Transport, error) {
			u, err := url.Parse(backend)
			if err != nil {
				return nil, nil, fmt.Errorf("backend URL: %w", err)
			}
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			cmd := exec.Command(self, command, addr, backend)
			cmd.Stdout, cmd.Stderr = logs, logs
			p, err := loadgen.Start(cmd)
			if err != nil {
				return nil, nil, err
			}
			base := "http://" + addr
			if err := loadgen.WaitHTTP(ctx, p, base+u.Path, 30*time.Second); err != nil {
				p.Stop(time.Second)
				return nil, nil, err
			}
			return p, &mcp.StreamableClientTransport{Endpoint: base + u.Path, HTTPClient: loadgen.HTTPClient()}, nil
		},
	}
}

// serveReverseProxy is the Go floor's process: it passes every request on listen to the backend at target until
// ctx ends.
func serveReverseProxy(ctx context.Context, listen, target string) error {
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return fmt.Errorf("reverse proxy target %q: want an http:// URL", target)
	}
	debug.SetGCPercent(400)
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(&url.URL{Scheme: u.Scheme, Host: u.Host}) },
		// SSE answers are flushed as they come (net/http would for text/event-stream anyway).
		FlushInterval: -1,
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 128, 128
	rp.Transport = t
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// floorCommand reports whether args ask for a Go floor's process, and returns its serve function, listen address
// and target.
func floorCommand(args []string) (serve func(ctx context.Context, listen, target string) error, listen, target string, ok bool) {
	if len(args) != 3 || strings.TrimSpace(args[1]) == "" {
		return nil, "", "", false
	}
	switch args[0] {
	case reverseProxyCommand:
		return serveReverseProxy, args[1], args[2], true
	case fastProxyCommand:
		return serveFastProxy, args[1], args[2], true
	}
	return nil, "", "", false
}

// serveFastProxy is the fasthttp floor's process: it passes every request on listen to the backend at target
// until ctx ends. Answers stream (an SSE answer, the session's GET stream), as through the other floors.
func serveFastProxy(ctx context.Context, listen, target string) error {
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return fmt.Errorf("fasthttp proxy target %q: want an http:// URL", target)
	}
	debug.SetGCPercent(400)
	hc := &fasthttp.HostClient{Addr: u.Host, MaxConns: 1024, StreamResponseBody: true}
	srv := &fasthttp.Server{
		Handler: func(c *fasthttp.RequestCtx) {
			c.Request.SetHost(u.Host)
			resp := fasthttp.AcquireResponse()
			if err := hc.Do(&c.Request, resp); err != nil {
				fasthttp.ReleaseResponse(resp)
				c.Error(err.Error(), fasthttp.StatusBadGateway)
				return
			}
			resp.Header.CopyTo(&c.Response.Header)
			if body := resp.BodyStream(); body != nil {
				// The server closes the stream once it has written it: the backend's connection goes back then.
				c.Response.SetBodyStream(&releasingBody{Reader: body, resp: resp}, resp.Header.ContentLength())
				return
			}
			c.Response.SetBody(resp.Body())
			fasthttp.ReleaseResponse(resp)
		},
		// A session's GET stream stays open for the whole run.
		IdleTimeout: 30 * time.Minute,
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	go func() {
		<-ctx.Done()
		_ = ln.Close()
	}()
	if err := srv.Serve(ln); err != nil && ctx.Err() == nil {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// releasingBody is a streamed answer's body; closing it ends the backend's stream and releases its response.
type releasingBody struct {
	io.Reader
	resp *fasthttp.Response
}

func (b *releasingBody) Close() error {
	err := b.resp.CloseBodyStream()
	fasthttp.ReleaseResponse(b.resp)
	return err
}
