package msglimit

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// headIDDecoder is what headID did with encoding/json's tokenizer before it scanned in place: the reference the
// scanner must agree with on every prefix of a valid message.
func headIDDecoder(head []byte) (json.RawMessage, kind) {
	dec := json.NewDecoder(bytes.NewReader(head))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, kindUnknown
	}
	var id json.RawMessage
	k := kindUnknown
	for {
		tok, err := dec.Token()
		if err != nil {
			return id, k
		}
		key, ok := tok.(string)
		if !ok {
			return id, k
		}
		switch key {
		case "method":
			k = kindRequest
		case "result", "error":
			if k == kindUnknown {
				k = kindResponse
			}
		}
		tok, err = dec.Token()
		if err != nil {
			return id, k
		}
		switch v := tok.(type) {
		case json.Delim:
			for depth := 1; depth > 0; {
				t, err := dec.Token()
				if err != nil {
					return id, k
				}
				if d, ok := t.(json.Delim); ok {
					if d == '{' || d == '[' {
						depth++
					} else {
						depth--
					}
				}
			}
		case string:
			if key == "id" {
				id, _ = json.Marshal(v)
			}
		case json.Number:
			if key == "id" {
				id = json.RawMessage(v.String())
			}
		}
	}
}

// sameID compares two ids by value ("\u0031" is "1").
func sameID(a, b json.RawMessage) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// checkHeadID compares headID with the decoder on every prefix of msg.
func checkHeadID(t *testing.T, msg []byte) {
	t.Helper()
	for n := 0; n <= len(msg); n++ {
		id, k := headID(msg[:n])
		wantID, wantK := headIDDecoder(msg[:n])
		if k != wantK || !sameID(id, wantID) {
			t.Fatalf("headID(%q) = %s, %d; the decoder says %s, %d", msg[:n], id, k, wantID, wantK)
		}
		if id != nil && !json.Valid(id) {
			t.Fatalf("headID(%q): invalid id %q", msg[:n], id)
		}
	}
}

// TestHeadIDAgreesWithTheDecoder: the in-place scanner finds the same id and kind as encoding/json's tokenizer in
// every prefix of the messages a session carries (ids first, last, escaped, in nested values, numbers, strings).
func TestHeadIDAgreesWithTheDecoder(t *testing.T) {
	for _, msg := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"id":"inner","x":[1,{"y":"}"}]}}}`,
		`{"jsonrpc":"2.0","id":"a\"b\\c\u0031","result":{"content":[{"type":"text","text":"{\"id\":9}"}]}}`,
		`{"result":{"id":2},"error":null,"id":-12.5e3}`,
		` { "method" : "notifications/progress" , "params" : { "progressToken" : "t" } } `,
		`{"jsonrpc":"2.0","error":{"code":-32000,"message":"x"},"id":7}`,
		`{"\u0069d":42,"ok":true,"n":null,"f":false}`,
		`{"id":[1],"id":{"a":1},"id":"last"}`,
		`[1,2]`,
		`{}`,
	} {
		checkHeadID(t, []byte(msg))
	}
}

// FuzzHeadID: on every prefix of a valid JSON text, the scanner agrees with the decoder.
func FuzzHeadID(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"x","params":{}}`))
	f.Add([]byte(`{"result":[{"a":"]"}],"id":"s"}`))
	f.Fuzz(func(t *testing.T, msg []byte) {
		if len(msg) > 512 || !json.Valid(msg) {
			return
		}
		checkHeadID(t, msg)
	})
}

// TestRequestIDAllocations: finding a POST's id costs a couple of allocations, not one per JSON token.
func TestRequestIDAllocations(t *testing.T) {
	body := []byte(`{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hello","n":[1,2,3]}}}`)
	head := make([]byte, 0, headTailBytes)
	allocs := testing.AllocsPerRun(100, func() {
		if id, k := headID(append(head[:0], body...)); string(id) != "12" || k != kindRequest {
			t.Fatalf("headID = %s, %d", id, k)
		}
	})
	if allocs > 1 {
		t.Fatalf("headID allocates %.0f times per message, want at most 1 (the id's copy)", allocs)
	}
}
