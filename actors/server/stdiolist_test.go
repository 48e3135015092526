package server

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors/curation"
)

// sdkToolDef is what the go-sdk path makes of a listed tool: decoded into the go-sdk's Tool (schemas into maps),
// encoded again by the server actor.
func sdkToolDef(raw []byte) ([]byte, error) {
	var t mcp.Tool
	if err := parseSDK(raw, &t); err != nil {
		return nil, err
	}
	return json.Marshal(&t)
}

// TestStdioToolDefMatchesSDK holds the stdio listing's reading of a tool to the go-sdk path's: the same pin hash
// always (a pin made before stays valid), the very bytes when the backend wrote its schema as the go-sdk would
// (sorted keys, no escapes), the go-sdk's bytes where the fast reading steps aside, and a refusal where the go-sdk
// fails the listing.
func TestStdioToolDefMatchesSDK(t *testing.T) {
	for _, tc := range []struct {
		name      string
		raw       string
		sameBytes bool
		err       bool
	}{
		{name: "plain", sameBytes: true,
			raw: `{"name":"t","description":"d","inputSchema":{"properties":{"a":{"type":"string"}},"type":"object"}}`},
		{name: "numbers as float64", raw: `{"name":"t","inputSchema":{"type":"object","properties":{"n":{"type":"number",` +
			`"minimum":0.0,"maximum":1e3,"default":1.50,"multipleOf":1E-7,"exclusiveMaximum":-0,"big":12345678901234567890,` +
			`"tiny":0.0000001,"huge":1e21,"neg":-2.5e-8,"list":[1.0,2,3.25]}}}}`},
		{name: "unsorted keys", raw: `{"inputSchema":{"type":"object","required":["b","a"],"properties":{"b":{"type":"integer"},"a":{"type":"string"}}},"name":"t"}`},
		{name: "members the go-sdk drops", raw: `{"name":"t","inputSchema":{"type":"object"},"x-vendor":{"a":1},"execution":{"taskSupport":"optional"}}`},
		{name: "names matched case-sensitively", raw: `{"name":"t","Description":"not the description","InputSchema":{"type":"string"},"inputSchema":{"type":"object"}}`},
		{name: "annotations as the go-sdk writes them", raw: `{"name":"t","inputSchema":{"type":"object"},` +
			`"annotations":{"readOnlyHint":false,"idempotentHint":true,"destructiveHint":false,"title":"T","extra":1}}`},
		{name: "meta and icons", raw: `{"_meta":{"z":1.0,"a":{"b":[true,null]}},"name":"t","inputSchema":{"type":"object"},` +
			`"icons":[{"src":"https://x/i.png","sizes":["48x48"],"unknown":2}],"title":"T"}`},
		{name: "null and missing schemas", raw: `{"name":"t","inputSchema":null,"outputSchema":null}`, sameBytes: true},
		{name: "no input schema", raw: `{"name":"t"}`, sameBytes: true},
		{name: "output schema", sameBytes: true,
			raw: `{"name":"t","inputSchema":{"type":"object"},"outputSchema":{"properties":{"r":{"type":"number"}},"type":"object"}}`},
		{name: "escapes read the go-sdk's way", sameBytes: true,
			raw: `{"name":"caf\u00e9","description":"\u003cb\u003e","inputSchema":{"type":"object","properties":{"\u00e9":{"default":1.0}}}}`},
		{name: "html and line separators", raw: `{"name":"t","description":"a<b>&c","inputSchema":{"description":"x<y"}}`, sameBytes: true},
		{name: "not valid UTF-8", raw: "{\"name\":\"t\",\"description\":\"\xff\xfe\",\"inputSchema\":{\"type\":\"object\"}}", sameBytes: true},
		{name: "a number out of range", raw: `{"name":"t","inputSchema":{"maximum":1e400}}`, err: true},
		{name: "not an object", raw: `["t"]`, err: true},
		{name: "a name not a string", raw: `{"name":5,"inputSchema":{}}`, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := stdioToolDef(json.RawMessage(tc.raw))
			want, wantErr := sdkToolDef([]byte(tc.raw))
			if tc.err {
				if err == nil || wantErr == nil {
					t.Fatalf("got %s, %v; the go-sdk path: %v: both should fail", got, err, wantErr)
				}
				return
			}
			if err != nil || wantErr != nil {
				t.Fatalf("error %v (the go-sdk path: %v)", err, wantErr)
			}
			if tc.sameBytes && string(got) != string(want) {
				t.Errorf("bytes\n got %s\nwant %s", got, want)
			}
			gh, err1 := curation.PinHash(got)
			wh, err2 := curation.PinHash(want)
			if err1 != nil || err2 != nil || gh != wh {
				t.Errorf("pin hash %s (%v), go-sdk path %s (%v)\n got %s\nwant %s", gh, err1, wh, err2, got, want)
			}
		})
	}
}

