package mcpserver

import "testing"

func TestIsResponseEvent(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    string
		want bool
	}{
		{"result, number id", "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n", true},
		{"error, negative id", "data: {\"jsonrpc\":\"2.0\",\"id\":-7,\"error\":{\"code\":-32601}}\n\n", true},
		{"result, string id with escapes", "data: {\"jsonrpc\":\"2.0\",\"id\":\"a\\\"b\",\"result\":{}}\n\n", true},
		{"a server request", "data: {\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"elicitation/create\",\"params\":{\"result\":1}}\n\n", false},
		{"a notification", "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"id\":1,\"result\":2}}\n\n", false},
		{"a notification, then the response", "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}\n\n", true},
		{"cut short", "data: {\"jsonrpc\":\"2.0\",\"id\":\"unterminated", false},
		{"empty", "", false},
	} {
		if got := isResponseEvent([]byte(tc.p)); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func FuzzIsResponseEvent(f *testing.F) {
	f.Add([]byte("data: {\"jsonrpc\":\"2.0\",\"id\":\"x\\\\\",\"result\":{}}\n\n"))
	f.Add([]byte("data: {\"jsonrpc\":\"2.0\",\"id\":"))
	f.Fuzz(func(t *testing.T, p []byte) { isResponseEvent(p) }) // must not panic or loop
}
