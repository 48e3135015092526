package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/api"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/persistence"
)

// The meta-tools of user-guide.md: the aggregator's own tools, not namespaced.
const (
	toolAdd        = "add_mcp_server"
	toolRemove     = "remove_mcp_server"
	toolList       = "list_mcp_servers"
	toolConnect    = "connect_mcp_server"
	toolDisconnect = "disconnect_mcp_server"
	toolStatus     = "get_server_status"
	toolSearch     = "search_aggregated_tools"
	toolExecute    = "execute_external_tool"
)

func isMetaTool(name string) bool {
	switch name {
	case toolAdd, toolRemove, toolList, toolConnect, toolDisconnect, toolStatus, toolSearch, toolExecute:
		return true
	}
	return false
}

func schema(props string, required ...string) json.RawMessage {
	req, _ := json.Marshal(required)
	if len(required) == 0 {
		req = []byte("[]")
	}
	return json.RawMessage(`{"type":"object","properties":{` + props + `},"required":` + string(req) + `}`)
}

const serverIDProp = `"server_id":{"type":"string","description":"The server's id (UUID) or name"}`

func (s *Server) addMetaTools() {
	s.mcp.AddTool(&mcp.Tool{Name: toolAdd, Description: "Register an external MCP server (and connect it unless auto_connect is false).",
		InputSchema: schema(`"name":{"type":"string"},"description":{"type":"string"},"transport_type":{"type":"string","enum":["STDIO","SSE","HTTP"]},`+
			`"connection_config":{"type":"object"},"health_check_url":{"type":"string"},"auto_connect":{"type":"boolean"}`,
			"name", "transport_type", "connection_config")}, s.addServer)
	s.mcp.AddTool(&mcp.Tool{Name: toolRemove, Description: "Disconnect and remove an external MCP server with its tools.",
		InputSchema: schema(serverIDProp, "server_id")}, s.serverOp(toolRemove))
	s.mcp.AddTool(&mcp.Tool{Name: toolConnect, Description: "Connect a registered external MCP server.",
		InputSchema: schema(serverIDProp, "server_id")}, s.serverOp(toolConnect))
	s.mcp.AddTool(&mcp.Tool{Name: toolDisconnect, Description: "Disconnect an external MCP server; calls in flight drain unless force is true.",
		InputSchema: schema(serverIDProp+`,"force":{"type":"boolean"}`, "server_id")}, s.serverOp(toolDisconnect))
	s.mcp.AddTool(&mcp.Tool{Name: toolStatus, Description: "Status and health of one external MCP server.",
		InputSchema: schema(serverIDProp, "server_id")}, s.serverOp(toolStatus))
	s.mcp.AddTool(&mcp.Tool{Name: toolList, Description: "List the registered external MCP servers with their status and tool counts.",
		InputSchema: schema(`"status":{"type":"string","enum":["DISCONNECTED","CONNECTING","CONNECTED","DEGRADED","ERROR","DISCONNECTING"]}`)}, s.listServers)
	s.mcp.AddTool(&mcp.Tool{Name: toolSearch, Description: "Find tools of the connected servers by what they do. Each result has " +
		"the namespaced name to pass to execute_external_tool and the alias to call directly.",
		InputSchema: schema(`"query":{"type":"string","description":"What the tool should do"},`+
			`"server_filter":{"type":"array","items":{"type":"string"},"description":"Only these servers (names)"},`+
			`"limit":{"type":"integer","minimum":1,"maximum":100},"strategy":{"type":"string","enum":["hierarchical","direct"]},`+
			`"tool_threshold":{"type":"number","minimum":0,"maximum":1},"skill_threshold":{"type":"number","minimum":0,"maximum":1},`+
			`"include_schemas":{"type":"boolean"},"item_type":{"type":"string","enum":["tool","skill"]},"include_external":{"type":"boolean"}`, "query")}, s.search)
	s.mcp.AddTool(&mcp.Tool{Name: toolExecute, Description: "Call any tool of a connected server by its namespaced name {server}.{tool}.",
		InputSchema: schema(`"tool_name":{"type":"string"},"arguments":{"type":"object"},"server_id":{"type":"string"}`, "tool_name")}, s.execute)
}

