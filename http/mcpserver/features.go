package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"net/url"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/gateway"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/http/apierror"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// The backends' prompts, resources and resource templates on the aggregated endpoint (issue 14). They are added to
// the go-sdk server from the routing table, as tools are (so listing them never asks a backend, and the go-sdk
// sends notifications/{prompts,resources}/list_changed when the set changes: servers coming, going, or changing
// what they list); prompts/get, resources/read, completion/complete and resources/(un)subscribe go to the owning
// server's actor. A backend's notifications/resources/updated reaches the sessions subscribed to the URI.

// FeatureGateway is what the endpoint needs beyond Gateway to serve prompts and resources (actors.System has it).
// A Gateway without it serves tools only.
type FeatureGateway interface {
	Feature(ctx context.Context, serverID, method string, params any) (*pb.FeatureReply, error)
	OnResourceUpdated(fn func(*pb.ResourceUpdated)) (cancel func())
}

// updateQueue bounds the resource updates waiting to be sent to subscribed sessions: a backend flooding them loses
// the excess (counted in the log), and never delays the actors or other backends' notices.
const updateQueue = 1024

// features is the endpoint's state about the exposed prompts and resources.
type features struct {
	gw      FeatureGateway
	seed    maphash.Seed
	mu      sync.Mutex
	prompts map[string]uint64 // alias -> key of what it was added from
	res     map[string]uint64 // exposed URI -> key
	tmpl    map[string]uint64 // exposed URI template -> key
	updates chan string
	dropped int
	stop    func()
}

// featureOptions sets the go-sdk server options the features need, when the gateway serves them.
func (s *Server) featureOptions(o *mcp.ServerOptions) {
	fg, ok := s.gw.(FeatureGateway)
	if !ok {
		return
	}
	s.feat = &features{gw: fg, seed: maphash.MakeSeed(), prompts: map[string]uint64{}, res: map[string]uint64{},
		tmpl: map[string]uint64{}, updates: make(chan string, updateQueue)}
	// Declared from the start, so that a client that connects before any backend lists a prompt or resource still
	// hears about them later (list_changed). Logging is the go-sdk's default capability, kept.
	o.Capabilities = &mcp.ServerCapabilities{
		Logging:   &mcp.LoggingCapabilities{},
		Prompts:   &mcp.PromptCapabilities{ListChanged: true},
		Resources: &mcp.ResourceCapabilities{ListChanged: true, Subscribe: true},
	}
	o.CompletionHandler = s.complete
	o.SubscribeHandler = func(ctx context.Context, req *mcp.SubscribeRequest) error {
		return s.subscription(ctx, req.Extra, actors.MethodSubscribe, req.Params.URI)
	}
	o.UnsubscribeHandler = func(ctx context.Context, req *mcp.UnsubscribeRequest) error {
		return s.subscription(ctx, req.Extra, actors.MethodUnsubscribe, req.Params.URI)
	}
}

// promptNames lets a client get a prompt by its canonical name {server}.{prompt}, or by the backend's own name
// when one server only has it, as tools can be called (the go-sdk knows the aliases only).
func (s *Server) promptNames(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "prompts/get" && s.feat != nil {
			if g, ok := req.(*mcp.GetPromptRequest); ok && g.Params != nil {
				if p, found := s.gw.Routes().ResolvePrompt(g.Params.Name); found {
					g.Params.Name = p.Alias
				}
			}
		}
		return next(ctx, method, req)
	}
}

// startFeatures follows the backends' resource updates until Close.
func (s *Server) startFeatures() {
	if s.feat == nil {
		return
	}
	f := s.feat
	f.stop = f.gw.OnResourceUpdated(func(e *pb.ResourceUpdated) {
		uri := s.gw.Routes().ExposedURI(e.ServerId, e.Uri)
		select {
		case f.updates <- uri:
		default:
			f.mu.Lock()
			f.dropped++
			f.mu.Unlock()
		}
	})
	go func() {
		for {
			select {
			case <-s.done:
				return
			case uri := <-f.updates:
				_ = s.mcp.ResourceUpdated(context.Background(), &mcp.ResourceUpdatedNotificationParams{URI: uri})
				f.mu.Lock()
				if n := f.dropped; n > 0 {
					f.dropped = 0
					f.mu.Unlock()
					s.log.Warn("resource updates dropped: backends sent them faster than clients took them", "dropped", n)
					continue
				}
				f.mu.Unlock()
			}
		}
	}()
}

