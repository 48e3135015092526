// Command peer-compare is the side-by-side benchmark of `make compare`: the same echo backend
// (cmd/mcp-echo-backend, streamable HTTP) reached directly, through this daemon (REST and /mcp), through mcp-hub
// (npm) and through ToolHive's vmcp, measured in interleaved rounds, printed as one markdown table with each
// path's ratio to the direct call.
//
// It builds the daemon and the echo backend and installs the peers into a scratch folder that later runs reuse
// (npm install --prefix, GOBIN=... go install). A peer that cannot be installed or started keeps its row in the
// table with the reason instead of failing the run. Every process runs on loopback; the load comes from this
// process, with the same load generator as the routing benchmarks (internal/loadgen).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/mcpserver"
	"github.com/mcpgw/aggregator/internal/loadgen"
)

// Path keys (the first column of the noise line) and peer names (-skip).
const (
	pathDirect = "direct"
	pathREST   = "rest"
	pathMCP    = "mcp"
	pathMCPV2  = "mcp-2026"
	peerHub    = "mcp-hub"
	peerVMCP   = "vmcp"

	backendName = "echo"         // the backend's name in every gateway's configuration
	echoMessage = "peer-compare" // the echo tool's argument, checked in the answer before measuring

	// maxManyCalls bounds the calls of one throughput phase (the time bound comes first on any machine so far);
	// the load generator reserves room for every caller's share of it up front.
	maxManyCalls = 2_000_000
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var err error
	if serve, listen, target, ok := floorCommand(os.Args[1:]); ok {
		err = serve(ctx, listen, target) // a Go floor's process (floors.go)
	} else {
		err = run(ctx, os.Args[1:], os.Stdout, os.Stderr, logger)
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer-compare:", err)
		os.Exit(1)
	}
}

// path is one way to call the echo tool.
type path struct {
	res  pathResult
	call loadgen.Caller
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) error {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	runDir := filepath.Join(o.scratch, "run")
	if err := os.RemoveAll(runDir); err != nil {
		return fmt.Errorf("clear %s: %w", runDir, err)
	}
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", runDir, err)
	}
	host := describeHost(ctx)

	bins, err := buildOwn(ctx, o.scratch, logger)
	if err != nil {
		return err
	}
	var split *cpuSplit
	if o.split {
		if split, err = newCPUSplit(); err != nil {
			return err
		}
		if err := split.onLoad(); err != nil { // the backend, started next, inherits the load's CPUs
			return err
		}
		host.layout = split.describe()
		logger.Info("cpu split", "layout", host.layout)
	}
	echoLog, err := os.Create(filepath.Join(runDir, "mcp-echo-backend.log"))
	if err != nil {
		return fmt.Errorf("echo backend log: %w", err)
	}
	defer echoLog.Close()
	echo, url, err := loadgen.StartEcho(bins.echo, 0, echoLog)
	if err != nil {
		return fmt.Errorf("%w (log: %s)", err, echoLog.Name())
	}
	defer echo.Stop(time.Second)
	logger.Info("echo backend", "url", url)

	if err := split.onGateway(); err != nil { // the daemon and the peers, started next, inherit the gateways' CPUs
		return err
	}
	paths, closeAll, err := openPaths(ctx, o, bins, url, runDir, logger)
	defer closeAll()
	if err != nil {
		return err
	}
	if err := split.onLoad(); err != nil {
		return err
	}

	if err := measure(ctx, o, paths, logger); err != nil {
		return err
	}
	host.loadEnd = loadAverage()
	results := make([]pathResult, len(paths))
	for i, p := range paths {
		results[i] = p.res
	}
	fmt.Fprint(stdout, formatHeader(o, host, results))
	fmt.Fprint(stdout, formatTable(results, o.callers))
	return nil
}

// measure runs the rounds: in each, every path in turn (the order rotates by one each round) gets a one-caller
// warm-up and o.calls back-to-back calls, then a warm-up at o.callers callers and o.duration of calls by as many
// callers.
func measure(ctx context.Context, o options, paths []*path, logger *slog.Logger) error {
	var live []*path
	for _, p := range paths {
		if p.res.skipped == "" {
			live = append(live, p)
		}
	}
	for r := 0; r < o.rounds; r++ {
		for i := range live {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("interrupted: %w", err)
			}
			p := live[(i+r)%len(live)]
			loadgen.Closed(p.call, 1, o.warmup, time.Minute, o.callTimeout)
			one := loadgen.Closed(p.call, 1, o.calls, 10*time.Minute, o.callTimeout)
			p.res.one.Merge(one)
			p.res.oneP50 = append(p.res.oneP50, loadgen.Percentile(one.Lat, 0.5))
			loadgen.Closed(p.call, o.callers, 4*o.warmup, 2*time.Second, o.callTimeout)
			many := loadgen.Closed(p.call, o.callers, maxManyCalls, o.duration, o.callTimeout)
			p.res.many.Merge(many)
			p.res.manyPS = append(p.res.manyPS, many.Rate())
			logger.Info("measured", "round", r+1, "path", p.res.key, "p50_ms", fmt.Sprintf("%.2f", ms(loadgen.Percentile(one.Lat, 0.5))),
				"calls_per_s", int(many.Rate()), "errors", many.Errs)
		}
	}
	return nil
}