// success answers {"status":"success","data":...} as text and as structured content.
func success(data any) *mcp.CallToolResult {
	body := map[string]any{"status": "success", "data": data}
	b, _ := json.Marshal(body)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}, StructuredContent: body}
}

// failure answers {"status":"error","error":...,"error_code":...} as a tool error the model can read.
func failure(code, msg string) *mcp.CallToolResult {
	body := map[string]any{"status": "error", "error_code": code, "error": msg}
	b, _ := json.Marshal(body)
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}, StructuredContent: body}
}

// failureFor maps the actors' and the store's errors to the REST error codes.
func failureFor(err error, what string) *mcp.CallToolResult {
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		return failure(api.CodeServerNotFound, "Server not found: "+what)
	case errors.Is(err, persistence.ErrAlreadyExists):
		return failure(api.CodeServerAlreadyExists, "Server already exists: "+what)
	case errors.Is(err, actors.ErrMaxServers):
		return failure(api.CodeServerLimitReached, "Maximum number of servers reached")
	case errors.Is(err, actors.ErrAskTimeout):
		return failure(api.CodeServiceBusy, "The operation timed out; it may be retried")
	}
	return failure(api.CodeInternal, err.Error())
}

func askCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, 10*time.Second)
}

func (s *Server) addServer(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id, denied := s.admit(ctx, req, auth.ScopeAdmin)
	if denied != nil {
		return denied, nil
	}
	r, errs := api.ValidateRegistrationFor(req.Params.Arguments, api.OutboundOf(s.gw))
	if len(errs) > 0 {
		b, _ := json.Marshal(errs)
		return failure(api.CodeValidation, string(b)), nil
	}
	r.Actor, r.IP = actorName(id), id.IP
	c, cancel := askCtx(ctx)
	defer cancel()
	srv, err := s.gw.Register(c, r)
	if err != nil {
		return failureFor(err, r.Name), nil
	}
	s.audit(ctx, id, api.AuditServerRegistered, srv.ID, srv.Name, map[string]any{"transport_type": srv.TransportType, "auto_connect": r.AutoConnect})
	return success(api.ServerDetailJSON(srv)), nil
}

// resolveServer accepts a server's id or its name.
func (s *Server) resolveServer(ctx context.Context, idOrName string) (persistence.Server, error) {
	if srv, err := s.store.GetServer(ctx, idOrName); err == nil {
		return srv, nil
	}
	return s.store.GetServerByName(ctx, idOrName)
}

// serverOp runs one of the per-server meta-tools.
func (s *Server) serverOp(op string) mcp.ToolHandler {
	need := auth.ScopeAdmin
	if op == toolStatus {
		need = auth.ScopeClient
	}
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		id, denied := s.admit(ctx, req, need)
		if denied != nil {
			return denied, nil
		}
		var in struct {
			ServerID string `json:"server_id"`
			Force    bool   `json:"force"`
		}
		if err := json.Unmarshal(req.Params.Arguments, &in); err != nil || in.ServerID == "" {
			return failure(api.CodeValidation, "server_id (a string) is required"), nil
		}
		c, cancel := askCtx(ctx)
		defer cancel()
		srv, err := s.resolveServer(c, in.ServerID)
		if err != nil {
			return failureFor(err, in.ServerID), nil
		}
		switch op {
		case toolRemove:
			if err := s.gw.Remove(c, srv.ID); err != nil {
				return failureFor(err, in.ServerID), nil
			}
			s.audit(ctx, id, api.AuditServerRemoved, srv.ID, srv.Name, nil)
			return success(map[string]any{"server_id": srv.ID, "name": srv.Name, "removed": true}), nil
		case toolConnect:
			res, err := s.gw.Connect(c, srv.ID)
			if err != nil {
				return failureFor(err, in.ServerID), nil
			}
			s.audit(ctx, id, api.AuditServerConnected, srv.ID, srv.Name, map[string]any{"status": res.Status, "message": res.Message})
			return success(res), nil
		case toolDisconnect:
			res, err := s.gw.Disconnect(c, srv.ID, in.Force)
			if err != nil {
				return failureFor(err, in.ServerID), nil
			}
			s.audit(ctx, id, api.AuditServerDisconnected, srv.ID, srv.Name,
				map[string]any{"force": in.Force, "status": res.Status, "pending_requests": res.PendingRequests})
			return success(res), nil
		default: // toolStatus
			return success(api.ServerDetailJSON(srv)), nil
		}
	}
}

