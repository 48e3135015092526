// Command bigresult is a hostile streamable HTTP MCP server for tests: its tool "big" returns a result of SIZE bytes
// of text (default 100 MB), streamed as it is written; "echo" behaves. It listens on 127.0.0.1:$PORT at /mcp
// (stateless: no session id, GET answers 405). POST answers are event streams, or application/json with JSON=1;
// the result puts the id first, or last (as the TypeScript SDK does) with TAIL=1.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
)

func main() {
	size := 100 << 20
	if v, err := strconv.Atoi(os.Getenv("SIZE")); err == nil {
		size = v
	}
	asJSON, tail := os.Getenv("JSON") == "1", os.Getenv("TAIL") == "1"
	chunk := strings.Repeat("x", 64<<10)
	http.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name      string `json:"name"`
				Arguments struct {
					Message string `json:"message"`
				} `json:"arguments"`
			} `json:"params"`
		}
		body, _ := io.ReadAll(r.Body)
		if json.Unmarshal(body, &req) != nil || req.ID == nil {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		var result string
		switch req.Method {
		case "initialize":
			result = `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"bigresult","version":"1"}}`
		case "tools/list":
			result = `{"tools":[{"name":"echo","inputSchema":{"type":"object"}},{"name":"big","inputSchema":{"type":"object"}}]}`
		case "tools/call":
			if req.Params.Name != "big" {
				text, _ := json.Marshal("Echo: " + req.Params.Arguments.Message)
				result = `{"content":[{"type":"text","text":` + string(text) + `}]}`
			}
		default:
			result = `{}`
		}
		head, end := `{"jsonrpc":"2.0","id":`+string(req.ID)+`,"result":`, `}`
		if tail {
			head, end = `{"result":`, `,"jsonrpc":"2.0","id":`+string(req.ID)+`}`
		}
		if asJSON {
			w.Header().Set("Content-Type", "application/json")
		} else {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: message\ndata: ")
		}
		io.WriteString(w, head)
		if result != "" {
			io.WriteString(w, result)
		} else {
			io.WriteString(w, `{"content":[{"type":"text","text":"`)
			for n := 0; n < size; n += len(chunk) {
				if _, err := io.WriteString(w, chunk); err != nil {
					return
				}
			}
			io.WriteString(w, `"}]}`)
		}
		io.WriteString(w, end)
		if !asJSON {
			io.WriteString(w, "\n\n")
		}
	})
	fmt.Fprintln(os.Stderr, http.ListenAndServe("127.0.0.1:"+os.Getenv("PORT"), nil))
}
