package backend

import (
	"bufio"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// naiveHeader is the conversion respHeader replaced (a string for each name and value, a slice for each header):
// the oracle it must agree with.
func naiveHeader(h *fasthttp.ResponseHeader) http.Header {
	out := http.Header{}
	for k, v := range h.All() {
		if key := string(k); key != "Transfer-Encoding" {
			out[key] = append(out[key], string(v))
		}
	}
	return out
}

// parseHead reads a raw answer's head as the fast transport does; false when fasthttp refuses it.
func parseHead(t testing.TB, raw string) (*fasthttp.ResponseHeader, bool) {
	t.Helper()
	var h fasthttp.ResponseHeader
	if err := h.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		return nil, false
	}
	return &h, true
}

func TestRespHeaderAsNetHTTP(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		want      http.Header
	}{
		{"an SSE answer", "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nMcp-Session-Id: s1\r\nContent-Length: 12\r\n\r\n",
			http.Header{"Content-Type": {"text/event-stream"}, "Cache-Control": {"no-cache"}, "Mcp-Session-Id": {"s1"}, "Content-Length": {"12"}}},
		{"repeated names keep their order", "HTTP/1.1 200 OK\r\nX-Many: a\r\nSet-Cookie: a=1\r\nX-Many: b\r\nSet-Cookie: b=2\r\nX-One: c\r\nContent-Length: 0\r\n\r\n",
			http.Header{"X-Many": {"a", "b"}, "Set-Cookie": {"a=1", "b=2"}, "X-One": {"c"}, "Content-Length": {"0"}}},
		{"chunked: no Transfer-Encoding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n",
			http.Header{"Content-Type": {"application/json"}}},
		{"lower-case names", "HTTP/1.1 404 Not Found\r\ncontent-type: text/plain\r\nx-request-id: r1\r\ncontent-length: 3\r\n\r\n",
			http.Header{"Content-Type": {"text/plain"}, "X-Request-Id": {"r1"}, "Content-Length": {"3"}}},
		{"empty values", "HTTP/1.1 204 No Content\r\nX-Empty:\r\nServer: s\r\n\r\n",
			http.Header{"X-Empty": {""}, "Server": {"s"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, ok := parseHead(t, tc.raw)
			if !ok {
				t.Fatal("fasthttp refused the head")
			}
			got := respHeader(h)
			for k := range got { // fasthttp adds what it always knows (a default Content-Type): compare the rest
				if _, ok := tc.want[k]; !ok && k == "Content-Type" {
					delete(got, k)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			if naive := naiveHeader(h); !reflect.DeepEqual(respHeader(h), naive) {
				t.Fatalf("respHeader %v, the old conversion %v", respHeader(h), naive)
			}
			// A value appended to one name never shows under another (each name's slice is its own).
			hdr := respHeader(h)
			for k := range hdr {
				hdr[k] = append(hdr[k], "added")
			}
			for k, vs := range hdr {
				if n := len(vs); n == 0 || vs[n-1] != "added" || len(vs) != len(respHeader(h)[k])+1 {
					t.Fatalf("%s after an append to every name: %v", k, vs)
				}
			}
		})
	}
}

// FuzzRespHeader: whatever head fasthttp accepts, respHeader reads as the conversion it replaced.
func FuzzRespHeader(f *testing.F) {
	f.Add("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-A: 1\r\nX-A: 2\r\n\r\n")
	f.Add("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nConnection: close\r\n\r\n")
	f.Add("HTTP/1.1 500 Oops\r\nTrailer: X-T\r\nContent-Length: 0\r\n\r\n")
	f.Fuzz(func(t *testing.T, raw string) {
		h, ok := parseHead(t, raw)
		if !ok {
			return
		}
		if got, want := respHeader(h), naiveHeader(h); !reflect.DeepEqual(got, want) {
			t.Fatalf("respHeader %v, the old conversion %v", got, want)
		}
	})
}
