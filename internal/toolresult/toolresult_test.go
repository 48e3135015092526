package toolresult_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/internal/toolresult"
)

// decoded is the go-sdk's decode of raw (the only way to set a result's resultType from outside the go-sdk).
func decoded(t *testing.T, raw string) *mcp.CallToolResult {
	t.Helper()
	res := &mcp.CallToolResult{}
	if err := json.Unmarshal([]byte(raw), res); err != nil {
		t.Fatal(err)
	}
	return res
}

func TestAppendAsJSONMarshal(t *testing.T) {
	texts := []string{"", "hello", `{"message":"hello"}`, "<a href=\"x\">&amp;</a>", "line\nnext\r\tx\b\f\x00\x1f\x7f",
		"back\\slash", "é 日本 🙂", "bad \xff utf8 \xc3", "sep \u2028 \u2029 end", string([]byte{0xed, 0xa0, 0x80})}
	var cases []struct {
		name string
		res  *mcp.CallToolResult
		fast bool
	}
	add := func(name string, res *mcp.CallToolResult, fast bool) {
		cases = append(cases, struct {
			name string
			res  *mcp.CallToolResult
			fast bool
		}{name, res, fast})
	}
	for _, s := range texts {
		add("text "+s, &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}, true)
		add("error "+s, &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: s}, &mcp.TextContent{Text: s + "2"}}}, true)
	}
	add("nil content", &mcp.CallToolResult{}, true)
	add("empty content", &mcp.CallToolResult{Content: []mcp.Content{}}, true)
	add("resultType complete", decoded(t, `{"content":[{"type":"text","text":"x<y"}],"resultType":"complete"}`), true)
	add("resultType with isError", decoded(t, `{"content":[{"type":"text","text":"x"}],"isError":true,"resultType":"complete"}`), true)
	add("meta", &mcp.CallToolResult{Meta: mcp.Meta{"k": "v<", "a": 1}, Content: []mcp.Content{&mcp.TextContent{Text: "x"}}}, true)
	add("serverInfo meta, resultType", func() *mcp.CallToolResult {
		r := decoded(t, `{"content":[{"type":"text","text":"x"}],"resultType":"complete"}`)
		r.Meta = mcp.Meta{mcp.MetaKeyServerInfo: &mcp.Implementation{Name: "mcp-aggregator", Version: "1.0"}}
		return r
	}(), true)
	for _, raw := range []string{`{"a":1,"b":"x y"}`, `{"a": 1}`, `{"s":"<b>"}`, `"\u2028"`, "\"\u2028\"", `[1,2]`, `{"a":"\"q\" \\"}`,
		`not json`, `{"a":1}x`, ``} {
		add("raw meta "+raw, &mcp.CallToolResult{Meta: mcp.Meta{"metadata": json.RawMessage(raw), "b": json.RawMessage(`true`)},
			Content: []mcp.Content{&mcp.TextContent{Text: "x"}}}, raw != `not json` && raw != `{"a":1}x`)
	}
	add("nil raw meta", &mcp.CallToolResult{Meta: mcp.Meta{"m": json.RawMessage(nil)}, Content: []mcp.Content{}}, true)
	add("nine raw keys", &mcp.CallToolResult{Meta: mcp.Meta{"a": json.RawMessage(`1`), "b": json.RawMessage(`1`), "c": json.RawMessage(`1`),
		"d": json.RawMessage(`1`), "e": json.RawMessage(`1`), "f": json.RawMessage(`1`), "g": json.RawMessage(`1`), "h": json.RawMessage(`1`),
		"i": json.RawMessage(`{}`)}, Content: []mcp.Content{}}, true)
	add("serverInfo and metadata", &mcp.CallToolResult{Meta: mcp.Meta{mcp.MetaKeyServerInfo: &mcp.Implementation{Name: "a<b", Version: "1\n"},
		"metadata": json.RawMessage(`{"x":1}`)}, Content: []mcp.Content{&mcp.TextContent{Text: "x"}}}, true)
	add("serverInfo with a title", &mcp.CallToolResult{Meta: mcp.Meta{mcp.MetaKeyServerInfo: &mcp.Implementation{Name: "a", Title: "T&", Version: "1"}},
		Content: []mcp.Content{}}, true)
	add("serverInfo, every string", &mcp.CallToolResult{Meta: mcp.Meta{mcp.MetaKeyServerInfo: &mcp.Implementation{Name: "a", Title: "T",
		Description: "d", Version: "", WebsiteURL: "https://x/?a=1&b=2"}}, Content: []mcp.Content{}}, true)
	add("serverInfo with icons", &mcp.CallToolResult{Meta: mcp.Meta{mcp.MetaKeyServerInfo: &mcp.Implementation{Name: "a", Version: "1",
		Icons: []mcp.Icon{{Source: "https://x/i.png"}}}}, Content: []mcp.Content{}}, true)
	add("nil serverInfo", &mcp.CallToolResult{Meta: mcp.Meta{mcp.MetaKeyServerInfo: (*mcp.Implementation)(nil)}, Content: []mcp.Content{}}, true)
	add("unencodable meta", &mcp.CallToolResult{Meta: mcp.Meta{"f": func() {}}, Content: []mcp.Content{}}, false)
	add("structured", &mcp.CallToolResult{StructuredContent: map[string]any{"a": 1}, Content: []mcp.Content{}}, false)
	add("annotations", &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "x", Annotations: &mcp.Annotations{Priority: 1}}}}, false)
	add("content meta", &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "x", Meta: mcp.Meta{"a": "b"}}}}, false)
	add("image", &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{Data: []byte("x"), MIMEType: "image/png"}}}, false)
	add("request state", &mcp.CallToolResult{RequestState: "s", Content: []mcp.Content{}}, false)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want, err := json.Marshal(c.res)
			if err != nil {
				if _, ok := toolresult.Append(nil, c.res); ok {
					t.Fatalf("Append took a result json.Marshal refuses (%v)", err)
				}
				if _, merr := toolresult.Marshal(c.res); merr == nil {
					t.Fatalf("Marshal: no error where json.Marshal has %v", err)
				}
				return
			}
			got, ok := toolresult.Append([]byte("prefix"), c.res)
			if ok != c.fast {
				t.Fatalf("Append took it: %v, want %v", ok, c.fast)
			}
			if !ok {
				if string(got) != "prefix" {
					t.Fatalf("declined but wrote %q", got)
				}
			} else if !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Fatalf("Append:\n got %s\nwant prefix%s", got, want)
			}
			m, err := toolresult.Marshal(c.res)
			if err != nil || !bytes.Equal(m, want) {
				t.Fatalf("Marshal: %s, %v; want %s", m, err, want)
			}
		})
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "a", "<>&\"\\", "\x00\x01\u2028", "\xff\xfe", "日本"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := toolresult.AppendString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("AppendString(%q) = %s, want %s", s, got, want)
		}
		res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
		want, _ = json.Marshal(res)
		if got, ok := toolresult.Append(nil, res); !ok || !bytes.Equal(got, want) {
			t.Fatalf("Append(%q) = %s, want %s", s, got, want)
		}
	})
}