// TestStdioToolDefLeavesHeaderAnnotationsToTheSDK: a tool with x-mcp-header annotations, however its key is spelled
// in JSON, sends the listing through the go-sdk, whose validation drops invalid ones.
func TestStdioToolDefLeavesHeaderAnnotationsToTheSDK(t *testing.T) {
	for _, raw := range []string{
		`{"name":"t","inputSchema":{"type":"object","properties":{"r":{"type":"string","x-mcp-header":"Region"}}}}`,
		`{"name":"t","inputSchema":{"type":"object","properties":{"r":{"type":"object","x\u002dmcp-header":"R"}}}}`,
	} {
		if _, _, err := stdioToolDef(json.RawMessage(raw)); !errors.Is(err, errHeaderAnnotations) {
			t.Errorf("%s: %v, want errHeaderAnnotations", raw, err)
		}
	}
	if def, _, err := stdioToolDef(json.RawMessage(`{"name":"t","description":"uses x-mcp-header","inputSchema":{}}`)); err != nil || def == nil {
		t.Errorf("the words in a description: %s, %v", def, err)
	}
}

func TestFloatNumbers(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":1,"b":"1.0","c":[1.0,-0.0,10e2]}`: `{"a":1,"b":"1.0","c":[1,-0,1000]}`,
		`{"s":"\"2.0\"","n":2.0}`:               `{"s":"\"2.0\"","n":2}`,
		`0.000001`:                              `0.000001`,
		`0.0000001`:                             `1e-7`,
		`123456789012345678`:                    `123456789012345680`,
		`{"x":true,"y":null}`:                   `{"x":true,"y":null}`,
	} {
		got, err := floatNumbers([]byte(in))
		if err != nil || string(got) != want {
			t.Errorf("floatNumbers(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
}

// FuzzStdioToolDef: wherever both readings succeed, the pin hashes agree.
func FuzzStdioToolDef(f *testing.F) {
	for _, s := range []string{
		`{"name":"t","inputSchema":{"type":"object","properties":{"a":{"minimum":1.0}}}}`,
		`{"name":"t","annotations":{"readOnlyHint":true},"inputSchema":{"b":[1e5,"x"],"a":{}}}`,
		`{"_meta":{"k":2.50},"name":"t","outputSchema":{"z":-0.0}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if !json.Valid([]byte(raw)) {
			return
		}
		got, _, err := stdioToolDef(json.RawMessage(raw))
		want, wantErr := sdkToolDef([]byte(raw))
		if err != nil || wantErr != nil || got == nil {
			return
		}
		gh, err1 := curation.PinHash(got)
		wh, err2 := curation.PinHash(want)
		if (err1 == nil) != (err2 == nil) || gh != wh {
			t.Fatalf("pin hash %s (%v), go-sdk path %s (%v)\n got %s\nwant %s", gh, err1, wh, err2, got, want)
		}
	})
}
