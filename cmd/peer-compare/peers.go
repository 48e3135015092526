package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/internal/loadgen"
)

// ownBinaries are this repository's daemon and echo backend, built without -race.
type ownBinaries struct {
	aggregator string
	echo       string
}

// buildOwn builds cmd/aggregator and cmd/mcp-echo-backend into <scratch>/bin (the go build cache makes repeats
// cheap) from the module that holds the working directory.
func buildOwn(ctx context.Context, scratch string, logger *slog.Logger) (ownBinaries, error) {
	gomod := commandLine(ctx, "go", "env", "GOMOD")
	if gomod == "unknown" || gomod == "" || gomod == os.DevNull {
		return ownBinaries{}, errNoGoMod
	}
	root := filepath.Dir(gomod)
	dir := filepath.Join(scratch, "bin")
	bins := ownBinaries{aggregator: filepath.Join(dir, "aggregator"), echo: filepath.Join(dir, "mcp-echo-backend")}
	for _, c := range []struct{ out, pkg string }{{bins.aggregator, "./cmd/aggregator"}, {bins.echo, "./cmd/mcp-echo-backend"}} {
		logger.Info("build", "package", c.pkg)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", c.out, c.pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return ownBinaries{}, fmt.Errorf("build %s: %w\n%s", c.pkg, err, out)
		}
	}
	return bins, nil
}