func (s *Server) stopFeatures() {
	if s.feat != nil && s.feat.stop != nil {
		s.feat.stop()
	}
}

func (f *features) key(parts ...string) uint64 {
	var h maphash.Hash
	h.SetSeed(f.seed)
	for _, p := range parts {
		h.WriteString(p)
		h.WriteByte(0)
	}
	return h.Sum64()
}

// syncFeatures makes the exposed prompts, resources and templates equal to the table's callable ones (in
// search-first mode too: only tools are hidden there).
func (s *Server) syncFeatures(t *routing.RouteTable) {
	f := s.feat
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	allowed := t.ServersIn(s.opts.Scope) // a profile endpoint: only its servers' prompts and resources
	want := map[string]bool{}
	for _, p := range t.Prompts() {
		if allowed != nil && !allowed[p.ServerID] {
			continue
		}
		k := f.key(p.ServerID, p.Name, string(p.Definition))
		want[p.Alias] = true
		if old, ok := f.prompts[p.Alias]; ok && old == k {
			continue
		}
		var pr mcp.Prompt
		if err := json.Unmarshal(p.Definition, &pr); err != nil {
			s.log.Warn("prompt not exposed on the MCP endpoint", "server", p.ServerName, "prompt", p.Name, "error", err)
			delete(want, p.Alias)
			continue
		}
		pr.Name = p.Alias
		f.prompts[p.Alias] = k
		s.mcp.AddPrompt(&pr, s.getPrompt)
	}
	var gone []string
	for a := range f.prompts {
		if !want[a] {
			gone = append(gone, a)
			delete(f.prompts, a)
		}
	}
	if len(gone) > 0 {
		s.mcp.RemovePrompts(gone...)
	}

	want = map[string]bool{}
	for _, r := range t.Resources() {
		if allowed != nil && !allowed[r.ServerID] {
			continue
		}
		k := f.key(r.ServerID, r.Key, string(r.Definition))
		want[r.Exposed] = true
		if old, ok := f.res[r.Exposed]; ok && old == k {
			continue
		}
		var res mcp.Resource
		u, err := url.Parse(r.Exposed)
		if err == nil && u.Scheme == "" {
			err = fmt.Errorf("URI %q is not absolute", r.Exposed)
		}
		if err == nil {
			err = json.Unmarshal(r.Definition, &res)
		}
		if err != nil {
			s.log.Warn("resource not exposed on the MCP endpoint", "server", r.ServerName, "uri", r.Key, "error", err)
			delete(want, r.Exposed)
			continue
		}
		res.URI = r.Exposed
		f.res[r.Exposed] = k
		s.mcp.AddResource(&res, s.readResource)
	}
	gone = gone[:0]
	for u := range f.res {
		if !want[u] {
			gone = append(gone, u)
			delete(f.res, u)
		}
	}
	if len(gone) > 0 {
		s.mcp.RemoveResources(gone...)
	}

	want = map[string]bool{}
	for _, r := range t.ResourceTemplates() {
		if allowed != nil && !allowed[r.ServerID] {
			continue
		}
		k := f.key(r.ServerID, r.Key, string(r.Definition))
		want[r.Exposed] = true
		if old, ok := f.tmpl[r.Exposed]; ok && old == k {
			continue
		}
		var rt mcp.ResourceTemplate
		if err := json.Unmarshal(r.Definition, &rt); err != nil {
			s.log.Warn("resource template not exposed on the MCP endpoint", "server", r.ServerName, "template", r.Key, "error", err)
			delete(want, r.Exposed)
			continue
		}
		rt.URITemplate = r.Exposed
		if err := addTemplate(s.mcp, &rt, s.templateReader(r.ServerID, r.Key, r.Exposed)); err != nil {
			s.log.Warn("resource template not exposed on the MCP endpoint", "server", r.ServerName, "template", r.Key, "error", err)
			delete(want, r.Exposed)
			continue
		}
		f.tmpl[r.Exposed] = k
	}
	gone = gone[:0]
	for u := range f.tmpl {
		if !want[u] {
			gone = append(gone, u)
			delete(f.tmpl, u)
		}
	}
	if len(gone) > 0 {
		s.mcp.RemoveResourceTemplates(gone...)
	}
}

// addTemplate adds a template, turning the go-sdk's panic on a template it cannot parse into an error (a backend
// is untrusted input).
func addTemplate(srv *mcp.Server, rt *mcp.ResourceTemplate, h mcp.ResourceHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	srv.AddResourceTemplate(rt, h)
	return nil
}

