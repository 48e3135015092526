package mcpserver

import (
	"context"
	"net/http"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/http/apierror"
)

// Loop detection on the MCP listener. A daemon registered as a backend of itself, directly or through other
// aggregators, would list its own tools again on every discovery (growing to the tool cap) and rediscover without
// end. Three signals stop it: the hop header of incoming requests, the instance id in the initialize result (the
// connecting actor refuses its own), and the provenance path in each exposed tool's _meta (discovery drops
// tools that already passed through this daemon).

// instanceIDOf is the daemon's instance id: Options.InstanceID, else the gateway's (actors.System has one).
func instanceIDOf(gw Gateway, opts Options) string {
	if opts.InstanceID != "" {
		return opts.InstanceID
	}
	if g, ok := gw.(interface{ InstanceID() string }); ok {
		return g.InstanceID()
	}
	return ""
}

// hops lists the instance ids a request's hop header names (comma-separated, over one or more header lines).
func hops(h http.Header) []string {
	var out []string
	for _, line := range h.Values(backend.HopHeader) {
		for _, id := range strings.Split(line, ",") {
			if id = strings.TrimSpace(id); id != "" {
				out = append(out, id)
			}
		}
	}
	return out
}

// LoopGuard refuses, with 508 LOOP_DETECTED, a request whose hop header already names this daemon (it is its own
// backend, possibly through a proxy or other aggregators) or is longer than backend.MaxHops. The MCP handlers of
// this package apply it themselves; wrap other MCP routes (/mcp/servers/{name}) with it.
func (s *Server) LoopGuard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		via := hops(r.Header)
		var detail string
		switch {
		case s.instanceID != "" && slices.Contains(via, s.instanceID):
			detail = "Loop detected: this request already passed through this aggregator (instance " + s.instanceID +
				"); an aggregator cannot be its own backend, directly or through other aggregators"
		case len(via) > backend.MaxHops:
			detail = "Loop detected: the request passed through more than the maximum of aggregators"
		default:
			next.ServeHTTP(w, r)
			return
		}
		s.log.Warn("refused an MCP request that loops back to this aggregator", "instance_id", s.instanceID, "hops", len(via))
		apierror.Write(w, &apierror.Error{Status: apierror.StatusLoopDetected, Code: apierror.CodeLoopDetected, Detail: detail,
			Context: map[string]any{"instance_id": s.instanceID, "hops": len(via), "max_hops": backend.MaxHops}})
	})
}

// reportInstance puts this daemon's instance id in the _meta of the initialize result, so that an aggregator
// connecting to it can tell when it reached itself, and describes every tool of a tools/list answer
// (describeTools).
func (s *Server) reportInstance(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if err != nil {
			return res, err
		}
		switch r := res.(type) {
		case *mcp.InitializeResult:
			if r != nil && s.instanceID != "" {
				if r.Meta == nil {
					r.Meta = mcp.Meta{}
				}
				r.Meta[backend.InstanceMetaKey] = s.instanceID
			}
		case *mcp.ListToolsResult:
			if r != nil {
				r.Tools = s.describeTools(r.Tools)
			}
		}
		return res, err
	}
}

// describeTools returns copies of listed tools with their _meta completed: a backend tool's canonical name and
// server (NameMetaKey, ServerMetaKey), and every tool's provenance path (backend.ViaMetaKey: the path the backend
// reported, if any, followed by this daemon's instance id). The server's own tools are not modified; the names
// are added here rather than stored with every tool, which at 10,000 tools saved a map of its own for each.
func (s *Server) describeTools(tools []*mcp.Tool) []*mcp.Tool {
	out := make([]*mcp.Tool, len(tools))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, t := range tools {
		if t == nil {
			continue
		}
		e, ok := s.exposed[t.Name]
		out[i] = s.describeTool(t, e, ok)
	}
	return out
}

// describeTool is describeTools for one tool; e is its exposed entry when backend.
func (s *Server) describeTool(t *mcp.Tool, e exposedEntry, backendTool bool) *mcp.Tool {
	c := *t
	var path []any
	if prev, ok := t.Meta[backend.ViaMetaKey].([]any); ok {
		for _, v := range prev {
			if id, ok := v.(string); ok {
				path = append(path, id)
			}
		}
	}
	c.Meta = make(mcp.Meta, len(t.Meta)+3)
	for k, v := range t.Meta {
		c.Meta[k] = v
	}
	if backendTool {
		c.Meta[NameMetaKey] = e.name
		c.Meta[ServerMetaKey] = e.server
	}
	if s.instanceID != "" {
		c.Meta[backend.ViaMetaKey] = append(path, s.instanceID)
	} else if len(c.Meta) == 0 {
		c.Meta = t.Meta
	}
	return &c
}

// The _meta keys of a listed backend tool that name it: its canonical {server}.{tool} name and its server. A
// client sees only the client-safe alias as the tool's name (shortened past 64 characters); these let it call the
// tool by its canonical name or tell which backend serves it.
const (
	NameMetaKey   = "io.mcpgw.aggregator/name"
	ServerMetaKey = "io.mcpgw.aggregator/server"
)
