package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors/floodguard"
	"github.com/mcpgw/aggregator/actors/msglimit"
	"github.com/mcpgw/aggregator/internal/errcode"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// The server actor's requests about what a backend offers besides tools (issue 14): listing its prompts,
// resources and resource templates for discovery, and running resources/read, prompts/get, completion/complete and
// resources/subscribe/unsubscribe for a client of the aggregated endpoint. Like tool calls they run in goroutines
// over the multiplexed session, count as requests in flight (a disconnect drains or cancels them) and answer the
// asker from there.

// Feature methods a FeatureRequest may name.
const (
	MethodReadResource = "resources/read"
	MethodGetPrompt    = "prompts/get"
	MethodComplete     = "completion/complete"
	MethodSubscribe    = "resources/subscribe"
	MethodUnsubscribe  = "resources/unsubscribe"
)

// Local messages from the session's notification handlers.
type (
	featuresListChanged struct {
		gen   uint64
		kind  string // "prompts" or "resources"
		latch *floodguard.Latch
	}
	resourceUpdated struct {
		gen uint64
		uri string
	}
)

// featureHandlers are the client options that pass a backend's prompt and resource notifications to the actor.
// A kind's list_changed notifications are merged while one is on its way to the actor (floodguard.Latch); dropped
// counts the merged ones.
func (a *serverActor) featureHandlers(opts *mcp.ClientOptions, gen uint64, dropped func(kind string)) {
	sys, self := a.sys, a.self
	prompts, resources := &floodguard.Latch{}, &floodguard.Latch{}
	notice := func(kind string, latch *floodguard.Latch) {
		if !latch.Set() {
			dropped(floodguard.KindListChanged)
			return
		}
		sys.Root.Send(self, &featuresListChanged{gen: gen, kind: kind, latch: latch})
	}
	opts.PromptListChangedHandler = func(context.Context, *mcp.PromptListChangedRequest) { notice("prompts", prompts) }
	opts.ResourceListChangedHandler = func(context.Context, *mcp.ResourceListChangedRequest) { notice("resources", resources) }
	opts.ResourceUpdatedHandler = func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
		if req.Params != nil && req.Params.URI != "" {
			sys.Root.Send(self, &resourceUpdated{gen: gen, uri: req.Params.URI})
		}
	}
}

// onFeatureNotice publishes a backend's prompt or resource notification of the current session.
func (a *serverActor) onFeatureNotice(msg any) {
	switch m := msg.(type) {
	case *featuresListChanged:
		m.latch.Clear() // before acting: a later list_changed is passed on again
		if a.sess != nil && m.gen == a.sess.gen {
			a.sys.EventStream.Publish(&pb.FeaturesListChanged{ServerId: a.id, ServerName: a.rec.Name, Kind: m.kind})
		}
	case *resourceUpdated:
		if a.sess != nil && m.gen == a.sess.gen {
			a.sys.EventStream.Publish(&pb.ResourceUpdated{ServerId: a.id, ServerName: a.rec.Name, Uri: m.uri})
		}
	}
}

// maxFeatures bounds each list a backend returns (prompts, resources, templates) when no tool cap is configured.
const maxFeatures = 10000

// listFeatures pages through the backend's prompts, resources and resource templates, each only when the backend
// declared the capability, in a goroutine; each list is cut at the tool cap (or maxFeatures), the whole bounded by
// the request timeout (and each message by the session's size guard).
func (a *serverActor) listFeatures(ctx actor.Context) {
	if !callable(a.status) || a.sess == nil {
		ctx.Respond(&pb.ListFeaturesReply{Error: a.unavailable("Server unavailable: " + a.rec.Name)})
		return
	}
	sess, sender, sys, timeout, sec := a.sess.session, ctx.Sender(), a.sys, a.deps.Config.RequestTimeout, a.secrets
	limit := a.deps.Config.MaxToolsPerServer
	if limit <= 0 {
		limit = maxFeatures
	}
	go func() {
		lctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		reply := &pb.ListFeaturesReply{}
		var caps *mcp.ServerCapabilities
		if init := sess.InitializeResult(); init != nil {
			caps = init.Capabilities
		}
		if caps == nil {
			caps = &mcp.ServerCapabilities{}
		}
		reply.Completions = caps.Completions != nil
		reply.Subscribe = caps.Resources != nil && caps.Resources.Subscribe
		var err error
		if caps.Prompts != nil {
			reply.PromptsJson, err = collectFeatures(sess.Prompts(lctx, nil), limit)
		}
		if err == nil && caps.Resources != nil {
			reply.ResourcesJson, err = collectFeatures(sess.Resources(lctx, nil), limit)
			if err == nil {
				reply.TemplatesJson, err = collectFeatures(sess.ResourceTemplates(lctx, nil), limit)
			}
		}
		if err != nil {
			reply = &pb.ListFeaturesReply{Error: &pb.ErrorInfo{Code: errcode.ExecutionFailed, Message: sec.Scrub(err.Error())}}
			if rpcErr := (*jsonrpc.Error)(nil); errors.As(err, &rpcErr) && msglimit.TooLarge(rpcErr.Code, rpcErr.Message) {
				reply.Error.Code = errcode.ResponseTooLarge
			}
		}
		if sender != nil {
			sys.Root.Send(sender, reply)
		}
	}()
}