// getPrompt runs prompts/get of an exposed prompt on its server, under the name the server knows.
func (s *Server) getPrompt(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	t := s.gw.Routes()
	p, ok := t.Prompt(req.Params.Name)
	if ok && !s.servesServer(t, p.ServerID) {
		ok = false
	}
	if !ok {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown prompt %q", req.Params.Name)}
	}
	params := *req.Params
	params.Name = p.Name
	params.Meta, params.InputResponses, params.RequestState = hopMeta(params.Meta), nil, ""
	var out mcp.GetPromptResult
	if err := s.feature(ctx, req.Extra, p.ServerID, p.ServerName, actors.MethodGetPrompt, &params, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// readResource reads a listed resource on its server, by the URI the server knows.
func (s *Server) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	t := s.gw.Routes()
	r, ok := t.Resource(req.Params.URI)
	if !ok || !s.servesServer(t, r.ServerID) {
		return nil, mcp.ResourceNotFoundError(req.Params.URI)
	}
	return s.read(ctx, req, r.ServerID, r.ServerName, r.Key)
}

// templateReader reads a URI matching one server's template: a rewritten template's prefix is taken off first.
func (s *Server) templateReader(serverID, key, exposed string) mcp.ResourceHandler {
	rewritten := key != exposed
	return func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		uri := req.Params.URI
		if rewritten {
			_, orig, ok := routing.ParseRewrittenURI(uri)
			if !ok {
				return nil, mcp.ResourceNotFoundError(uri)
			}
			uri = orig
		}
		srv, _ := s.gw.Routes().Server(serverID)
		return s.read(ctx, req, serverID, srv.Name, uri)
	}
}

func (s *Server) read(ctx context.Context, req *mcp.ReadResourceRequest, serverID, serverName, uri string) (*mcp.ReadResourceResult, error) {
	params := *req.Params
	params.URI = uri
	params.Meta, params.InputResponses, params.RequestState = hopMeta(params.Meta), nil, ""
	var out mcp.ReadResourceResult
	if err := s.feature(ctx, req.Extra, serverID, serverName, actors.MethodReadResource, &params, &out); err != nil {
		return nil, err
	}
	if uri != req.Params.URI {
		// The contents name the URI the client asked for, so that it can match them.
		for _, c := range out.Contents {
			if c != nil && c.URI == uri {
				c.URI = req.Params.URI
			}
		}
	}
	return &out, nil
}

