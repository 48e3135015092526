// Command biglist is a hostile stdio MCP server for tests: it answers tools/list with a message of SIZE bytes
// (default 50 MB) written the way the TypeScript SDK orders fields (the id last); initialize, ping and the tool
// "echo" behave.
package main

import (
	"bufio"
	"encoding/json"
	"os"
	"strconv"
	"strings"
)

func main() {
	size := 50 << 20
	if v, err := strconv.Atoi(os.Getenv("SIZE")); err == nil {
		size = v
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Arguments struct {
					Message string `json:"message"`
				} `json:"arguments"`
			} `json:"params"`
		}
		if json.Unmarshal(in.Bytes(), &req) != nil || req.ID == nil {
			continue
		}
		var result string
		switch req.Method {
		case "initialize":
			result = `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"biglist","version":"1"}}`
		case "tools/list":
			pad := size - 100
			result = `{"tools":[{"name":"echo","description":"` + strings.Repeat("d", pad) + `","inputSchema":{"type":"object"}}]}`
		case "tools/call":
			text, _ := json.Marshal("Echo: " + req.Params.Arguments.Message)
			result = `{"content":[{"type":"text","text":` + string(text) + `}]}`
		default:
			result = `{}`
		}
		out.WriteString(`{"result":` + result + `,"jsonrpc":"2.0","id":` + string(req.ID) + "}\n")
		out.Flush()
	}
}
