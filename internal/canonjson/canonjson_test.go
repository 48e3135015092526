package canonjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	segjson "github.com/segmentio/encoding/json"
)

// reference is the canonical form as encoding/json gives it: decode with UseNumber, encode.
func reference(raw []byte) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data")
	}
	return json.Marshal(v)
}

// referenceFields is AppendFields as encoding/json gives it.
func referenceFields(raw []byte, names []string) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for _, k := range names {
		v, ok := m[k]
		if !ok || string(v) == "null" {
			continue
		}
		c, err := reference(v)
		if err != nil {
			return nil, err
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:%s", k, c)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

var seeds = []string{
	`{"type":"object","properties":{"b":{"maximum":1.50e3},"a":{"enum":["<x>","&",-0.0]}}}`,
	" {\"z\":null,\"a\":[true,false]} \n", "\"\\ud800 \\u2028 \xff\xfe \\u00e9\"", `{"a":1,"a":2}`,
	`{"b":{"y":[1,{"d":2,"c":[]}],"x":{}},"a":[[],[{}],""]}`, `{"\u00e9":1,"e":2,"\xff":3,"\xef\xbf\xbd":4}`,
	`{"a\u0000b":"\t\n\r\b\f\u001f","<":"\u2029"}`, `[1, 2 ,3]`, `"x"`, `-12.5e-3`, `true`, `null`,
	`{} {}`, `{}x`, `not json`, `[]`, `12345678901234567890`, "", "  ", `{"a":}`, `[1,]`, `{"a" 1}`, `01`,
}

func TestAppendMatchesEncodingJSON(t *testing.T) {
	for _, s := range seeds {
		want, werr := reference([]byte(s))
		got, gerr := Append(nil, []byte(s))
		if (werr != nil) != (gerr != nil) || !bytes.Equal(got, want) {
			t.Errorf("Append(%q) = %q, %v; encoding/json: %q, %v", s, got, gerr, want, werr)
		}
	}
}

func TestAppendFieldsMatchesEncodingJSON(t *testing.T) {
	names := []string{"name", "title", "description", "inputSchema"}
	for _, s := range append(seeds,
		`{"name":"x","name":"y","title":null,"inputSchema":{"b":1,"a":2},"other":[1]}`,
		`{"n\u0061me":"x","description":"<b>"}`, `{"Name":"x"}`, `[]`, `"s"`, `1`) {
		want, werr := referenceFields([]byte(s), names)
		got, gerr := AppendFields(nil, []byte(s), names)
		if (werr != nil) != (gerr != nil) || !bytes.Equal(got, want) {
			t.Errorf("AppendFields(%q) = %q, %v; encoding/json: %q, %v", s, got, gerr, want, werr)
		}
	}
}

func TestAppendKeepsDst(t *testing.T) {
	got, err := Append([]byte("x:"), []byte(` { "b" : 1 , "a" : [ 2 ] } `))
	if err != nil || string(got) != `x:{"a":[2],"b":1}` {
		t.Fatalf("Append = %q, %v", got, err)
	}
	if got, err := Append([]byte("x:"), []byte(`{`)); err == nil || string(got) != "x:" {
		t.Fatalf("Append of bad JSON = %q, %v; want dst unchanged and an error", got, err)
	}
}

func TestAppendDeepNesting(t *testing.T) {
	for _, tc := range []struct {
		open, close string
		n           int
	}{
		{`{"a":[`, `]}`, 5000}, {`[`, `]`, 10000}, {`[`, `]`, 10001}, {`{"a":`, `}`, 10000}, {`{"a":`, `}`, 10001},
	} {
		deep := strings.Repeat(tc.open, tc.n) + "1" + strings.Repeat(tc.close, tc.n)
		want, werr := reference([]byte(deep))
		got, err := Append(nil, []byte(deep))
		if (werr != nil) != (err != nil) || !bytes.Equal(got, want) {
			t.Errorf("%d times %s: %v, encoding/json %v (equal %v)", tc.n, tc.open, err, werr, bytes.Equal(got, want))
		}
	}
}

func FuzzAppend(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		want, werr := reference(raw)
		got, gerr := Append(nil, raw)
		if werr != nil {
			if gerr == nil {
				t.Fatalf("Append accepted what encoding/json refuses (%v): %q -> %q", werr, raw, got)
			}
			return
		}
		if gerr != nil || !bytes.Equal(got, want) {
			t.Fatalf("Append = %q, %v; encoding/json = %q\n%q", got, gerr, want, raw)
		}
		names := []string{"a", "b", "name"}
		fwant, fwerr := referenceFields(raw, names)
		fgot, fgerr := AppendFields(nil, raw, names)
		if (fwerr != nil) != (fgerr != nil) || !bytes.Equal(fgot, fwant) {
			t.Fatalf("AppendFields = %q, %v; encoding/json = %q, %v\n%q", fgot, fgerr, fwant, fwerr, raw)
		}
	})
}

func ExampleAppend() {
	out, err := Append(nil, []byte(`{ "b": [1.50, "<x>"], "a": {"d": null, "c": true}, "b": 2 }`))
	fmt.Println(string(out), err)
	// Output: {"a":{"c":true,"d":null},"b":2} <nil>
}

// schema is a tool's input schema of the size backends list (a few parameters with descriptions and an enum).
const schema = `{"type":"object","properties":{"query":{"type":"string","description":"What to look for, in words <or> terms & operators"},
"limit":{"type":"integer","minimum":1,"maximum":100,"default":10},"sort":{"type":"string","enum":["relevance","date","stars"]},
"filters":{"type":"object","properties":{"language":{"type":"string"},"since":{"type":"string","format":"date-time"}},"additionalProperties":false}},
"required":["query"],"additionalProperties":false,"$schema":"http://json-schema.org/draft-07/schema#"}`

// BenchmarkAppend compares the walk with the way through a decoded value it replaced (segmentio's decoder and
// encoder, the fastest of that way).
func BenchmarkAppend(b *testing.B) {
	raw := []byte(schema)
	b.Run("canonjson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Append(nil, raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decoded", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var v any
			if _, err := segjson.Parse(raw, &v, segjson.UseNumber); err != nil {
				b.Fatal(err)
			}
			if _, err := segjson.Append(nil, v, segjson.EscapeHTML|segjson.SortMapKeys); err != nil {
				b.Fatal(err)
			}
		}
	})
}
