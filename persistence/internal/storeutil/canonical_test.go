package storeutil

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

// referenceCanonicalJSON is CanonicalJSON through encoding/json (as it was written first): stored definition hashes
// were made with it.
func referenceCanonicalJSON(raw json.RawMessage) ([]byte, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return []byte("{}"), nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after JSON value")
	}
	return json.Marshal(v)
}

// FuzzCanonicalJSON: CanonicalJSON gives encoding/json's bytes, and refuses what it refuses.
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{
		`{"type":"object","properties":{"b":{"maximum":1.50e3},"a":{"enum":["<x>","&",-0.0]}}}`,
		" {\"z\":null,\"a\":[true,false]} \n", "\"\\ud800 \\u2028 \xff\xfe \\u00e9\"", `{"a":1,"a":2}`,
		`{} {}`, `{}x`, `not json`, `[]`, `12345678901234567890`, "", "  ",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		want, werr := referenceCanonicalJSON(raw)
		got, gerr := CanonicalJSON(raw)
		if werr != nil {
			if gerr == nil {
				t.Fatalf("CanonicalJSON accepted what encoding/json refuses (%v): %q -> %q", werr, raw, got)
			}
			return
		}
		if gerr != nil || !bytes.Equal(got, want) {
			t.Fatalf("CanonicalJSON = %q, %v; encoding/json = %q\n%q", got, gerr, want, raw)
		}
	})
}

// referenceDefinitionHash is DefinitionHash through encoding/json, as the stored hashes were made.
func referenceDefinitionHash(description string, canonicalSchema []byte) string {
	b, _ := json.Marshal([]any{description, json.RawMessage(canonicalSchema)})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// FuzzDefinitionHash: the hash written directly equals encoding/json's, for any description (HTML characters,
// control characters, invalid UTF-8) over a canonical schema.
func FuzzDefinitionHash(f *testing.F) {
	for _, s := range []string{"", "Reads <a> & b", "tab\tnew\nline\u2028 \xff\xfe \"q\" \\", "é 中文"} {
		f.Add(s, []byte(`{"type":"object","properties":{"a":{"enum":["<x>"]}}}`))
	}
	f.Fuzz(func(t *testing.T, description string, schema []byte) {
		canon, err := CanonicalJSON(schema)
		if err != nil {
			return
		}
		if got, want := DefinitionHash(description, canon), referenceDefinitionHash(description, canon); got != want {
			t.Fatalf("DefinitionHash(%q, %s) = %s, encoding/json gives %s", description, canon, got, want)
		}
	})
}

// FuzzJsonOrEmpty: JsonOrEmpty accepts exactly what encoding/json calls valid.
func FuzzJsonOrEmpty(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":[1,2]}`, `{"a":}`, "\"\xff\"", `1e5`, `01`, `[1,]`, " ", `{} {}`, "\"\\ud800\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		_, err := JsonOrEmpty(raw)
		if want := len(bytes.TrimSpace(raw)) == 0 || json.Valid(raw); (err == nil) != want {
			t.Fatalf("JsonOrEmpty(%q) error %v, encoding/json says valid = %v", raw, err, want)
		}
	})
}
