package api

import (
	"strings"
	"testing"
)

// TestRequestFingerprint: spacing and key order do not change a registration's fingerprint; any value does
// (numbers as written), and the fingerprint does not contain the body.
func TestRequestFingerprint(t *testing.T) {
	base := `{"name":"a","transport_type":"HTTP","connection_config":{"base_url":"http://h/mcp","headers":{"X-Key":"s3cr3t"}},"n":1}`
	for _, tc := range []struct {
		body string
		same bool
	}{
		{base, true},
		{" {\n \"n\": 1, \"connection_config\": {\"headers\": {\"X-Key\": \"s3cr3t\"}, \"base_url\": \"http://h/mcp\"},\n" +
			" \"transport_type\": \"HTTP\", \"name\": \"a\"}\n", true},
		{`{"name":"a","transport_type":"HTTP","connection_config":{"base_url":"http://h/mcp","headers":{"X-Key":"other"}},"n":1}`, false},
		{`{"name":"a","transport_type":"HTTP","connection_config":{"base_url":"http://h/mcp","headers":{"X-Key":"s3cr3t"}},"n":1.0}`, false},
		{`{"name":"a","transport_type":"HTTP","connection_config":{"base_url":"http://h/mcp","headers":{"X-Key":"s3cr3t"}}}`, false},
	} {
		want, err := requestFingerprint([]byte(base))
		if err != nil {
			t.Fatal(err)
		}
		got, err := requestFingerprint([]byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if (got == want) != tc.same {
			t.Errorf("fingerprint of %s: same as the base %v, want %v", tc.body, got == want, tc.same)
		}
		if len(got) != 64 || strings.Contains(got, "s3cr3t") {
			t.Errorf("fingerprint %q is not a SHA-256 in hex", got)
		}
	}
	if _, err := requestFingerprint([]byte(`{`)); err == nil {
		t.Error("a body that is not JSON has a fingerprint")
	}
}