// postJSON sends one JSON request and returns the status and body.
func postJSON(ctx context.Context, client *http.Client, url string, body any) (int, []byte, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return 0, nil, fmt.Errorf("encode: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(raw))
	if err != nil {
		return 0, nil, fmt.Errorf("request %s: %w", url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("read %s: %w", url, err)
	}
	return resp.StatusCode, out, nil
}

// registerBackend registers the echo backend with the daemon (streamable HTTP) and waits until a REST call of
// its echo tool answers.
func registerBackend(ctx context.Context, client *http.Client, api, url string) error {
	code, body, err := postJSON(ctx, client, api+"/servers", map[string]any{
		"name": backendName, "transport_type": "HTTP", "connection_config": map[string]any{"base_url": url},
	})
	if err != nil || code != http.StatusCreated {
		return fmt.Errorf("register the backend with the daemon: %d %s %v", code, body, err)
	}
	return nil
}

// checkRESTEcho calls the echo tool through the daemon's REST API until the echo comes back (the backend
// connects and its tools are discovered in the background), for at most 30 s.
func checkRESTEcho(ctx context.Context, client *http.Client, url, tool string) error {
	deadline := time.Now().Add(30 * time.Second)
	var code int
	var body []byte
	var err error
	for time.Now().Before(deadline) {
		code, body, err = postJSON(ctx, client, url, map[string]any{"name": tool, "arguments": map[string]any{"message": echoMessage}})
		if err == nil && code == http.StatusOK && bytes.Contains(body, []byte(echoMessage)) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("REST call %s: %w", tool, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("REST call %s: %d %s %v", tool, code, body, err)
}

// peerSpec is a peer gateway: how to install it into the scratch folder and how to run it in front of the
// backend.
type peerSpec struct {
	name    string
	label   string
	install func(ctx context.Context, o options, logger *slog.Logger) (string, error)
	// start runs the installed peer on port with the backend at url, config files in runDir, output to logs, and
	// returns the process and a client transport for its MCP endpoint.
	start func(ctx context.Context, installed, url, runDir string, port int, logs io.Writer) (*loadgen.Process, mcp.Transport, error)
}

// startPeer installs (or reuses) and starts one peer and opens a client session to it. stop, when not nil, ends
// the session and the process; it is returned with the error too.
func startPeer(ctx context.Context, o options, peer peerSpec, url, runDir string, logger *slog.Logger) (*mcp.ClientSession, func(), error) {
	installed, err := peer.install(ctx, o, logger)
	if err != nil {
		return nil, nil, err
	}
	port, err := loadgen.FreePort()
	if err != nil {
		return nil, nil, err
	}
	logPath := filepath.Join(runDir, peer.name+".log")
	logs, err := os.Create(logPath)
	if err != nil {
		return nil, nil, fmt.Errorf("log file: %w", err)
	}
	proc, transport, err := peer.start(ctx, installed, url, runDir, port, logs)
	if err != nil {
		_ = logs.Close()
		return nil, nil, fmt.Errorf("start: %w (log: %s)", err, logPath)
	}
	stop := func() {
		proc.Stop(5 * time.Second)
		_ = logs.Close()
	}
	// A peer may answer its health check before its MCP endpoint is ready (mcp-hub does): retry for a while.
	var sess *mcp.ClientSession
	deadline := time.Now().Add(30 * time.Second)
	for sess, err = connect(ctx, transport, nil); err != nil && time.Now().Before(deadline); sess, err = connect(ctx, transport, nil) {
		select {
		case <-ctx.Done():
			return nil, stop, fmt.Errorf("connect: %w", ctx.Err())
		case <-proc.Exited():
			return nil, stop, fmt.Errorf("the process exited (log: %s)", logPath)
		case <-time.After(250 * time.Millisecond):
		}
	}
	if err != nil {
		return nil, stop, fmt.Errorf("%w (log: %s)", err, logPath)
	}
	return sess, func() { _ = sess.Close(); stop() }, nil
}

// runLogged runs an install command with its output kept for the error.
func runLogged(ctx context.Context, cmd *exec.Cmd, logger *slog.Logger) error {
	logger.Info("install", "command", strings.Join(cmd.Args, " "))
	out, err := cmd.CombinedOutput()
	if err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args[:2], " "), err, lines[len(lines)-1])
	}
	return ctx.Err()
}

// hubPeer is mcp-hub from npm. Its unified endpoint /mcp speaks MCP's HTTP+SSE transport (GET /mcp opens the
// event stream, POST /messages carries the requests); it reaches the backend over streamable HTTP from
// {"mcpServers": {"echo": {"url": ...}}} and names the tool echo__echo.
func hubPeer(o options) peerSpec {
	return peerSpec{
		name:  peerHub,
		label: "mcp-hub " + o.hubVersion + " (npm), `/mcp`",
		install: func(ctx context.Context, o options, logger *slog.Logger) (string, error) {
			prefix := filepath.Join(o.scratch, "npm")
			pkgDir := filepath.Join(prefix, "node_modules", "mcp-hub")
			if installedNPMVersion(pkgDir) != o.hubVersion {
				if _, err := exec.LookPath("npm"); err != nil {
					return "", fmt.Errorf("npm not found: install Node.js to compare with mcp-hub")
				}
				cmd := exec.CommandContext(ctx, "npm", "install", "--prefix", prefix, "--no-audit", "--no-fund",
					"--loglevel=error", "mcp-hub@"+o.hubVersion)
				if err := runLogged(ctx, cmd, logger); err != nil {
					return "", err
				}
			}
			if v := installedNPMVersion(pkgDir); v != o.hubVersion {
				return "", fmt.Errorf("npm installed mcp-hub %q, not %s", v, o.hubVersion)
			}
			return filepath.Join(pkgDir, "dist", "cli.js"), nil
		},
		start: func(ctx context.Context, cli, url, runDir string, port int, logs io.Writer) (*loadgen.Process, mcp.Transport, error) {
			cfg := filepath.Join(runDir, "mcp-hub.json")
			raw, err := json.MarshalIndent(map[string]any{"mcpServers": map[string]any{backendName: map[string]any{"url": url}}}, "", "  ")
			if err != nil {
				return nil, nil, fmt.Errorf("encode config: %w", err)
			}
			if err := os.WriteFile(cfg, raw, 0o644); err != nil {
				return nil, nil, fmt.Errorf("write config: %w", err)
			}
			home := filepath.Join(runDir, "mcp-hub-home") // its logs and state stay in the run folder
			cmd := exec.Command("node", cli, "--port", fmt.Sprint(port), "--config", cfg)
			cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+home, "XDG_CONFIG_HOME="+home, "XDG_DATA_HOME="+home, "XDG_CACHE_HOME="+home)
			cmd.Stdout, cmd.Stderr = logs, logs
			p, err := loadgen.Start(cmd)
			if err != nil {
				return nil, nil, err
			}
			base := fmt.Sprintf("http://127.0.0.1:%d", port)
			if err := loadgen.WaitHTTP(ctx, p, base+"/api/health", 60*time.Second); err != nil {
				p.Stop(time.Second)
				return nil, nil, err
			}
			return p, &mcp.SSEClientTransport{Endpoint: base + "/mcp", HTTPClient: loadgen.HTTPClient()}, nil
		},
	}
}

