package notifyorder

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

const (
	progressData = `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}`
	responseData = `{"jsonrpc":"2.0","id":1,"result":{}}`
	requestData  = `{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage","params":{}}`
)

// TestSSE: the event stream reaches the go-sdk byte for byte; notifications are counted and responses held,
// whatever the event's framing.
func TestSSE(t *testing.T) {
	tests := []struct {
		name          string
		stream        string
		notifications uint64 // counted once the stream is read
		holds         bool   // some event is held until a pending notification is handled
	}{
		{name: "empty", stream: ""},
		{name: "response", stream: "event: message\ndata: " + responseData + "\n\n", holds: true},
		{name: "notification then response",
			stream:        "event: message\nid: 1\ndata: " + progressData + "\n\nevent: message\nid: 2\ndata: " + responseData + "\n\n",
			notifications: 1, holds: true},
		{name: "notifications only", stream: "data: " + progressData + "\n\ndata:" + progressData + "\n\n", notifications: 2},
		{name: "CRLF", stream: "event: message\r\ndata: " + progressData + "\r\n\r\ndata: " + responseData + "\r\n\r\n",
			notifications: 1, holds: true},
		{name: "data over several lines", stream: "data: {\"jsonrpc\":\"2.0\",\ndata: \"id\":1,\"result\":{}}\n\n", holds: true},
		{name: "no blank line at the end", stream: "data: " + progressData, notifications: 1},
		{name: "comments and retry", stream: ": keep-alive\n\nretry: 1000\n\ndata: " + progressData + "\n\n", notifications: 1},
		{name: "request from the server", stream: "data: " + requestData + "\n\n"},
		{name: "not JSON", stream: "data: hello\n\n"},
		{name: "endpoint event", stream: "event: endpoint\ndata: /message?sessionId=1\n\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// One notification read before the stream and never handled: a response in the stream must wait.
			g := newTestGate(context.Background(), time.Hour, 1, 0)
			body := io.NopCloser(strings.NewReader(tc.stream))
			sse := &gatedSSE{body: body, r: bufio.NewReader(body), gate: g, ctx: context.Background()}
			type result struct {
				out []byte
				err error
			}
			got := make(chan result, 1)
			go func() {
				out, err := io.ReadAll(sse)
				got <- result{out, err}
			}()
			var r result
			select {
			case r = <-got:
				if tc.holds {
					t.Fatal("a response was passed up before the notification before it was handled")
				}
			case <-time.After(100 * time.Millisecond):
				if !tc.holds {
					t.Fatal("the stream was held without a response in it")
				}
				for range 1 + tc.notifications {
					g.done()
				}
				select {
				case r = <-got:
				case <-time.After(5 * time.Second):
					t.Fatal("still held once the notifications were handled")
				}
			}
			if r.err != nil {
				t.Fatalf("read: %v", r.err)
			}
			if string(r.out) != tc.stream {
				t.Fatalf("stream changed:\n got %q\nwant %q", r.out, tc.stream)
			}
			if got := g.read - 1; got != tc.notifications {
				t.Fatalf("%d notifications counted, want %d", got, tc.notifications)
			}
		})
	}
}

// TestSSESmallReads: an event larger than the caller's buffer is handed over in pieces, unchanged.
func TestSSESmallReads(t *testing.T) {
	stream := "data: " + progressData + "\n\ndata: " + progressData + "\n\n"
	body := io.NopCloser(strings.NewReader(stream))
	sse := &gatedSSE{body: body, r: bufio.NewReader(body), gate: New(context.Background()), ctx: context.Background()}
	var out []byte
	buf := make([]byte, 7)
	for {
		n, err := sse.Read(buf)
		out = append(out, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if string(out) != stream {
		t.Fatalf("got %q", out)
	}
}
