package backend

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpgw/aggregator/actors/msglimit"
)

// TestLineConnRead: each line is one message (a batch its messages in turn), blank lines are skipped, and a line
// that is not JSON-RPC ends the session with an error.
func TestLineConnRead(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantIDs []string // ids of the messages read, in order
		wantErr bool     // the read after them fails with something other than EOF
	}{
		{"responses", `{"jsonrpc":"2.0","id":1,"result":{}}` + "\n" + `{"jsonrpc":"2.0","id":2,"result":{"x":1}}` + "\n", []string{"1", "2"}, false},
		{"blank lines skipped", "\n  \r\n" + `{"jsonrpc":"2.0","id":"a","result":{}}` + "\r\n", []string{`"a"`}, false},
		{"a batch in turn", `[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":2,"method":"ping"}]` + "\n" + `{"jsonrpc":"2.0","id":3,"result":{}}` + "\n", []string{"1", "2", "3"}, false},
		{"not JSON-RPC", `{"jsonrpc":"2.0","id":1,"result":{}}` + "\nnot json\n", []string{"1"}, true},
		{"empty batch", "[]\n", nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stdout := io.NopCloser(strings.NewReader(tc.in))
			_, stdin := io.Pipe()
			c := newLineConn((&msglimit.Guard{}).LineMessages(stdout), stdout, stdin, nil)
			defer c.Close()
			ctx := context.Background()
			for i, want := range tc.wantIDs {
				msg, err := c.Read(ctx)
				if err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
				var id jsonrpc.ID
				switch m := msg.(type) {
				case *jsonrpc.Response:
					id = m.ID
				case *jsonrpc.Request:
					id = m.ID
				}
				if got, _ := jsonID(id); got != want {
					t.Fatalf("message %d: id %s, want %s", i, got, want)
				}
			}
			_, err := c.Read(ctx)
			if gotErr := err != nil && !errors.Is(err, io.EOF); gotErr != tc.wantErr {
				t.Fatalf("after the messages: %v, want error %v", err, tc.wantErr)
			}
		})
	}
}

// jsonID is an id as it is written on the wire.
func jsonID(id jsonrpc.ID) (string, error) {
	b, err := json.Marshal(id.Raw())
	return string(b), err
}

// TestLineConnWriteAndClose: a written message is one line on stdin, and Close unblocks a Read waiting for a line
// that never comes.
func TestLineConnWriteAndClose(t *testing.T) {
	stdoutR, stdoutW := io.Pipe()
	stdinR, stdinW := io.Pipe()
	c := newLineConn((&msglimit.Guard{}).LineMessages(stdoutR), stdoutR, stdinW, nil)
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdinR).ReadString('\n')
		lines <- line
	}()
	id, err := jsonrpc.MakeID(float64(7))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Write(context.Background(), &jsonrpc.Request{ID: id, Method: "tools/list"}); err != nil {
		t.Fatal(err)
	}
	if line := <-lines; !strings.HasSuffix(line, "}\n") || !strings.Contains(line, `"method":"tools/list"`) || !strings.Contains(line, `"id":7`) {
		t.Fatalf("written line %q", line)
	}
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(context.Background())
		read <- err
	}()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-read; err == nil {
		t.Fatal("Read after Close returned a message")
	}
	_ = stdoutW.Close()
}
