package auth

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/internal/errcode"
)

func TestHostGuardCheck(t *testing.T) {
	loop := NewHostGuard([]string{"127.0.0.1:8081", "127.0.0.1:8082"}, nil, nil)
	all := NewHostGuard([]string{"0.0.0.0:8081"}, []string{"api.example.com", "*.corp.example"}, []string{"https://app.example.com"})
	tests := []struct {
		name   string
		g      *HostGuard
		host   string
		origin string
		code   string
	}{
		{"loopback ip", loop, "127.0.0.1:8081", "", ""},
		{"localhost", loop, "localhost:8081", "", ""},
		{"ipv6 loopback", loop, "[::1]:8081", "", ""},
		{"sub.localhost", loop, "app.localhost:8081", "", ""},
		{"rebinding", loop, "evil.example:8081", "http://evil.example:8081", errcode.HostNotAllowed},
		{"rebinding without origin", loop, "evil.example:8081", "", errcode.HostNotAllowed},
		{"empty host", loop, "", "", errcode.HostNotAllowed},
		{"other ip on loopback listen", loop, "10.1.2.3:8081", "", errcode.HostNotAllowed},
		{"cross-site origin", loop, "127.0.0.1:8081", "http://evil.example", errcode.OriginNotAllowed},
		{"null origin", loop, "127.0.0.1:8081", "null", errcode.OriginNotAllowed},
		{"loopback origin", loop, "127.0.0.1:8081", "http://localhost:3000", ""},
		{"same origin", all, "api.example.com:8081", "http://api.example.com:8081", ""},
		{"same host other port", all, "api.example.com:8081", "http://api.example.com:9999", errcode.OriginNotAllowed},
		{"unspecified listen: ip literal", all, "10.1.2.3:8081", "", ""},
		{"unspecified listen: unknown name", all, "evil.example:8081", "", errcode.HostNotAllowed},
		{"wildcard subdomain", all, "a.corp.example:8081", "", ""},
		{"wildcard is not the bare domain", all, "corp.example:8081", "", errcode.HostNotAllowed},
		{"suffix trick", all, "evilcorp.example:8081", "", errcode.HostNotAllowed},
		{"allowed origin", all, "api.example.com", "https://app.example.com", ""},
		{"allowed origin default port", all, "api.example.com", "https://app.example.com:443", ""},
		{"allowed origin other scheme", all, "api.example.com", "http://app.example.com", errcode.OriginNotAllowed},
		{"any host", NewHostGuard([]string{"127.0.0.1:1"}, []string{"*"}, nil), "x.y:1", "", ""},
		{"any origin", NewHostGuard([]string{"127.0.0.1:1"}, nil, []string{"*"}), "127.0.0.1:1", "https://x.y", ""},
		{"nil guard", nil, "evil.example", "http://evil.example", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, code, _ := tt.g.Check(tt.host, tt.origin, "http")
			if code != tt.code || (code == "") != (status == 0) || (code != "" && status != http.StatusForbidden) {
				t.Fatalf("Check(%q, %q) = %d %q, want %q", tt.host, tt.origin, status, code, tt.code)
			}
		})
	}
}

func TestParseAllowedHostsAndOrigins(t *testing.T) {
	hosts, err := ParseAllowedHosts(" api.example.com, *.corp.example ,10.0.0.1,[::1],* ")
	if err != nil || len(hosts) != 5 {
		t.Fatalf("hosts = %v, %v", hosts, err)
	}
	if _, err := ParseAllowedHosts("http://x.example, x.example:80, ok.example"); err == nil ||
		!strings.Contains(err.Error(), `"http://x.example"`) || !strings.Contains(err.Error(), `"x.example:80"`) {
		t.Fatalf("bad hosts not all reported: %v", err)
	}
	if _, err := ParseAllowedOrigins("https://app.example.com, http://localhost:3000, *"); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseAllowedOrigins("app.example.com, https://x.example/path, null"); err == nil ||
		strings.Count(err.Error(), `"`) != 6 {
		t.Fatalf("bad origins not all reported: %v", err)
	}
}

func TestHostGuardWrapAnswersErrorShape(t *testing.T) {
	reached := false
	h := NewHostGuard([]string{"127.0.0.1:8082"}, nil, nil).Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }))
	req := httptest.NewRequest(http.MethodPost, "http://evil.example:8082/mcp", strings.NewReader("{}"))
	req.Header.Set("Origin", "http://evil.example:8082")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if reached || rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), `"error_code":"HOST_NOT_ALLOWED"`) ||
		!strings.Contains(rec.Body.String(), `"detail"`) {
		t.Fatalf("reached=%v %d %s", reached, rec.Code, rec.Body)
	}
}
