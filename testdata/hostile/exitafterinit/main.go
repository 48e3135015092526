// Command exitafterinit is a hostile MCP stdio backend: it answers initialize like a real server, then exits with
// status 0 as soon as the client says it is initialized, after printing why on stderr. A supervisor that resets its
// backoff on every successful connect reconnects it in a tight loop.
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
			res, _ := json.Marshal(map[string]any{
				"jsonrpc": "2.0", "id": msg.ID,
				"result": map[string]any{
					"protocolVersion": msg.Params.ProtocolVersion,
					"capabilities":    map[string]any{"tools": map[string]any{}},
					"serverInfo":      map[string]any{"name": "exitafterinit", "version": "1"},
				},
			})
			fmt.Fprintf(os.Stdout, "%s\n", res)
		case "notifications/initialized":
			fmt.Fprintln(os.Stderr, "exitafterinit: fatal: license check failed, quitting after initialize")
			os.Exit(0)
		}
	}
}
