package msglimit

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"
)

// echoEvent is a typical small answer on a streamable HTTP POST stream.
const echoEvent = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"Echo: routing-bench\"}]}}\n\n"

// BenchmarkEventsSmall is the guard's cost on the call path: one small event per POST response, as every routed
// call to a streamable HTTP backend reads it.
func BenchmarkEventsSmall(b *testing.B) {
	g := &Guard{Account: NewBudget(256<<20, 64<<20).Account()}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r := g.Events(io.NopCloser(bytes.NewReader([]byte(echoEvent))), json.RawMessage("7"))
		if _, err := io.Copy(io.Discard, r); err != nil {
			b.Fatal(err)
		}
		_ = r.Close()
	}
}

// BenchmarkJSONBodySmall is the same for an application/json POST response.
func BenchmarkJSONBodySmall(b *testing.B) {
	g := &Guard{Account: NewBudget(256<<20, 64<<20).Account()}
	body := []byte(`{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"Echo: routing-bench"}]}}`)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r := g.JSONBody(io.NopCloser(bytes.NewReader(body)), json.RawMessage("7"))
		if _, err := io.Copy(io.Discard, r); err != nil {
			b.Fatal(err)
		}
		_ = r.Close()
	}
}
