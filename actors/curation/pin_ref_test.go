package curation

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/mcpgw/aggregator/internal/rankeval"
)

// referencePinHash is PinHash as first written, on encoding/json alone. Stored pins carry hashes it computed, so
// PinHash must give the very same hex for every definition it accepts (TestPinHashMatchesReference, FuzzPinHash).
func referencePinHash(def json.RawMessage) (string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(def, &m); err != nil {
		return "", fmt.Errorf("decode tool definition: %w", err)
	}
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	for _, k := range pinnedFields {
		raw, ok := m[k]
		if !ok || string(raw) == "null" {
			continue
		}
		var v any
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			return "", fmt.Errorf("decode %s: %w", k, err)
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		vb, err := json.Marshal(v)
		if err != nil {
			return "", fmt.Errorf("encode %s: %w", k, err)
		}
		b.Write(vb)
	}
	b.WriteByte('}')
	sum := sha256.Sum256(b.Bytes())
	return hex.EncodeToString(sum[:]), nil
}

// fixtureDefinitions is every tool of both search fixtures as an MCP server would list it (internal/rankeval).
func fixtureDefinitions(tb testing.TB) []json.RawMessage {
	tb.Helper()
	var defs []json.RawMessage
	for _, name := range []string{"livemcpbench", "bfcl"} {
		for _, tool := range rankeval.Load(tb, name).Tools {
			def, err := json.Marshal(map[string]any{"name": tool.Name, "description": tool.Description,
				"inputSchema": tool.InputSchema, "_meta": map[string]any{"x": 1}})
			if err != nil {
				tb.Fatal(err)
			}
			defs = append(defs, def)
		}
	}
	return defs
}

func BenchmarkPinHash(b *testing.B) {
	defs := fixtureDefinitions(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := PinHash(defs[i%len(defs)]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPinHashReference(b *testing.B) {
	defs := fixtureDefinitions(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := referencePinHash(defs[i%len(defs)]); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPinHashMatchesReference: every fixture definition hashes as encoding/json hashed it.
func TestPinHashMatchesReference(t *testing.T) {
	for i, def := range fixtureDefinitions(t) {
		want, werr := referencePinHash(def)
		got, gerr := PinHash(def)
		if got != want || (werr == nil) != (gerr == nil) {
			t.Fatalf("definition %d: PinHash = %q, %v; encoding/json = %q, %v\n%s", i, got, gerr, want, werr, def)
		}
	}
}

// FuzzPinHash: for any input both accept, PinHash is encoding/json's hash; what encoding/json refuses, PinHash
// refuses too (a definition that cannot be hashed is never approved).
func FuzzPinHash(f *testing.F) {
	for _, s := range []string{
		`{"name":"x","description":"d <b>&amp;</b>","inputSchema":{"type":"object","properties":{"a":{"type":"number","maximum":1.50e3}}}}`,
		`{"name":"x","name":"y","title":null,"annotations":{"z":1,"a":[true,false,null,-0.0]}}`,
		"{\"description\":\"\\ud800 \\u2028 \xff\xfe \\u00e9\"}",
		`{"outputSchema":{"b":{},"a":[]},"inputSchema":"s"}`,
		`not json`, `[]`, `{}`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, def []byte) {
		want, werr := referencePinHash(def)
		got, gerr := PinHash(def)
		if werr != nil {
			if gerr == nil {
				t.Fatalf("PinHash accepted what encoding/json refuses (%v): %q", werr, def)
			}
			return
		}
		if gerr != nil || got != want {
			t.Fatalf("PinHash = %q, %v; encoding/json = %q\n%q", got, gerr, want, def)
		}
	})
}