// openPaths starts the daemon and the peers, connects a client to each and checks one call per path came back
// with the echo. A peer that fails is kept as a skipped path; the direct and daemon paths must work.
func openPaths(ctx context.Context, o options, bins ownBinaries, url, runDir string, logger *slog.Logger) ([]*path, func(), error) {
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	pinned := &mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion}
	direct, err := connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: loadgen.HTTPClient()}, pinned)
	if err != nil {
		return nil, closeAll, fmt.Errorf("direct: %w", err)
	}
	closers = append(closers, func() { _ = direct.Close() })

	daemonLog, err := os.Create(filepath.Join(runDir, "aggregator.log"))
	if err != nil {
		return nil, closeAll, fmt.Errorf("daemon log: %w", err)
	}
	closers = append(closers, func() { _ = daemonLog.Close() })
	d, err := loadgen.StartDaemon(ctx, bins.aggregator, filepath.Join(runDir, "aggregator-data"), "warn", daemonLog)
	if err != nil {
		return nil, closeAll, err
	}
	closers = append(closers, func() { d.Stop(10 * time.Second) })
	restClient := loadgen.HTTPClient()
	if err := registerBackend(ctx, restClient, d.API, url); err != nil {
		return nil, closeAll, fmt.Errorf("%w (daemon log: %s)", err, daemonLog.Name())
	}
	aggSess, err := connect(ctx, &mcp.StreamableClientTransport{Endpoint: d.MCP, HTTPClient: loadgen.HTTPClient()}, pinned)
	if err != nil {
		return nil, closeAll, fmt.Errorf("daemon /mcp: %w", err)
	}
	closers = append(closers, func() { _ = aggSess.Close() })
	alias, err := findEchoTool(ctx, aggSess)
	if err != nil {
		return nil, closeAll, fmt.Errorf("daemon /mcp: %w", err)
	}
	// A client of the sessionless revision on the same endpoint (each call its own HTTP request, no session).
	modernSess, err := connect(ctx, &mcp.StreamableClientTransport{Endpoint: d.MCP, HTTPClient: loadgen.HTTPClient()},
		&mcp.ClientSessionOptions{ProtocolVersion: mcpserver.ModernProtocol})
	if err != nil {
		return nil, closeAll, fmt.Errorf("daemon /mcp, %s: %w", mcpserver.ModernProtocol, err)
	}
	closers = append(closers, func() { _ = modernSess.Close() })

	paths := []*path{
		{res: pathResult{key: pathDirect, label: "direct (go-sdk client to the backend)"}, call: loadgen.MCPCaller(direct, "echo", echoMessage)},
		{res: pathResult{key: pathREST, label: "this daemon, REST `POST /api/v1/tools/call`"},
			call: loadgen.RESTCaller(restClient, d.Call, backendName+".echo", echoMessage)},
		{res: pathResult{key: pathMCP, label: "this daemon, `/mcp`"}, call: loadgen.MCPCaller(aggSess, alias, echoMessage)},
		{res: pathResult{key: pathMCPV2, label: "this daemon, `/mcp`, " + mcpserver.ModernProtocol + " client"},
			call: loadgen.MCPCaller(modernSess, alias, echoMessage)},
	}
	checks := []func(context.Context) error{
		func(ctx context.Context) error { return checkMCPEcho(ctx, direct, "echo") },
		func(ctx context.Context) error { return checkRESTEcho(ctx, restClient, d.Call, backendName+".echo") },
		func(ctx context.Context) error { return checkMCPEcho(ctx, aggSess, alias) },
		func(ctx context.Context) error { return checkMCPEcho(ctx, modernSess, alias) },
	}
	for i, check := range checks {
		if err := check(ctx); err != nil {
			return nil, closeAll, fmt.Errorf("%s: %w", paths[i].res.key, err)
		}
	}

	for _, peer := range append(floors(), hubPeer(o), vmcpPeer(o)) {
		p := &path{res: pathResult{key: peer.name, label: peer.label}}
		paths = append(paths, p)
		if o.skipped(peer.name) {
			p.res.skipped = "left out with -skip"
			continue
		}
		sess, stop, err := startPeer(ctx, o, peer, url, runDir, logger)
		if stop != nil {
			closers = append(closers, stop)
		}
		if err != nil {
			p.res.skipped = err.Error()
			logger.Warn("peer skipped", "peer", peer.name, "err", err)
			continue
		}
		tool, err := findEchoTool(ctx, sess)
		if err == nil {
			err = checkMCPEcho(ctx, sess, tool)
		}
		if err != nil {
			p.res.skipped = err.Error()
			logger.Warn("peer skipped", "peer", peer.name, "err", err)
			continue
		}
		p.call = loadgen.MCPCaller(sess, tool, echoMessage)
		logger.Info("peer ready", "peer", peer.name, "tool", tool)
	}
	return paths, closeAll, nil
}

