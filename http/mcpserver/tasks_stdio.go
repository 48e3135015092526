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
// to stdout as a line of its own between the go-sdk's: it writes each message with one write) and hands every other
// line to the go-sdk. The session is served with its handle (frontSession "stdio", tasks_front.go) in its context:
// the middleware adds capabilities.tasks to the answer of a 2025-11-25 initialize and execution.taskSupport to
// tools/list, and a task's backend requests (elicitation, sampling) are relayed to the session as on /mcp.
// notifications/tasks/status are written to stdout as lines of their own (stdio carries the server's
// notifications at any time: the session is its own stream).

// stdioSessionID names the stdio session among task owners' sessions.
const stdioSessionID = "stdio"

// stdioOut is stdout shared by the go-sdk and the task answers, a whole line at a time.
type stdioOut struct {
	mu sync.Mutex
	w  io.Writer
}

func (o *stdioOut) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.w.Write(p)
}

func (o *stdioOut) Close() error { return nil }

// inject writes the notification msg as a line of its own (notifyTaskStatus).
func (o *stdioOut) inject(msg []byte) {
	line := make([]byte, 0, len(msg)+1)
	_, _ = o.Write(append(append(line, msg...), '\n'))
}

// runStdioTasks serves one client on in and out with the task filter (see above) until ctx ends or in does.
func (s *Server) runStdioTasks(ctx context.Context, in io.Reader, out io.Writer) error {
	pr, pw := io.Pipe()
	o := &stdioOut{w: out}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	front := &frontSession{}
	s.fronts.add(stdioSessionID, front)
	defer s.fronts.remove(front)
	s.streams.add(stdioSessionID, o)
	defer s.streams.remove(stdioSessionID, o)
	ctx = withFrontSession(ctx, front)
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
// end) and reports whether it did.
func (s *Server) stdioTaskLine(ctx context.Context, line []byte, o *stdioOut) bool {
	if !bytes.Contains(line, []byte(`"task`)) {
		return false
	}
	var req rpcRequest
	if json.Unmarshal(line, &req) != nil || len(req.ID) == 0 || !isTaskRequest(req) {
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

// isTaskRequest reports whether req is a task method, or a task-augmented tools/call: the aggregator's to answer,
// in front of the go-sdk (which knows no tasks).
func isTaskRequest(req rpcRequest) bool {
	switch req.Method {
	case methodTasksGet, methodTasksResult, methodTasksList, methodTasksCancel:
		return true
	case "tools/call":
		var p taskParams
		return json.Unmarshal(req.Params, &p) == nil && len(p.Task) > 0 && string(p.Task) != "null"
	}
	return false
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
