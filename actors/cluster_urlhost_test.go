package actors

import "testing"

// TestURLHost: the owner header's value is the host:port of the node's base URL, whatever follows it.
func TestURLHost(t *testing.T) {
	for _, tc := range []struct{ base, want string }{
		{"http://aggregator-2:8082", "aggregator-2:8082"},
		{"http://127.0.0.1:41234/mcp", "127.0.0.1:41234"},
		{"https://[::1]:8082?x=1", "[::1]:8082"},
		{"http://h:1#f", "h:1"},
		{"aggregator-2:8082", ""}, // not a URL
		{"", ""},
	} {
		if got := urlHost(tc.base); got != tc.want {
			t.Errorf("urlHost(%q) = %q, want %q", tc.base, got, tc.want)
		}
	}
}
