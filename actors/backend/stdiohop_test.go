package backend

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpgw/aggregator/actors/msglimit"
)

// hopChild is the other end of a lineConn: what the connection writes (the child's stdin) and a way to write
// the child's stdout.
type hopChild struct {
	c      *lineConn
	stdin  *bufio.Reader
	stdout *io.PipeWriter
}

func newHopChild(t *testing.T, guard *msglimit.Guard) *hopChild {
	t.Helper()
	outR, outW := io.Pipe()
	inR, inW := io.Pipe()
	c := newLineConn(guard.LineMessages(outR), outR, inW, nil)
	t.Cleanup(func() { _ = c.Close(); _ = outW.Close() })
	return &hopChild{c: c, stdin: bufio.NewReader(inR), stdout: outW}
}

// request reads the next request the connection wrote.
func (h *hopChild) request(t *testing.T) *jsonrpc.Request {
	t.Helper()
	line, err := h.stdin.ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	msg, err := jsonrpc.DecodeMessage(line)
	if err != nil {
		t.Fatal(err)
	}
	return msg.(*jsonrpc.Request)
}

func (h *hopChild) write(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(h.stdout, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

// TestStdioHopAnswersAreTakenOutOfTheStream: the hop's request goes to the child with an id of its own, its answer
// reaches the hop's caller and never the go-sdk's reader, which still reads everything else in order (also the
// rest of a batch the answer came in); an answer to a caller that gave up is dropped too.
func TestStdioHopAnswersAreTakenOutOfTheStream(t *testing.T) {
	h := newHopChild(t, &msglimit.Guard{})
	ctx := context.Background()
	type answer struct {
		res json.RawMessage
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := h.c.request(ctx, "tools/list", struct{}{})
		done <- answer{res, err}
	}()
	req := h.request(t)
	id, _ := req.ID.Raw().(string)
	if req.Method != "tools/list" || !strings.HasPrefix(id, stdioHopIDPrefix) || string(req.Params) != "{}" {
		t.Fatalf("request %s %v %s", req.Method, req.ID.Raw(), req.Params)
	}
	// The go-sdk reads what comes before the answer (the read loop hands on one line at a time), then the rest.
	h.write(t, `{"jsonrpc":"2.0","method":"notifications/message","params":{}}`)
	readIs(t, h.c, "notifications/message")
	h.write(t, `[{"jsonrpc":"2.0","id":"`+id+`","result":{"tools":[]}},{"jsonrpc":"2.0","id":7,"result":{}}]`)
	got := <-done
	if got.err != nil || string(got.res) != `{"tools":[]}` {
		t.Fatalf("answer %s, %v", got.res, got.err)
	}
	readIs(t, h.c, "7")

	// A caller that gave up: its late answer is dropped, not read by the go-sdk.
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		_, err := h.c.request(cctx, "tools/list", struct{}{})
		done <- answer{nil, err}
	}()
	late := h.request(t)
	cancel()
	if got := <-done; !errors.Is(got.err, context.Canceled) {
		t.Fatalf("a cancelled request: %v", got.err)
	}
	lateID, _ := late.ID.Raw().(string)
	h.write(t, `{"jsonrpc":"2.0","id":"`+lateID+`","result":{}}`)
	h.write(t, `{"jsonrpc":"2.0","id":8,"result":{}}`)
	readIs(t, h.c, "8") // not the late answer
}

// readIs reads the next message the go-sdk gets: a request's method or an answer's id is want.
func readIs(t *testing.T, c *lineConn, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	switch m := msg.(type) {
	case *jsonrpc.Request:
		if m.Method != want {
			t.Fatalf("read %s, want %s", m.Method, want)
		}
	case *jsonrpc.Response:
		if s, _ := jsonID(m.ID); s != want {
			t.Fatalf("read answer %s, want %s", s, want)
		}
	}
}

// TestStdioHopErrors: an error answer comes back as a *jsonrpc.Error (the guard's, for an answer over the message
// limit, too), and a request whose child's stdout ends fails instead of waiting.
func TestStdioHopErrors(t *testing.T) {
	h := newHopChild(t, &msglimit.Guard{Limit: 256})
	ctx := context.Background()
	errc := make(chan error, 1)
	ask := func() {
		go func() {
			_, err := h.c.request(ctx, "tools/list", struct{}{})
			errc <- err
		}()
	}
	ask()
	id, _ := h.request(t).ID.Raw().(string)
	h.write(t, `{"jsonrpc":"2.0","id":"`+id+`","error":{"code":-32601,"message":"no tools"}}`)
	var rpcErr *jsonrpc.Error
	if err := <-errc; !errors.As(err, &rpcErr) || rpcErr.Code != -32601 {
		t.Fatalf("error answer: %v", err)
	}
	ask()
	id, _ = h.request(t).ID.Raw().(string)
	h.write(t, `{"jsonrpc":"2.0","id":"`+id+`","result":{"tools":[{"name":"`+strings.Repeat("x", 1000)+`"}]}}`)
	if err := <-errc; !errors.As(err, &rpcErr) || !msglimit.TooLarge(rpcErr.Code, rpcErr.Message) {
		t.Fatalf("oversized answer: %v", err)
	}
	ask()
	h.request(t)
	_ = h.stdout.Close() // the child's stdout ends
	select {
	case err := <-errc:
		if !errors.Is(err, errStdoutEnded) {
			t.Fatalf("stdout ended: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the request still waits after the child's stdout ended")
	}
}
