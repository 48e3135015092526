// Command mcp-echo-backend is a tiny MCP server over streamable HTTP, built on the go-sdk's stateful streamable
// handler. It exists to give benchmarks and tests a fast, deterministic backend: its `echo` tool does no work
// beyond returning its arguments as text, so what a benchmark measures through the aggregator is the aggregator,
// not the backend (npm's server-everything costs about 2 ms a call on its own). With -tools N it also lists N more
// tools, tool_0000 ... (they echo too), for the discovery benchmark.
//
// It prints the URL of its MCP endpoint (http://host:port/mcp) as the first line of stdout once it listens, and
// stops on SIGINT or SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "mcp-echo-backend:", err)
		os.Exit(1)
	}
}

// options are the command-line flags.
type options struct {
	listen       string
	tools        int
	jsonResponse bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("mcp-echo-backend", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:0", "address to listen on (port 0 picks a free port)")
	fs.IntVar(&o.tools, "tools", 0, "number of extra tools tool_0000 ... to list besides echo")
	fs.BoolVar(&o.jsonResponse, "json-response", false,
		"answer each POST with one application/json body instead of the default text/event-stream")
	if err := fs.Parse(args); err != nil {
		return o, fmt.Errorf("parse flags: %w", err)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.tools < 0 || o.tools > 100000 {
		return o, fmt.Errorf("-tools %d: want 0 to 100000", o.tools)
	}
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.listen, err)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	server := newServer(o.tools, logger)
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{JSONResponse: o.jsonResponse, Logger: logger})
	mux := http.NewServeMux()
	mux.Handle("/mcp", handler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}

	if _, err := fmt.Fprintf(stdout, "http://%s/mcp\n", ln.Addr()); err != nil {
		ln.Close()
		return fmt.Errorf("print the endpoint: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shut down: %w", err)
	}
	return nil
}

// echoSchema accepts any object: echo returns whatever it was given.
const echoSchema = `{"type":"object","properties":{"message":{"type":"string","description":"text to echo"}},"additionalProperties":true}`

// newServer builds the MCP server: echo plus extra synthetic tools. The tools use the raw handler form, so a call
// costs no schema validation: the arguments come back byte for byte.
func newServer(extra int, logger *slog.Logger) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcp-echo-backend", Version: "1.0.0"}, &mcp.ServerOptions{Logger: logger})
	s.AddTool(&mcp.Tool{Name: "echo", Description: "Returns its arguments, as JSON text.", InputSchema: json.RawMessage(echoSchema)}, echo)
	for i := 0; i < extra; i++ {
		s.AddTool(&mcp.Tool{
			Name:        fmt.Sprintf("tool_%04d", i),
			Description: fmt.Sprintf("Synthetic tool number %d, listed for discovery benchmarks; returns its arguments.", i),
			InputSchema: json.RawMessage(echoSchema),
		}, echo)
	}
	return s
}

// echo answers with the call's arguments as one text content ("{}" when there are none).
func echo(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	text := "{}"
	if len(req.Params.Arguments) > 0 {
		text = string(req.Params.Arguments)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil
}
