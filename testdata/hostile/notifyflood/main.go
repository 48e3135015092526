// Command notifyflood is a hostile MCP stdio backend that floods notifications. Its tools:
//
//   - echo answers its arguments (a healthy tool);
//   - burst {"kind": K, "n": N} sends N notifications of kind K before its result: tools_list_changed,
//     prompts_list_changed, log (notifications/message) or progress (notifications/progress with the call's
//     progress token);
//   - grow adds one tool ("grown") to its tool list and announces it with one tools/list_changed;
//   - stats answers {"tools_list": n, "prompts_list": n}: how many listings it was asked for.
//
// With FLOOD=list_changed, log or progress in its environment it also floods that kind without end from the moment
// the client says it is initialized, as fast as the client reads (progress with a token no call holds). It
// declares tools and prompts with listChanged, and logging.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
)

type out struct {
	mu sync.Mutex
	w  *bufio.Writer
}

// send writes one message; flush pushes the buffer out.
func (o *out) send(v any, flush bool) {
	b, _ := json.Marshal(v)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.w.Write(b)
	o.w.WriteByte('\n')
	if flush {
		o.w.Flush()
	}
}

func notification(kind string, i int, token json.RawMessage) (map[string]any, bool) {
	n := map[string]any{"jsonrpc": "2.0"}
	switch kind {
	case "tools_list_changed", "list_changed":
		n["method"] = "notifications/tools/list_changed"
	case "prompts_list_changed":
		n["method"] = "notifications/prompts/list_changed"
	case "log":
		n["method"] = "notifications/message"
		n["params"] = map[string]any{"level": "info", "logger": "notifyflood", "data": fmt.Sprintf("log line %d", i)}
	case "progress":
		if token == nil {
			token = json.RawMessage(`"nobody"`)
		}
		n["method"] = "notifications/progress"
		n["params"] = map[string]any{"progressToken": token, "progress": i}
	default:
		return nil, false
	}
	return n, true
}

func main() {
	o := &out{w: bufio.NewWriterSize(os.Stdout, 64<<10)}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	var toolsLists, promptsLists atomic.Int64
	var grown atomic.Bool
	tool := func(name string) map[string]any {
		return map[string]any{"name": name, "inputSchema": map[string]any{"type": "object"}}
	}
	for in.Scan() {
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ProtocolVersion string `json:"protocolVersion"`
				Name            string `json:"name"`
				Arguments       struct {
					Kind string `json:"kind"`
					N    int    `json:"n"`
				} `json:"arguments"`
				Meta struct {
					ProgressToken json.RawMessage `json:"progressToken"`
				} `json:"_meta"`
			} `json:"params"`
		}
		if err := json.Unmarshal(in.Bytes(), &msg); err != nil {
			continue
		}
		reply := func(result any) {
			o.send(map[string]any{"jsonrpc": "2.0", "id": msg.ID, "result": result}, true)
		}
		text := func(s string) map[string]any {
			return map[string]any{"content": []any{map[string]any{"type": "text", "text": s}}}
		}
		switch msg.Method {
		case "initialize":
			reply(map[string]any{
				"protocolVersion": msg.Params.ProtocolVersion,
				"capabilities": map[string]any{"tools": map[string]any{"listChanged": true},
					"prompts": map[string]any{"listChanged": true}, "logging": map[string]any{}},
				"serverInfo": map[string]any{"name": "notifyflood", "version": "1"},
			})
		case "notifications/initialized":
			if kind := os.Getenv("FLOOD"); kind != "" {
				go func() {
					for i := 0; ; i++ {
						n, ok := notification(kind, i, nil)
						if !ok {
							return
						}
						o.send(n, false)
					}
				}()
			}
		case "tools/list":
			toolsLists.Add(1)
			tools := []any{tool("echo"), tool("burst"), tool("grow"), tool("stats")}
			if grown.Load() {
				tools = append(tools, tool("grown"))
			}
			reply(map[string]any{"tools": tools})
		case "prompts/list":
			promptsLists.Add(1)
			reply(map[string]any{"prompts": []any{map[string]any{"name": "hello"}}})
		case "tools/call":
			switch msg.Params.Name {
			case "burst":
				for i := range msg.Params.Arguments.N {
					if n, ok := notification(msg.Params.Arguments.Kind, i, msg.Params.Meta.ProgressToken); ok {
						o.send(n, false)
					}
				}
				reply(text(fmt.Sprintf("sent %d %s", msg.Params.Arguments.N, msg.Params.Arguments.Kind)))
			case "grow":
				grown.Store(true)
				n, _ := notification("tools_list_changed", 0, nil)
				o.send(n, false)
				reply(text("grown"))
			case "stats":
				b, _ := json.Marshal(map[string]int64{"tools_list": toolsLists.Load(), "prompts_list": promptsLists.Load()})
				reply(text(string(b)))
			default:
				reply(text("echo"))
			}
		default:
			if msg.ID != nil { // ping, logging/setLevel and anything else: an empty result
				reply(map[string]any{})
			}
		}
	}
}
