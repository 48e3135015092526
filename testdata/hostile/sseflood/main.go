// Command sseflood is a hostile legacy-SSE MCP server for tests: its tool "flood" answers with one SSE event that
// never ends (a result whose text streams forever); "echo" behaves. It listens on 127.0.0.1:$PORT (GET /sse,
// POST /message).
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
)

type session struct {
	out chan []byte
}

func main() {
	var mu sync.Mutex
	sessions := map[string]*session{}
	n := 0
	http.HandleFunc("/sse", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		mu.Lock()
		n++
		id := fmt.Sprint(n)
		s := &session{out: make(chan []byte, 16)}
		sessions[id] = s
		mu.Unlock()
		fmt.Fprintf(w, "event: endpoint\ndata: /message?sessionId=%s\n\n", id)
		w.(http.Flusher).Flush()
		for {
			select {
			case <-r.Context().Done():
				return
			case msg := <-s.out:
				if id, ok := strings.CutPrefix(string(msg), "FLOOD:"); ok {
					flood(w, id)
					return
				}
				if _, err := fmt.Fprintf(w, "event: message\ndata: %s\n\n", msg); err != nil {
					return
				}
				w.(http.Flusher).Flush()
			}
		}
	})
	http.HandleFunc("/message", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		s := sessions[r.URL.Query().Get("sessionId")]
		mu.Unlock()
		if s == nil {
			http.Error(w, "no session", http.StatusNotFound)
			return
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"params"`
		}
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &req)
		w.WriteHeader(http.StatusAccepted)
		if req.ID == nil {
			return
		}
		var result string
		switch req.Method {
		case "initialize":
			result = `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"sseflood","version":"1"}}`
		case "tools/list":
			result = `{"tools":[{"name":"echo","inputSchema":{"type":"object"}},{"name":"flood","inputSchema":{"type":"object"}}]}`
		case "tools/call":
			if req.Params.Name == "flood" {
				s.out <- []byte("FLOOD:" + string(req.ID))
				return
			}
			var a struct{ Message string }
			_ = json.Unmarshal(req.Params.Arguments, &a)
			text, _ := json.Marshal("Echo: " + a.Message)
			result = `{"content":[{"type":"text","text":` + string(text) + `}]}`
		default:
			result = `{}`
		}
		s.out <- []byte(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":` + result + `}`)
	})
	fmt.Fprintln(os.Stderr, http.ListenAndServe("127.0.0.1:"+os.Getenv("PORT"), nil))
}

// flood takes over the stream: one event that never ends, until the client goes away.
func flood(w http.ResponseWriter, id string) {
	chunk := strings.Repeat("x", 64<<10)
	if _, err := fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"", id); err != nil {
		return
	}
	for {
		if _, err := io.WriteString(w, chunk); err != nil {
			return
		}
		w.(http.Flusher).Flush()
	}
}
