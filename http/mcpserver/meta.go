package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/gateway/exposure"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/http/internal/audit"
	"github.com/mcpgw/aggregator/http/internal/validate"
	"github.com/mcpgw/aggregator/http/internal/view"
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

// isMetaTool reports whether name is one of the meta-tools; the routing table reserves the same names, so no
// backend tool's alias can replace one.
func isMetaTool(name string) bool { return routing.IsMetaToolName(name) }

// serverOpSchema is the input of the per-server meta-tools (the REST routes take the id from the path): the
// server's id or name, and for disconnect_mcp_server whether to cut the calls in flight. Other fields are ignored.
func serverOpSchema(force bool) *jsonschema.Schema {
	s := &jsonschema.Schema{Type: "object", Required: []string{"server_id"}, Properties: map[string]*jsonschema.Schema{
		"server_id": {Type: "string", Description: "The server's id (UUID) or name"}}}
	if force {
		s.Properties["force"] = &jsonschema.Schema{Type: "boolean", Default: json.RawMessage("false"),
			Description: "Cancel the calls in flight instead of letting them drain"}
	}
	return s
}

// listSchema is list_mcp_servers' input: an optional status filter, the values of GET /servers?status=.
func listSchema() *jsonschema.Schema {
	statuses := make([]any, len(validate.Statuses))
	for i, st := range validate.Statuses {
		statuses[i] = st
	}
	return &jsonschema.Schema{Type: "object", Required: []string{}, Properties: map[string]*jsonschema.Schema{
		"status": {Type: "string", Enum: statuses}}}
}

// The inputs of the meta-tools that have a REST twin are that twin's schema (package validate), which also
// drives the validation, so a model and the API are told the same rules.
func (s *Server) addMetaTools() {
	s.addMetaTool(&mcp.Tool{Name: toolAdd, Description: "Register an external MCP server (and connect it unless auto_connect is false).",
		InputSchema: validate.RegistrationSchema()}, s.addServer)
	s.addMetaTool(&mcp.Tool{Name: toolRemove, Description: "Disconnect and remove an external MCP server with its tools.",
		InputSchema: serverOpSchema(false)}, s.serverOp(toolRemove))
	s.addMetaTool(&mcp.Tool{Name: toolConnect, Description: "Connect a registered external MCP server.",
		InputSchema: serverOpSchema(false)}, s.serverOp(toolConnect))
	s.addMetaTool(&mcp.Tool{Name: toolDisconnect, Description: "Disconnect an external MCP server; calls in flight drain unless force is true.",
		InputSchema: serverOpSchema(true)}, s.serverOp(toolDisconnect))
	s.addMetaTool(&mcp.Tool{Name: toolStatus, Description: "Status and health of one external MCP server.",
		InputSchema: serverOpSchema(false)}, s.serverOp(toolStatus))
	s.addMetaTool(&mcp.Tool{Name: toolList, Description: "List the registered external MCP servers with their status and tool counts.",
		InputSchema: listSchema()}, s.listServers)
	s.skills = s.skillNames()
	s.addMetaTool(searchTool(searchDescription(s.gw.Routes(), s.opts.Scope, s.skills, nil)), s.search)
	s.followCatalogue()
	s.addMetaTool(&mcp.Tool{Name: toolExecute, Description: "Call any tool of a connected server by its namespaced name {server}.{tool}.",
		InputSchema: validate.CallSchema(validate.ExecuteCall)}, s.execute)
	s.addCurationTool()
}

// searchTool is search_aggregated_tools with a description of the catalogue; its input is POST /api/v1/search's
// (validate.SearchSchema).
func searchTool(description string) *mcp.Tool {
	return &mcp.Tool{Name: toolSearch, Description: description, InputSchema: validate.SearchSchema()}
}

// Bounds of search_aggregated_tools' description: how many servers and skills it names, and how often it may
// change (a burst of registrations updates it once per describeEvery, not once per server).
const (
	describeServers = 12
	describeSkills  = 6
	describeEvery   = time.Second
)

// searchDescription is search_aggregated_tools' description: what it does, and what the catalogue holds right now
// (how many tools of how many connected servers, the largest servers, the skills most tools have), so that a model
// knows when searching is worth it. keep, when set, is what the caller may see (the access policy): the
// description then counts and names only those tools and their servers.
func searchDescription(t *routing.RouteTable, scope routing.Scope, skillNames map[string]string, keep func(*routing.ToolEntry) bool) string {
	const what = "Find tools of the connected MCP servers by what they do (plain-language query; hybrid keyword and " +
		"semantic ranking). Each result has its alias, the name to call directly on this server, and its namespaced " +
		"name {server}.{tool} for execute_external_tool."
	tools := t.CallableIn(scope)
	if keep != nil {
		visible := make([]*routing.ToolEntry, 0, len(tools))
		for _, e := range tools {
			if keep(e) {
				visible = append(visible, e)
			}
		}
		tools = visible
	}
	if len(tools) == 0 {
		return what + " No tools are connected yet."
	}
	perServer := map[string]int{}
	perSkill := map[string]int{}
	for _, e := range tools {
		perServer[e.ServerName]++
		for _, sk := range e.SkillIDs {
			perSkill[sk]++
		}
	}
	var b strings.Builder
	b.WriteString(what)
	fmt.Fprintf(&b, " The catalogue holds %d tools of %d servers: ", len(tools), len(perServer))
	b.WriteString(topCounts(perServer, describeServers, func(k string) string { return k }))
	if len(perSkill) > 0 {
		b.WriteString(". Main skills: ")
		b.WriteString(topCounts(perSkill, describeSkills, func(k string) string {
			if n, ok := skillNames[k]; ok {
				return n
			}
			return k
		}))
	}
	b.WriteString(".")
	return b.String()
}