// collectFeatures marshals up to limit items of a listing; the listing stops there (no further pages are asked for).
func collectFeatures[T any](seq iter.Seq2[T, error], limit int) ([][]byte, error) {
	var out [][]byte
	for item, err := range seq {
		if err != nil {
			return nil, err
		}
		if len(out) >= limit {
			break
		}
		b, err := json.Marshal(item)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// featureRequest runs a FeatureRequest on the session in a goroutine, counted among the requests in flight.
func (a *serverActor) featureRequest(ctx actor.Context, m *pb.FeatureRequest) {
	if !callable(a.status) || a.sess == nil {
		ctx.Respond(&pb.FeatureReply{Error: a.unavailable("Server unavailable: " + a.rec.Name)})
		return
	}
	if a.shuttingDown {
		ctx.Respond(&pb.FeatureReply{Error: a.unavailable(fmt.Sprintf("The aggregator is shutting down and takes no new requests (%s on %s)", m.Method, a.rec.Name))})
		return
	}
	cctx, id, deadline, release := a.beginRequest(m.DeadlineUnixMs, m.RequestId, "")
	sess, sender, sys, self, status, sec, pending := a.sess.session, ctx.Sender(), a.sys, a.self, a.status, a.secrets, a.pending
	// A per_user server reads resources, gets prompts and completes on the caller's own session (the backend may
	// answer each caller differently); subscriptions stay on the server's own session, whose updates reach every
	// subscribed client.
	var userWait func() (any, func(string) string, error)
	var userRelay *relayState
	rec := a.rec
	if perUser(a.rec) && m.Method != MethodSubscribe && m.Method != MethodUnsubscribe {
		if info := a.userSessionCheck(m.Subject); info != nil {
			a.pending.done(id, "")
			release()
			ctx.Respond(&pb.FeatureReply{Error: info})
			return
		}
		method, params := m.Method, m.ParamsJson
		userWait, userRelay = a.callerRequest(ctx, m.Subject, m.Subject, cctx, deadline, func(ctx context.Context, up proxyUpstream) (any, error) {
			return runFeature(ctx, up.sess, method, params)
		}, id, nil)
	}
	go func() {
		defer release()
		if userRelay != nil {
			defer userRelay.end(id, false)
		}
		var res any
		var scrub func(string) string
		var err error
		if userWait != nil {
			res, scrub, err = userWait()
		} else {
			res, err = runFeature(cctx, sess, m.Method, m.ParamsJson)
		}
		reply := &pb.FeatureReply{}
		if err == nil {
			a.lastOK.Store(time.Now().UnixNano())
			reply.ResultJson, err = json.Marshal(res)
		}
		if err != nil {
			reply.Error = backendError(cctx, err, rec, status, m.Method, scrub, sec)
			var rpcErr *jsonrpc.Error
			if reply.Error.Code == errcode.ExecutionFailed && errors.As(err, &rpcErr) {
				reply.RpcCode = rpcErr.Code
			}
		}
		if pending.done(id, "") {
			sys.Root.Send(self, &callDone{})
		}
		if sender != nil {
			sys.Root.Send(sender, reply)
		}
	}()
}

// runFeature sends one feature request with its params as the client gave them.
func runFeature(ctx context.Context, sess *mcp.ClientSession, method string, params []byte) (any, error) {
	decode := func(p any) error {
		if len(params) == 0 {
			return nil
		}
		if err := json.Unmarshal(params, p); err != nil {
			return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "invalid params: " + err.Error()}
		}
		return nil
	}
	switch method {
	case MethodReadResource:
		var p mcp.ReadResourceParams
		if err := decode(&p); err != nil {
			return nil, err
		}
		return sess.ReadResource(ctx, &p)
	case MethodGetPrompt:
		var p mcp.GetPromptParams
		if err := decode(&p); err != nil {
			return nil, err
		}
		return sess.GetPrompt(ctx, &p)
	case MethodComplete:
		var p mcp.CompleteParams
		if err := decode(&p); err != nil {
			return nil, err
		}
		return sess.Complete(ctx, &p)
	case MethodSubscribe:
		var p mcp.SubscribeParams
		if err := decode(&p); err != nil {
			return nil, err
		}
		return struct{}{}, sess.Subscribe(ctx, &p)
	case MethodUnsubscribe:
		var p mcp.UnsubscribeParams
		if err := decode(&p); err != nil {
			return nil, err
		}
		return struct{}{}, sess.Unsubscribe(ctx, &p)
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not routed to backends: " + method}
}
