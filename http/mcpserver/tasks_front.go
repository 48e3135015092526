package mcpserver

import (
	"context"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The sessions of the front ends whose go-sdk session has no id: legacy SSE (tasks_sse.go) and stdio
// (tasks_stdio.go). There the endpoint answers the task requests itself, in front of the go-sdk, and must still find
// the go-sdk session they belong to: to relay a task's backend requests (elicitation, sampling) to it, and to tell
// its middleware that the session is one that serves tasks (capabilities.tasks in the initialize answer,
// execution.taskSupport in tools/list). The go-sdk's SSE session answers "" for its id and nothing maps its
// sessionid to it; stdio has one session and no id.
//
// So each such session gets a handle of ours (frontSession), made before the go-sdk connects the session, named
// by our own id ("sse:" + the go-sdk's sessionid, or "stdio") and carried in the context the session is connected
// with. The go-sdk serves every request of a session with a context derived from the one it was connected with
// (go-sdk v1.8.0: Server.Connect hands it to jsonrpc2.NewConnection, which derives each request's context from it,
// values kept): the SSE GET's request context, or the one Run is given. A receiving middleware (bindFront) finds the
// handle there at the session's initialize and binds the go-sdk session to it.

// frontSession is one SSE or stdio session's handle.
type frontSession struct {
	mu     sync.Mutex
	id     string             // "sse:" + sessionid, or "stdio"; "" until known
	ss     *mcp.ServerSession // bound at the session's initialize
	agreed bool               // its initialize agreed on 2025-11-25 and was answered with capabilities.tasks
}

type frontSessionKey struct{}

// withFrontSession is ctx carrying the handle f of the session about to be connected with it.
func withFrontSession(ctx context.Context, f *frontSession) context.Context {
	return context.WithValue(ctx, frontSessionKey{}, f)
}

// frontSessionOf is the handle ctx carries; nil for a streamable session's request.
func frontSessionOf(ctx context.Context) *frontSession {
	f, _ := ctx.Value(frontSessionKey{}).(*frontSession)
	return f
}

// session is the go-sdk session bound to f (nil before its initialize).
func (f *frontSession) session() *mcp.ServerSession {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ss
}

// tasksAgreed reports whether the session agreed on the tasks revision (2025-11-25) with capabilities.tasks.
func (f *frontSession) tasksAgreed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.agreed
}

// frontSessions are the live front-end sessions, by their id.
type frontSessions struct {
	mu   sync.Mutex
	byID map[string]*frontSession
}

func newFrontSessions() *frontSessions { return &frontSessions{byID: map[string]*frontSession{}} }

// add names f id and keeps it.
func (t *frontSessions) add(id string, f *frontSession) {
	f.mu.Lock()
	f.id = id
	f.mu.Unlock()
	t.mu.Lock()
	t.byID[id] = f
	t.mu.Unlock()
}

// remove forgets f (its session ended).
func (t *frontSessions) remove(f *frontSession) {
	f.mu.Lock()
	id := f.id
	f.mu.Unlock()
	t.mu.Lock()
	if t.byID[id] == f {
		delete(t.byID, id)
	}
	t.mu.Unlock()
}

// session is the go-sdk session of the front session id (nil when there is none, or it has not initialized).
func (t *frontSessions) session(id string) *mcp.ServerSession {
	t.mu.Lock()
	f := t.byID[id]
	t.mu.Unlock()
	if f == nil {
		return nil
	}
	return f.session()
}

// sessions are the bound go-sdk sessions, by front session id.
func (t *frontSessions) sessions() map[string]*mcp.ServerSession {
	t.mu.Lock()
	fs := make([]*frontSession, 0, len(t.byID))
	for _, f := range t.byID {
		fs = append(fs, f)
	}
	t.mu.Unlock()
	out := make(map[string]*mcp.ServerSession, len(fs))
	for _, f := range fs {
		f.mu.Lock()
		if f.ss != nil {
			out[f.id] = f.ss
		}
		f.mu.Unlock()
	}
	return out
}

// isFrontID reports whether sid names a front session (SSE, stdio) rather than a streamable one.
func isFrontID(sid string) bool {
	return sid == stdioSessionID || strings.HasPrefix(sid, sseSessionPrefix)
}

// bindFront binds the go-sdk session of an SSE or stdio session to its handle, at its initialize.
func (s *Server) bindFront(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "initialize" {
			if f := frontSessionOf(ctx); f != nil {
				if ss, ok := req.GetSession().(*mcp.ServerSession); ok {
					f.mu.Lock()
					f.ss = ss
					f.mu.Unlock()
				}
			}
		}
		return next(ctx, method, req)
	}
}

// servesTasks reports whether req came through a front end that serves tasks: the streamable endpoint's (which
// marks the requests it passes on: tasksMarker) or an SSE or stdio session's (whose handle its context carries).
func servesTasks(ctx context.Context, req mcp.Request) bool {
	if extra := req.GetExtra(); extra != nil && extra.Header.Get(tasksMarker) != "" {
		return true
	}
	return frontSessionOf(ctx) != nil
}
