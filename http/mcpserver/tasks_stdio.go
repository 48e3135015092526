package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Tasks over stdio (`aggregator stdio` serving alone). The go-sdk owns the stdio transport and knows no tasks, so,
// as for /mcp and /sse, the task requests are answered in front of it: the client's lines pass through a filter
// (runStdioTasks) that answers the task methods and a task-augmented tools/call itself (serveTask, the answer written
// to stdout as a line of its own between the go-sdk's: it writes each message with one write), hands every other
// line to the go-sdk, and adds capabilities.tasks to the go-sdk's answer to a 2025-11-25 initialize. Not here:
// notifications/tasks/status (clients poll), and the backend's requests during a task (refused, as for a client
// that declared no elicitation or sampling: serveTask finds no go-sdk session under the stdio session's id).

// stdioSessionID names the stdio session among task owners' sessions.
const stdioSessionID = "stdio"

// stdioOut is stdout shared by the go-sdk and the task answers, a whole line at a time.
type stdioOut struct {
	mu    sync.Mutex
	w     io.Writer
	inits map[string]bool // ids (JSON) of 2025-11-25 initialize requests whose answer gets capabilities.tasks
}

func (o *stdioOut) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := p
	if len(o.inits) > 0 {
		out = o.withTasksCapability(p)
	}
	if _, err := o.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (o *stdioOut) Close() error { return nil }

// withTasksCapability is the line p with capabilities.tasks in its result, when p answers a noted initialize.
func (o *stdioOut) withTasksCapability(p []byte) []byte {
	var doc map[string]json.RawMessage
	if json.Unmarshal(bytes.TrimSpace(p), &doc) != nil || !o.inits[string(doc["id"])] || len(doc["result"]) == 0 {
		return p
	}
	delete(o.inits, string(doc["id"]))
	var init struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if json.Unmarshal(doc["result"], &init) != nil || init.ProtocolVersion != "2025-11-25" {
		return p // another revision agreed on
	}
	res, err := withTaskCaps(doc["result"])
	if err != nil {
		return p
	}
	doc["result"] = res
	out, err := json.Marshal(doc)
	if err != nil {
		return p
	}
	return append(out, '\n')
}

// runStdioTasks serves one client on in and out with the task filter (see above) until ctx ends or in does.
func (s *Server) runStdioTasks(ctx context.Context, in io.Reader, out io.Writer) error {
	pr, pw := io.Pipe()
	o := &stdioOut{w: out, inits: map[string]bool{}}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		rd := bufio.NewReader(in)
		for {
			line, err := rd.ReadBytes('\n')
			if len(line) > 0 && !s.stdioTaskLine(ctx, line, o) {
				if _, werr := pw.Write(line); werr != nil {
					return
				}
			}
			if err != nil {
				_ = pw.CloseWithError(err)
				return
			}
		}
	}()
	err := s.mcp.Run(ctx, &mcp.IOTransport{Reader: pr, Writer: o})
	_ = pr.Close()
	if errors.Is(err, io.ErrClosedPipe) {
		return io.EOF
	}
	return err
}

// stdioTaskLine answers the line when it is a task request (in the background: tasks/result waits for the task's
// end) and reports whether it did; it notes a 2025-11-25 initialize for o.
func (s *Server) stdioTaskLine(ctx context.Context, line []byte, o *stdioOut) bool {
	if !bytes.Contains(line, []byte(`"task`)) && !bytes.Contains(line, []byte(`"initialize"`)) {
		return false
	}
	var req rpcRequest
	if json.Unmarshal(line, &req) != nil || len(req.ID) == 0 {
		return false
	}
	switch taskRequestKind(req) {
	case initialize20251125:
		o.mu.Lock()
		o.inits[string(req.ID)] = true
		o.mu.Unlock()
		return false
	case notTask:
		return false
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "/", nil)
	if err != nil {
		return false
	}
	r.Header.Set("Mcp-Session-Id", stdioSessionID)
	go func() {
		if raw := s.answerTask(r, req); raw != nil && ctx.Err() == nil {
			_, _ = o.Write(append(raw, '\n'))
		}
	}()
	return true
}

// The kinds of request a transport without the go-sdk's task support (SSE, stdio) picks out of the client's stream.
const (
	notTask            = iota // the go-sdk's to serve
	initialize20251125        // an initialize that agreed on 2025-11-25: its answer gets the tasks capability
	taskRequest               // a task method, or a task-augmented tools/call: the aggregator's to answer
)

// taskRequestKind says which of those req is.
func taskRequestKind(req rpcRequest) int {
	switch req.Method {
	case "initialize":
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		if json.Unmarshal(req.Params, &p) == nil && p.ProtocolVersion == "2025-11-25" {
			return initialize20251125
		}
	case methodTasksGet, methodTasksResult, methodTasksList, methodTasksCancel:
		return taskRequest
	case "tools/call":
		var p taskParams
		if json.Unmarshal(req.Params, &p) == nil && len(p.Task) > 0 && string(p.Task) != "null" {
			return taskRequest
		}
	}
	return notTask
}

// answerTask serves the task request req as r's session and returns its JSON-RPC answer (nil when it cannot be
// encoded), for the transports that answer task requests in front of the go-sdk (SSE, stdio).
func (s *Server) answerTask(r *http.Request, req rpcRequest) []byte {
	var p taskParams
	var res any
	var rerr *jsonrpc.Error
	if len(req.Params) > 0 && json.Unmarshal(req.Params, &p) != nil {
		rerr = invalidParams("params must be an object")
	} else {
		res, rerr = s.serveTask(r, req.Method, p)
	}
	raw, err := json.Marshal(rpcAnswer(req.ID, res, rerr))
	if err != nil {
		return nil
	}
	return raw
}

// rpcAnswer is the JSON-RPC response to request id: result, or rerr.
func rpcAnswer(id json.RawMessage, result any, rerr *jsonrpc.Error) map[string]any {
	msg := map[string]any{"jsonrpc": "2.0", "id": id}
	if rerr != nil {
		e := map[string]any{"code": rerr.Code, "message": rerr.Message}
		if len(rerr.Data) > 0 {
			e["data"] = rerr.Data
		}
		msg["error"] = e
	} else {
		msg["result"] = result
	}
	return msg
}
