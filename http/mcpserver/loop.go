package mcpserver

import (
	"context"
	"net/http"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
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
	for _, line := range h.Values(actors.HopHeader) {
		for _, id := range strings.Split(line, ",") {
			if id = strings.TrimSpace(id); id != "" {
				out = append(out, id)
			}
		}
	}
	return out
}

// LoopGuard refuses, with 508 LOOP_DETECTED, a request whose hop header already names this daemon (it is its own
// backend, possibly through a proxy or other aggregators) or is longer than actors.MaxHops. The MCP handlers of
// this package apply it themselves; wrap other MCP routes (/mcp/servers/{name}) with it.
func (s *Server) LoopGuard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		via := hops(r.Header)
		var detail string
		switch {
		case s.instanceID != "" && slices.Contains(via, s.instanceID):
			detail = "Loop detected: this request already passed through this aggregator (instance " + s.instanceID +
				"); an aggregator cannot be its own backend, directly or through other aggregators"
		case len(via) > actors.MaxHops:
			detail = "Loop detected: the request passed through more than the maximum of aggregators"
		default:
			next.ServeHTTP(w, r)
			return
		}
		s.log.Warn("refused an MCP request that loops back to this aggregator", "instance_id", s.instanceID, "hops", len(via))
		apierror.Write(w, &apierror.Error{Status: apierror.StatusLoopDetected, Code: apierror.CodeLoopDetected, Detail: detail,
			Context: map[string]any{"instance_id": s.instanceID, "hops": len(via), "max_hops": actors.MaxHops}})
	})
}

// reportInstance puts this daemon's instance id in the _meta of the initialize result, so that an aggregator
// connecting to it can tell when it reached itself, and stamps every tool of a tools/list answer (meta-tools and
// backend tools alike) with its provenance path.
func (s *Server) reportInstance(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if s.instanceID == "" || err != nil {
			return res, err
		}
		switch r := res.(type) {
		case *mcp.InitializeResult:
			if r != nil {
				if r.Meta == nil {
					r.Meta = mcp.Meta{}
				}
				r.Meta[actors.InstanceMetaKey] = s.instanceID
			}
		case *mcp.ListToolsResult:
			if r != nil {
				stamped := make([]*mcp.Tool, len(r.Tools))
				for i, t := range r.Tools {
					stamped[i] = s.stampVia(t)
				}
				r.Tools = stamped
			}
		}
		return res, err
	}
}

// stampVia returns a copy of t whose provenance path (actors.ViaMetaKey in _meta) is the path the backend
// reported, if any, followed by this daemon's instance id. The server's own tool is not modified.
func (s *Server) stampVia(t *mcp.Tool) *mcp.Tool {
	if t == nil {
		return nil
	}
	c := *t
	var path []any
	if prev, ok := t.Meta[actors.ViaMetaKey].([]any); ok {
		for _, v := range prev {
			if id, ok := v.(string); ok {
				path = append(path, id)
			}
		}
	}
	c.Meta = make(mcp.Meta, len(t.Meta)+1)
	for k, v := range t.Meta {
		c.Meta[k] = v
	}
	c.Meta[actors.ViaMetaKey] = append(path, s.instanceID)
	return &c
}