func (s *Server) listServers(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if _, denied := s.admit(ctx, req, auth.ScopeClient); denied != nil {
		return denied, nil
	}
	var in struct {
		Status string `json:"status"`
	}
	_ = json.Unmarshal(req.Params.Arguments, &in)
	c, cancel := askCtx(ctx)
	defer cancel()
	servers, total, err := s.store.ListServers(c, persistence.ListServersFilter{Status: in.Status})
	if err != nil {
		return failureFor(err, ""), nil
	}
	out := make([]any, len(servers))
	for i, srv := range servers {
		out[i] = api.ServerSummaryJSON(srv)
	}
	return success(map[string]any{"servers": out, "total": total}), nil
}

// search runs the same search as POST /api/v1/search (hybrid ranking, skills, server filter, thresholds) and
// answers in its shape, with each tool's alias for calling it here.
func (s *Server) search(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if _, denied := s.admit(ctx, req, auth.ScopeClient); denied != nil {
		return denied, nil
	}
	start := time.Now()
	r, errs := api.ValidateSearch(req.Params.Arguments)
	if len(errs) > 0 {
		b, _ := json.Marshal(errs)
		return failure(api.CodeValidation, string(b)), nil
	}
	res, err := s.gw.Search(ctx, r)
	if err != nil {
		return failureFor(err, ""), nil
	}
	view, _ := json.Marshal(api.SearchJSON(r, res, time.Since(start)))
	var data map[string]any
	_ = json.Unmarshal(view, &data)
	if tools, ok := data["tools"].([]any); ok {
		for i, t := range tools {
			if m, ok := t.(map[string]any); ok && i < len(res.Tools) {
				m["alias"] = res.Tools[i].Tool.Alias
			}
		}
	}
	return success(data), nil
}

// execute calls any tool by name through the router and adds routing metadata in _meta.
func (s *Server) execute(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if _, denied := s.admitCall(ctx, req); denied != nil {
		return denied, nil
	}
	var in struct {
		ToolName  string          `json:"tool_name"`
		Arguments json.RawMessage `json:"arguments"`
		ServerID  string          `json:"server_id"`
	}
	if err := json.Unmarshal(req.Params.Arguments, &in); err != nil || in.ToolName == "" {
		return failure(api.CodeValidation, "tool_name (a string) is required"), nil
	}
	start := time.Now()
	route, err := s.gw.Routes().Resolve(in.ToolName, in.ServerID)
	var amb *actors.AmbiguousToolError
	switch {
	case errors.As(err, &amb):
		return failure(api.CodeToolAmbiguous, fmt.Sprintf("%v (servers %s)", err, strings.Join(amb.ServerIDs, ", "))), nil
	case errors.Is(err, actors.ErrToolNotFound):
		return failure(api.CodeToolNotFound, "Tool not found: "+in.ToolName), nil
	case err != nil:
		return failureFor(err, in.ServerID), nil
	}
	routed := time.Now()
	res, err := s.call(withRequestID(ctx, req), route, in.Arguments, progressFunc(ctx, req))
	if err != nil {
		return nil, err
	}
	done := time.Now()
	if res.Meta == nil {
		res.Meta = mcp.Meta{}
	}
	res.Meta["metadata"] = map[string]any{
		"routed_to": route.ServerName, "server_id": route.ServerID, "tool": route.Name,
		"routing_time_ms": float64(routed.Sub(start).Microseconds()) / 1000, "execution_time_ms": float64(done.Sub(routed).Microseconds()) / 1000,
		"total_time_ms": float64(done.Sub(start).Microseconds()) / 1000,
	}
	return res, nil
}