// connect opens one MCP client session; it multiplexes the concurrent calls of every caller, as a client
// application would. The go-sdk's SSE client keeps its event stream on Connect's context, so that context must
// outlive the session: it is cancelled only if Connect takes longer than 20 s (the session's Close ends the
// stream otherwise).
func connect(ctx context.Context, t mcp.Transport, opts *mcp.ClientSessionOptions) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "peer-compare", Version: "1"}, nil)
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	timer := time.AfterFunc(20*time.Second, cancel)
	sess, err := client.Connect(cctx, t, opts)
	if !timer.Stop() || err != nil {
		cancel()
		if err == nil {
			_ = sess.Close()
			err = errors.New("took longer than 20s")
		}
		return nil, fmt.Errorf("connect: %w", err)
	}
	return sess, nil
}

// findEchoTool waits until the session lists the backend's echo tool under the gateway's name for it (echo,
// echo__echo, echo_echo, ...) and returns that name.
func findEchoTool(ctx context.Context, sess *mcp.ClientSession) (string, error) {
	deadline := time.Now().Add(60 * time.Second)
	var seen []string
	var lastErr error
	for time.Now().Before(deadline) {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		seen, lastErr = seen[:0], nil
		for t, err := range sess.Tools(lctx, nil) {
			if err != nil {
				lastErr = err
				break
			}
			seen = append(seen, t.Name)
			if isEchoAlias(t.Name) {
				cancel()
				return t.Name, nil
			}
		}
		cancel()
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("list tools: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("no echo tool listed within 60s (tools %q, last error %v)", seen, lastErr)
}

// isEchoAlias says whether a listed tool name is the echo backend's echo tool as a gateway names it.
func isEchoAlias(name string) bool {
	if name == "echo" {
		return true
	}
	rest, ok := strings.CutPrefix(name, backendName)
	if !ok || !strings.HasSuffix(rest, "echo") {
		return false
	}
	sep := strings.TrimSuffix(rest, "echo")
	return sep != "" && strings.Trim(sep, "_-.:/") == ""
}

// checkMCPEcho makes one call and checks the backend's answer came back, so no path measures a fast error.
func checkMCPEcho(ctx context.Context, sess *mcp.ClientSession, tool string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"message": echoMessage}})
	if err != nil {
		return fmt.Errorf("call %s: %w", tool, err)
	}
	raw, err := json.Marshal(res.Content)
	if err != nil {
		return fmt.Errorf("call %s: encode the answer: %w", tool, err)
	}
	if res.IsError || !strings.Contains(string(raw), echoMessage) {
		return fmt.Errorf("call %s answered %s", tool, raw)
	}
	return nil
}

// hostInfo describes the machine for the header.
type hostInfo struct {
	cpus      int
	memory    string
	loadStart string
	loadEnd   string
	goVersion string
	node      string
	revision  string
	layout    string // where the processes run: every CPU shared, or -split's halves
}

func describeHost(ctx context.Context) hostInfo {
	h := hostInfo{cpus: runtime.NumCPU(), memory: memTotal(), loadStart: loadAverage(), goVersion: runtime.Version()}
	h.node = commandLine(ctx, "node", "--version")
	h.revision = commandLine(ctx, "git", "rev-parse", "--short", "HEAD")
	h.layout = "every process on every CPU"
	return h
}

// commandLine is the first line a short command prints, or "unknown".
func commandLine(ctx context.Context, name string, args ...string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).Output()
	if err != nil {
		return "unknown"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

// loadAverage is the 1-, 5- and 15-minute load average (Linux), or "unknown".
func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// memTotal is the machine's memory in GiB (Linux), or "unknown".
func memTotal() string {
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kib int64
			if _, err := fmt.Sscan(v, &kib); err == nil {
				return fmt.Sprintf("%.1f GiB", float64(kib)/(1<<20))
			}
		}
	}
	return "unknown"
}

// formatHeader says what was measured, when, on what and against which versions.
func formatHeader(o options, h hostInfo, paths []pathResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Side by side (`make compare`, cmd/peer-compare), rounds: %d, paths interleaved; per path and round %s calls by 1 caller, then %v of %d callers.\n",
		o.rounds, thousands(float64(o.calls)), o.duration, o.callers)
	fmt.Fprintf(&b, "Date %s. Machine: %s/%s, %d CPUs, %s, load average %s at the start and %s at the end; %s, Node %s; this daemon at %s.\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.GOOS, runtime.GOARCH, h.cpus, h.memory, h.loadStart, h.loadEnd,
		h.goVersion, h.node, h.revision)
	var peers []string
	for _, p := range paths {
		if p.key == peerHub || p.key == peerVMCP {
			state := ""
			if p.skipped != "" {
				state = " (skipped)"
			}
			peers = append(peers, p.label+state)
		}
	}
	fmt.Fprintf(&b, "Backend: cmd/mcp-echo-backend (go-sdk, streamable HTTP), one process behind every path. Peers: %s. CPUs: %s.\n\n",
		strings.Join(peers, ", "), h.layout)
	return b.String()
}

// errNoGoMod: the program builds this repository's daemon, so it runs from inside it.
var errNoGoMod = errors.New("not inside the aggregator module: run make compare from the repository")