// installedNPMVersion is the version in an installed package's package.json, or "".
func installedNPMVersion(pkgDir string) string {
	raw, err := os.ReadFile(filepath.Join(pkgDir, "package.json"))
	if err != nil {
		return ""
	}
	var pkg struct {
		Version string `json:"version"`
	}
	if json.Unmarshal(raw, &pkg) != nil {
		return ""
	}
	return pkg.Version
}

// vmcpPeer is ToolHive's Virtual MCP Server, built with go install. Static mode: the backend is listed in the
// YAML configuration (no ToolHive group or Kubernetes needed), no authentication either way, tools prefixed with
// the backend's name; it serves streamable HTTP at /mcp.
func vmcpPeer(o options) peerSpec {
	return peerSpec{
		name:  peerVMCP,
		label: "ToolHive vMCP " + o.vmcpVersion + ", `/mcp`",
		install: func(ctx context.Context, o options, logger *slog.Logger) (string, error) {
			dir := filepath.Join(o.scratch, "vmcp-"+o.vmcpVersion)
			bin := filepath.Join(dir, "vmcp")
			if _, err := os.Stat(bin); err == nil {
				return bin, nil
			}
			cmd := exec.CommandContext(ctx, "go", "install", "github.com/stacklok/toolhive/cmd/vmcp@"+o.vmcpVersion)
			cmd.Dir = o.scratch // outside this module: go install pkg@version builds the peer's own module
			cmd.Env = append(os.Environ(), "GOBIN="+dir)
			if err := runLogged(ctx, cmd, logger); err != nil {
				return "", err
			}
			return bin, nil
		},
		start: func(ctx context.Context, bin, url, runDir string, port int, logs io.Writer) (*loadgen.Process, mcp.Transport, error) {
			cfg := filepath.Join(runDir, "vmcp.yaml")
			if err := os.WriteFile(cfg, []byte(vmcpConfig(url)), 0o644); err != nil {
				return nil, nil, fmt.Errorf("write config: %w", err)
			}
			cmd := exec.Command(bin, "serve", "--config", cfg, "--host", "127.0.0.1", "--port", fmt.Sprint(port))
			cmd.Stdout, cmd.Stderr = logs, logs
			p, err := loadgen.Start(cmd)
			if err != nil {
				return nil, nil, err
			}
			base := fmt.Sprintf("http://127.0.0.1:%d", port)
			if err := loadgen.WaitHTTP(ctx, p, base+"/health", 60*time.Second); err != nil {
				p.Stop(time.Second)
				return nil, nil, err
			}
			return p, &mcp.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: loadgen.HTTPClient()}, nil
		},
	}
}

// vmcpConfig is vmcp's configuration with the backend at url as its one static backend.
func vmcpConfig(url string) string {
	return fmt.Sprintf(`name: peer-compare
groupRef: peer-compare
backends:
  - name: %s
    url: %q
    transport: streamable-http
incomingAuth:
  type: anonymous
outgoingAuth:
  source: inline
  default:
    type: unauthenticated
aggregation:
  conflictResolution: prefix
  conflictResolutionConfig:
    prefixFormat: "{workload}_"
`, backendName, url)
}
