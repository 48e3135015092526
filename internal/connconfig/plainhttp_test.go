package connconfig

import (
	"fmt"
	"strings"
	"testing"
)

func TestPlainHTTPProblem(t *testing.T) {
	tests := []struct {
		url   string
		allow bool
		ok    bool
	}{
		{"https://h.example/mcp", false, true},
		{"HTTPS://h.example/mcp", false, true},
		{"http://127.0.0.1:9000/mcp", false, true},
		{"http://127.5.6.7/mcp", false, true},
		{"http://[::1]:80/", false, true},
		{"http://LocalHost:1/sse", false, true},
		{"http://user:pw@localhost/sse", false, true},
		{"http://h.example/mcp", false, false},
		{"http://10.0.0.1/mcp", false, false},
		{"http://0.0.0.0:80/mcp", false, false},
		{"http://[::]/mcp", false, false},
		{"http://localhost.evil.example/", false, false},
		{"http://h.example/mcp", true, true},
		{"ftp://h.example/x", true, false},
		{"${MCP_URL}", false, true},                // judged once resolved
		{"http://${HOST}:8080/mcp", false, true},   // judged once resolved
		{"http://h.example/${PATH}", false, false}, // the host is known
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s allow=%v", tc.url, tc.allow), func(t *testing.T) {
			p := PlainHTTPProblem(tc.url, tc.allow)
			if (p == "") != tc.ok {
				t.Fatalf("PlainHTTPProblem = %q, want ok=%v", p, tc.ok)
			}
			if strings.Contains(p, "pw") {
				t.Fatalf("the problem shows the URL: %q", p)
			}
		})
	}
}
