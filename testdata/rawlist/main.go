// Command rawlist is an MCP stdio backend whose tools/list is written by hand, in two pages: schemas with their
// keys unsorted and numbers spelt as Python writes them (1.0, 1e3), so that a test can tell how the aggregator read
// the listing. It logs the id of every tools/list request on stderr ("tools/list id=...").
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
)

var pages = []string{
	`{"tools":[{"name":"first","description":"The first tool","inputSchema":{"type":"object","properties":{"ratio":{"type":"number","default":1.0,"maximum":1e3}},"required":["ratio"]}}],"nextCursor":"page-2"}`,
	`{"tools":[{"name":"second","title":"Second","inputSchema":{"type":"object","properties":{"n":{"type":"integer","minimum":0}}},"annotations":{"readOnlyHint":true}}]}`,
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	for in.Scan() {
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ProtocolVersion string `json:"protocolVersion"`
				Cursor          string `json:"cursor"`
			} `json:"params"`
		}
		if err := json.Unmarshal(in.Bytes(), &msg); err != nil || len(msg.ID) == 0 {
			continue
		}
		var result string
		switch msg.Method {
		case "initialize":
			b, _ := json.Marshal(map[string]any{
				"protocolVersion": msg.Params.ProtocolVersion,
				"capabilities":    map[string]any{"tools": map[string]any{}},
				"serverInfo":      map[string]any{"name": "rawlist", "version": "1"},
			})
			result = string(b)
		case "tools/list":
			fmt.Fprintf(os.Stderr, "tools/list id=%s\n", msg.ID)
			result = pages[0]
			if msg.Params.Cursor == "page-2" {
				result = pages[1]
			}
		default:
			result = `{}`
		}
		fmt.Fprintf(os.Stdout, `{"jsonrpc":"2.0","id":%s,"result":%s}`+"\n", msg.ID, result)
	}
}