// topCounts renders the n largest counts as "name (count), ...", largest first then by name, with how many more.
func topCounts(counts map[string]int, n int, label func(string) string) string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if counts[keys[i]] != counts[keys[j]] {
			return counts[keys[i]] > counts[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, 0, n+1)
	for i, k := range keys {
		if i == n {
			parts = append(parts, fmt.Sprintf("and %d more", len(keys)-n))
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%d)", label(k), counts[k]))
	}
	return strings.Join(parts, ", ")
}

// skillNames maps the taxonomy's skill ids to their names.
func (s *Server) skillNames() map[string]string {
	out := map[string]string{}
	for _, sk := range s.gw.Skills() {
		out[sk.ID] = sk.Name
	}
	return out
}

// followCatalogue keeps search_aggregated_tools' description current: on every change of the routing table it
// re-renders the description and, when it differs, re-adds the tool (the go-sdk replaces a tool of the same name
// and sends notifications/tools/list_changed). Updates are at most one per describeEvery: changes meanwhile are
// folded into the next one. It stops with Close.
func (s *Server) followCatalogue() {
	kick := make(chan struct{}, 1)
	stop := s.gw.OnRoutesChanged(func(*routing.RouteTable) {
		select {
		case kick <- struct{}{}:
		default:
		}
	})
	names := s.skills
	last := searchDescription(s.gw.Routes(), s.opts.Scope, names, nil)
	go func() {
		defer stop()
		for {
			select {
			case <-s.done:
				return
			case <-kick:
			}
			if d := searchDescription(s.gw.Routes(), s.opts.Scope, names, nil); d != last {
				last = d
				s.addMetaTool(searchTool(d), s.search)
			}
			throttle := time.NewTimer(describeEvery)
			select {
			case <-s.done:
				throttle.Stop()
				return
			case <-throttle.C:
			}
		}
	}()
}

// success answers {"status":"success","data":...} as text and as structured content.
func success(data any) *mcp.CallToolResult {
	body := map[string]any{"status": "success", "data": data}
	b, _ := json.Marshal(body)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}, StructuredContent: body}
}

// failure answers {"status":"error","error":...,"error_code":...} as a tool error the model can read
// (apierror.Error.CallToolResult).
func failure(code, msg string) *mcp.CallToolResult {
	return (&apierror.Error{Code: code, Detail: msg}).CallToolResult()
}

// failureFor maps the actors' and the store's errors with the shared mapping (the answers REST gives); anything
// else is logged and answered INTERNAL_ERROR without its text.
func (s *Server) failureFor(ctx context.Context, err error, subj apierror.Subject) *mcp.CallToolResult {
	if e := apierror.FromError(err, subj); e != nil {
		return e.CallToolResult()
	}
	s.log.ErrorContext(ctx, "MCP tool call failed", "error", err)
	return apierror.Internal().CallToolResult()
}

// askCtx bounds a meta-tool's wait for an actor or the store by the ask timeout.
func (s *Server) askCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opts.AskTimeout)
}