// complete routes completion/complete by its reference: a prompt alias, or a resource template (or resource) URI.
func (s *Server) complete(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	t := s.gw.Routes()
	params := *req.Params
	params.Meta = hopMeta(params.Meta)
	ref := *req.Params.Ref
	params.Ref = &ref
	var serverID, serverName string
	switch ref.Type {
	case "ref/prompt":
		p, ok := t.ResolvePrompt(ref.Name)
		if !ok {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown prompt %q", ref.Name)}
		}
		serverID, serverName, ref.Name = p.ServerID, p.ServerName, p.Name
	case "ref/resource":
		r, ok := t.ResourceTemplate(ref.URI)
		if !ok {
			r, ok = t.Resource(ref.URI)
		}
		if !ok {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown resource or template %q", ref.URI)}
		}
		serverID, serverName, ref.URI = r.ServerID, r.ServerName, r.Key
	default:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown reference type %q", ref.Type)}
	}
	if !s.servesServer(t, serverID) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "unknown reference"}
	}
	var out mcp.CompleteResult
	if err := s.feature(ctx, req.Extra, serverID, serverName, actors.MethodComplete, &params, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// subscription forwards resources/subscribe or unsubscribe to the server of the URI. Every client's subscribe is
// forwarded (a backend treats a repeated one as one), and so is every unsubscribe: see README for what that means
// when two clients subscribe to the same URI.
func (s *Server) subscription(ctx context.Context, extra *mcp.RequestExtra, method, uri string) error {
	t := s.gw.Routes()
	serverID, serverName, orig, ok := resolveURI(t, uri)
	if !ok || !s.servesServer(t, serverID) {
		return mcp.ResourceNotFoundError(uri)
	}
	var out json.RawMessage
	return s.feature(ctx, extra, serverID, serverName, method, &mcp.SubscribeParams{URI: orig}, &out)
}

// resolveURI finds the server of a URI: a listed resource, a rewritten URI, or the callable template with the
// longest literal prefix of the URI.
func resolveURI(t *routing.RouteTable, uri string) (serverID, serverName, orig string, ok bool) {
	if r, found := t.Resource(uri); found {
		return r.ServerID, r.ServerName, r.Key, true
	}
	if name, o, found := routing.ParseRewrittenURI(uri); found {
		if srv, known := t.ServerByName(name); known {
			return srv.ID, srv.Name, o, true
		}
	}
	best := -1
	for _, r := range t.ResourceTemplates() {
		prefix, _, _ := strings.Cut(r.Exposed, "{")
		if strings.HasPrefix(uri, prefix) && len(prefix) > best {
			best, serverID, serverName, orig = len(prefix), r.ServerID, r.ServerName, uri
			if r.Exposed != r.Key {
				_, orig, _ = routing.ParseRewrittenURI(uri)
			}
		}
	}
	return serverID, serverName, orig, best >= 0
}

// feature sends one request to a server's actor and decodes its result into out. A failure is a JSON-RPC error
// naming the server: the backend's own code when the backend answered with an error, internal error otherwise.
// hopMeta is the _meta of a client's request as its backend gets it: without the protocol's own keys
// ("io.modelcontextprotocol/...": under 2026-07-28 each request carries the client's protocol version, info and
// capabilities there), which belong to the hop between the client and the aggregator, not to the aggregator's
// session with the backend (a backend of the older revision refuses a request that carries them). The rest, a
// progress token or a client's own keys, is passed on.
func hopMeta(m mcp.Meta) mcp.Meta {
	var out mcp.Meta
	for k, v := range m {
		if strings.HasPrefix(k, "io.modelcontextprotocol/") {
			continue
		}
		if out == nil {
			out = make(mcp.Meta, len(m))
		}
		out[k] = v
	}
	return out
}

// CodeRateLimited is the JSON-RPC error code of a prompts/get, resources/read, completion/complete or
// resources/(un)subscribe refused by the caller's rate limit (an implementation-defined server error; its data is
// the shared error body, with retry_after_seconds).
const CodeRateLimited = -32029

// feature sends a request a backend answers (prompts/get, resources/read, completion/complete, resources/
// (un)subscribe) to the server's actor. Each takes a token from the caller's rate-limit bucket, the budget its tool
// calls draw from too, so that reads cannot be used to flood a backend the limits protect.
func (s *Server) feature(ctx context.Context, extra *mcp.RequestExtra, serverID, serverName, method string, params, out any) error {
	id, ok := s.callerOf(ctx, extra)
	if !ok {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "a valid bearer token is required"}
	}
	if e := apierror.RateLimit(s.limiter, id); e != nil {
		data, _ := json.Marshal(e.ToolResult())
		return &jsonrpc.Error{Code: CodeRateLimited, Message: fmt.Sprintf("rate limited: retry after %d s", e.RetryAfter), Data: data}
	}
	// A per_user server answers on the caller's own session: the subject goes along (the actor ignores it otherwise).
	ctx = gateway.WithCallerSubject(ctx, gateway.CredentialSubject(id))
	reply, err := s.feat.gw.Feature(withRequestID(ctx, nil), serverID, method, params)
	if err == nil && s.cases.ExchangedFor(ctx, serverID, id, reply.Error) {
		// A per_user server whose caller had no grant (or an exchanged one that expired) and came with an OAuth
		// token that could be exchanged for one: the request runs once more, as a tool call does (it did not run).
		reply, err = s.feat.gw.Feature(withRequestID(ctx, nil), serverID, method, params)
	}
	if err != nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("%s on server %s failed: %v", method, serverName, err)}
	}
	if reply.Error != nil {
		code := reply.RpcCode
		if code == 0 {
			code = jsonrpc.CodeInternalError
		}
		msg := reply.Error.Message
		if serverName != "" && !strings.Contains(msg, serverName) {
			msg = fmt.Sprintf("server %s: %s", serverName, msg)
		}
		return &jsonrpc.Error{Code: code, Message: msg}
	}
	if err := json.Unmarshal(reply.ResultJson, out); err != nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("%s on server %s: undecodable result: %v", method, serverName, err)}
	}
	return nil
}

// servesServer reports whether this endpoint serves the server's prompts and resources: every server on the
// unscoped endpoint, on a profile endpoint the servers with a tool in the profile.
func (s *Server) servesServer(t *routing.RouteTable, serverID string) bool {
	if s.opts.Scope == nil {
		return true
	}
	return t.ServersIn(s.opts.Scope)[serverID]
}
