package mcpserver

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestFastBodyGivesBackTheBody: the fast path reads a POST's body by its declared length (or to the bound when it
// has none), and a request it declines reaches the go-sdk with the whole body as it came.
func TestFastBodyGivesBackTheBody(t *testing.T) {
	big := strings.Repeat("x", fastMaxBody+10)
	for _, tc := range []struct {
		name     string
		body     string
		length   int64 // the request's ContentLength (-1: unknown, as a chunked body)
		wantRead int   // what fastBody returns
	}{
		{"declared length", `{"jsonrpc":"2.0"}`, 17, 17},
		{"chunked", `{"jsonrpc":"2.0"}`, -1, 17},
		{"empty", ``, 0, 0},
		{"declared longer than the bound", big, int64(len(big)), fastMaxBody + 1},
		{"chunked, longer than the bound", big, -1, fastMaxBody + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := http.NewRequest(http.MethodPost, "http://x/mcp", io.NopCloser(strings.NewReader(tc.body)))
			if err != nil {
				t.Fatal(err)
			}
			r.ContentLength = tc.length
			got, err := fastBody(r)
			if err != nil || len(got) != tc.wantRead || !bytes.Equal(got, []byte(tc.body[:tc.wantRead])) {
				t.Fatalf("fastBody read %d bytes (%v), want %d", len(got), err, tc.wantRead)
			}
			giveBack(r, got)
			all, err := io.ReadAll(r.Body)
			if err != nil || string(all) != tc.body {
				t.Fatalf("the body given back has %d bytes (%v), want the %d sent", len(all), err, len(tc.body))
			}
		})
	}
}