func (s *Server) addServer(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id, denied := s.admit(ctx, req, auth.ScopeAdmin)
	if denied != nil {
		return denied, nil
	}
	r, errs := validate.Registration(req.Params.Arguments, validate.Outbound(s.gw))
	if len(errs) > 0 {
		return apierror.Validation(errs).CallToolResult(), nil
	}
	r.Actor, r.IP = actorName(id), id.IP
	c, cancel := s.askCtx(ctx)
	defer cancel()
	srv, _, err := s.cases.Register(c, r, nil)
	if err != nil {
		return s.failureFor(ctx, err, apierror.Subject{Name: r.Name}), nil
	}
	s.audit(ctx, id, audit.ServerRegistered, srv.ID, srv.Name, map[string]any{"transport_type": srv.TransportType, "auto_connect": r.AutoConnect})
	return success(view.NewServerDetail(srv)), nil
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
			return failure(apierror.CodeValidation, "server_id (a string) is required"), nil
		}
		c, cancel := s.askCtx(ctx)
		defer cancel()
		srv, err := s.resolveServer(c, in.ServerID)
		if err != nil {
			return s.failureFor(ctx, err, apierror.Subject{ID: in.ServerID, Name: in.ServerID}), nil
		}
		switch op {
		case toolRemove:
			if err := s.gw.Remove(c, srv.ID); err != nil {
				return s.failureFor(ctx, err, apierror.Subject{ID: in.ServerID, Name: in.ServerID}), nil
			}
			s.audit(ctx, id, audit.ServerRemoved, srv.ID, srv.Name, nil)
			return success(map[string]any{"server_id": srv.ID, "name": srv.Name, "removed": true}), nil
		case toolConnect:
			res, err := s.gw.Connect(c, srv.ID)
			if err != nil {
				return s.failureFor(ctx, err, apierror.Subject{ID: in.ServerID, Name: in.ServerID}), nil
			}
			s.audit(ctx, id, audit.ServerConnected, srv.ID, srv.Name, map[string]any{"status": res.Status, "message": res.Message})
			return success(res), nil
		case toolDisconnect:
			res, err := s.gw.Disconnect(c, srv.ID, in.Force)
			if err != nil {
				return s.failureFor(ctx, err, apierror.Subject{ID: in.ServerID, Name: in.ServerID}), nil
			}
			s.audit(ctx, id, audit.ServerDisconnected, srv.ID, srv.Name,
				map[string]any{"force": in.Force, "status": res.Status, "pending_requests": res.PendingRequests})
			return success(res), nil
		default: // toolStatus
			return success(view.NewServerDetail(srv)), nil
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
	c, cancel := s.askCtx(ctx)
	defer cancel()
	servers, total, err := s.store.ListServers(c, persistence.ListServersFilter{Status: in.Status})
	if err != nil {
		return s.failureFor(ctx, err, apierror.Subject{}), nil
	}
	out := make([]any, len(servers))
	for i, srv := range servers {
		out[i] = view.NewServer(srv)
	}
	return success(map[string]any{"servers": out, "total": total}), nil
}

// search runs the same search as POST /api/v1/search (hybrid ranking, skills, server filter, thresholds) and
// answers in its shape, with each tool's alias for calling it here.
func (s *Server) search(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id, denied := s.admit(ctx, req, auth.ScopeClient)
	if denied != nil {
		return denied, nil
	}
	start := time.Now()
	// Answers an agent can act on (issue 31): the search looks further than the limit to say how many more tools
	// matched, and each hit comes with its alias, a one-line description and, unless include_schemas is false,
	// its input schema while they fit the caller's token budget.
	def := validate.DefaultSearch()
	def.IncludeSchemas = true
	r, errs := validate.SearchOver(def, req.Params.Arguments)
	if len(errs) > 0 {
		return apierror.Validation(errs).CallToolResult(), nil
	}
	asked := r.Limit
	r.Limit = min(max(3*asked, asked+10), validate.MaxSearchLimit)
	r, res, err := s.cases.Search(ctx, id, r, s.opts.Scope)
	if err != nil {
		return s.failureFor(ctx, err, apierror.Subject{}), nil
	}
	window := r.Limit
	more := max(len(res.Tools)-asked, 0)
	res.Tools = res.Tools[:min(asked, len(res.Tools))]
	r.Limit = asked
	out := view.NewSearch(r, res, time.Since(start))
	left := s.budgetOf(req)
	omitted := 0
	for i := range out.Tools {
		t := &out.Tools[i]
		t.Description = oneLine(t.Description)
		if len(t.InputSchema) == 0 {
			continue
		}
		if n := exposure.Tokens(t.InputSchema); left > 0 && n > left {
			t.InputSchema = nil
			omitted++
		} else {
			left -= n
		}
	}
	out.Metadata["more_matched"] = more
	out.Metadata["more_matched_window"] = window
	s.listFound(ctx, req, id, res.Tools)
	if omitted > 0 {
		out.Metadata["schemas_omitted"] = omitted
	}
	return success(out), nil
}

// oneLine is a description's first line, cut after its first sentence past 200 characters (or at 200, with an
// ellipsis), so that a search answer stays short; the full text is in tools/list and GET /tools.
func oneLine(d string) string {
	if i := strings.IndexAny(d, "\r\n"); i >= 0 {
		d = d[:i]
	}
	d = strings.TrimSpace(d)
	const most = 200
	if utf8.RuneCountInString(d) <= most {
		return d
	}
	r := []rune(d)[:most]
	if i := strings.LastIndex(string(r), ". "); i > 40 {
		return string(r)[:i+1]
	}
	return strings.TrimSpace(string(r)) + "…"
}

// execute calls any tool by name through the router, with REST's validation ({tool_name, arguments, server_id},
// nothing else) and routing metadata in _meta.metadata.
func (s *Server) execute(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id, denied := s.admitCall(ctx, req)
	if denied != nil {
		return denied, nil
	}
	start := time.Now()
	in, errs := validate.Call(req.Params.Arguments, validate.ExecuteCall)
	if len(errs) > 0 {
		return apierror.Validation(errs).CallToolResult(), nil
	}
	s.recordUse(actorName(id), in.Name)
	return s.relayedCall(ctx, req, id, gateway.CallRequest{Caller: id, Name: in.Name, ServerID: in.ServerID,
		Profile: in.Profile, Within: s.opts.Scope, Arguments: in.Arguments, Start: start})
}
