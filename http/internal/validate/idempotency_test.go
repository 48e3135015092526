package validate

import (
	"strings"
	"testing"
)

func TestIdempotencyKey(t *testing.T) {
	for _, tc := range []struct {
		raw, want string
		ok        bool
	}{
		{"8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324", true},
		{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, "8e03978e-40d5-43e8-bc93-6894a57f9324", true},
		{"  spaced key \t", "spaced key", true},
		{"a", "a", true},
		{"~!@#$%^&*()_+{}|:<>?", "~!@#$%^&*()_+{}|:<>?", true},
		{strings.Repeat("k", MaxIdempotencyKey), strings.Repeat("k", MaxIdempotencyKey), true},
		{"", "", false},
		{"   ", "", false},
		{`""`, "", false},
		{`"a"b"`, "", false},
		{`"a\b"`, "", false},
		{`" a"`, "", false},
		{strings.Repeat("k", MaxIdempotencyKey+1), "", false},
		{"caf\u00e9", "", false},
		{"a\x00b", "", false},
		{"a\nb", "", false},
		{"a\x7fb", "", false},
	} {
		got, err := IdempotencyKey(tc.raw)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("IdempotencyKey(%q) = %q, %v; want %q, ok %v", tc.raw, got, err, tc.want, tc.ok)
		}
		if err != nil && tc.raw != "" && strings.Contains(err.Error(), tc.raw) {
			t.Errorf("IdempotencyKey(%q): the error echoes the value: %v", tc.raw, err)
		}
	}
}

// FuzzIdempotencyKey: any header value is either refused or gives a key of 1-255 printable ASCII characters that
// is its own canonical form (validating it again gives it back).
func FuzzIdempotencyKey(f *testing.F) {
	for _, s := range []string{"8e03978e-40d5-43e8-bc93-6894a57f9324", `"quoted"`, `""`, `"`, " ", "\x00", "é", `"a\"`,
		strings.Repeat("x", 256)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		k, err := IdempotencyKey(raw)
		if err != nil {
			return
		}
		if k == "" || len(k) > MaxIdempotencyKey {
			t.Fatalf("key of %d bytes accepted", len(k))
		}
		for i := range len(k) {
			if k[i] < 0x20 || k[i] > 0x7e {
				t.Fatalf("key %q holds byte 0x%02x", k, k[i])
			}
		}
		if again, err := IdempotencyKey(k); err != nil || again != k {
			t.Fatalf("key %q is not stable: %q, %v", k, again, err)
		}
	})
}
