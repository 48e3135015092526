package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/internal/errcode"
)

// TestClassifyCallError: only a JSON-RPC error response of the backend is EXECUTION_FAILED; transport failures
// (the go-sdk's local "rejected by transport", "client is closing", a lost connection) are SERVER_UNAVAILABLE
// naming the server and its state.
func TestClassifyCallError(t *testing.T) {
	rejected := &jsonrpc.Error{Code: -32005, Message: "rejected by transport"}
	expired, cancelExpired := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancelExpired()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name string
		ctx  context.Context
		err  error
		code string
		want []string
	}{
		{"backend error response", context.Background(), &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "bad args"}, errcode.ExecutionFailed, []string{"srv", "bad args"}},
		{"wrapped backend error", context.Background(), fmt.Errorf("calling tools/call: %w", &jsonrpc.Error{Code: -32000, Message: "boom"}), errcode.ExecutionFailed, []string{"boom"}},
		{"connection refused", context.Background(), fmt.Errorf("sending tools/call: %w: dial tcp 127.0.0.1:1: connect: connection refused", rejected), errcode.ServerUnavailable, []string{"srv", "CONNECTED", "connection refused"}},
		{"4xx with JSON-RPC body", context.Background(), fmt.Errorf("POST: %w: %w: Bad Request", &jsonrpc.Error{Code: -32000, Message: "No valid session ID"}, rejected), errcode.ServerUnavailable, []string{"srv", "CONNECTED"}},
		{"client closing", context.Background(), &jsonrpc.Error{Code: -32003, Message: "client is closing"}, errcode.ServerUnavailable, []string{"srv"}},
		{"server closing", context.Background(), &jsonrpc.Error{Code: -32004, Message: "server is closing"}, errcode.ServerUnavailable, []string{"srv"}},
		{"connection closed", context.Background(), mcp.ErrConnectionClosed, errcode.ServerUnavailable, []string{"srv"}},
		{"EOF", context.Background(), io.EOF, errcode.ServerUnavailable, []string{"srv"}},
		{"deadline", expired, errors.New("x"), errcode.RequestTimeout, []string{"srv", "echo"}},
		{"cancelled", cancelled, errors.New("x"), errcode.ServerUnavailable, []string{"srv"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			info := classifyCallError(c.ctx, c.err, "srv", "CONNECTED", "echo")
			if info.Code != c.code {
				t.Fatalf("code %s, want %s (message %q)", info.Code, c.code, info.Message)
			}
			if info.ServerName != "srv" || info.ServerStatus != "CONNECTED" {
				t.Fatalf("server name/status not set: %+v", info)
			}
			for _, w := range c.want {
				if !strings.Contains(info.Message, w) {
					t.Fatalf("message %q does not contain %q", info.Message, w)
				}
			}
		})
	}
}

// TestStderrSummary keeps the decisive line and the tail, within a bound.
func TestStderrSummary(t *testing.T) {
	node := "node:internal/modules/cjs/loader:1210\n  throw err;\n  ^\n\nError: Cannot find module '/x.js'\n    at Module._resolveFilename (loader:1207:15)\n    at Module._load (loader:1038:27)\n  code: 'MODULE_NOT_FOUND',\n  requireStack: []\n}\n\nNode.js v20.20.2\n"
	cases := []struct{ name, in, want string }{
		{"node", node, "Error: Cannot find module '/x.js' | ... | requireStack: [] | } | Node.js v20.20.2"},
		{"short", "listening\nfatal: bad flag\n", "listening | fatal: bad flag"},
		{"no error line", "a\nb\nc\nd\ne\n", "c | d | e"},
		{"adjacent", "x\nError: boom\ny\nz\nw\n", "x | Error: boom | y | z | w"[4:]},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := stderrSummary(c.in); got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
	if got := stderrSummary(strings.Repeat("error ", 1000)); len(got) > stderrSummaryMax+3 {
		t.Fatalf("not bounded: %d", len(got))
	}
}

// TestConnectionBroken: the errors that mean a session's connection is gone (its loss then reports the exit status
// and stderr), as the stdio and HTTP transports wrap them, against errors of one exchange.
func TestConnectionBroken(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"eof", fmt.Errorf("read: %w", io.EOF), true},
		{"unexpected eof", io.ErrUnexpectedEOF, true},
		{"closed by the go-sdk", fmt.Errorf("calling tools/list: %w", mcp.ErrConnectionClosed), true},
		{"broken pipe", fmt.Errorf("write message: %w", &os.PathError{Op: "write", Path: "|1", Err: syscall.EPIPE}), true},
		{"stdin of a reaped child", fmt.Errorf("write message: %w", &os.PathError{Op: "write", Path: "|1", Err: os.ErrClosed}), true},
		{"reset", fmt.Errorf("post: %w", syscall.ECONNRESET), true},
		{"backend's error", &jsonrpc.Error{Code: -32603, Message: "internal"}, false},
		{"timeout", context.DeadlineExceeded, false},
		{"other", errors.New("decode tools/list result: bad"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := connectionBroken(tc.err); got != tc.want {
				t.Errorf("connectionBroken(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
