// Command badlist is a hostile MCP stdio backend: it initializes like a real server, then answers tools/list with a
// result no client can decode ("tools" is not a list). It stays running, so the aggregator sees a working session
// whose discovery fails.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	reply := func(id json.RawMessage, result any) {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
		fmt.Fprintf(os.Stdout, "%s\n", b)
	}
	for in.Scan() {
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ProtocolVersion string `json:"protocolVersion"`
			} `json:"params"`
		}
		if err := json.Unmarshal(in.Bytes(), &msg); err != nil {
			continue
		}
		switch msg.Method {
		case "initialize":
			reply(msg.ID, map[string]any{
				"protocolVersion": msg.Params.ProtocolVersion,
				"capabilities":    map[string]any{"tools": map[string]any{}},
				"serverInfo":      map[string]any{"name": "badlist", "version": "1"},
			})
		case "tools/list":
			reply(msg.ID, map[string]any{"tools": "not-a-list"})
		case "ping":
			reply(msg.ID, map[string]any{})
		}
	}
}
