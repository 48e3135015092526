package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/actors/settings"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/internal/backendauth"
	"github.com/mcpgw/aggregator/internal/connconfig"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// Per-user sessions (issue 28): a per_user server runs each caller's calls on a backend session of the caller's
// own, opened with the caller's stored secret injected where the registration's user_credential says (an HTTP/SSE
// header, a stdio child's environment variable). Such a session is a proxy actor (proxy_actor.go) named after the
// caller's subject, a child of the server's actor: it stops with the server's actor, when the server leaves
// CONNECTED/DEGRADED, after DefaultUserSessionIdle (Config.UserSessionIdle) without a request, and when the
// caller's credential is revoked or replaced (EndUserSession). At most Config.MaxUserSessions run per server. Its
// failures are its own: a caller's bad credential fails that caller's calls and never touches the server's status,
// health or failure counter. The server's own session (its connection_config as registered) still discovers the
// tools, once, for everyone.
//
// The same sessions serve the clients of a shared server whose backend sends requests to its client (sampling,
// elicitation, roots; see server_relay.go): once it has sent one, each client that can answer such requests gets a
// session of its own (keyed by the call's relay_client, opened with the registration's connection_config), so that
// every request on it is that client's. They share the idle time, the cap (beyond it, a client's calls go back to
// the server's own session) and the rule that their failures are their own.

// Defaults of the per-user sessions (Config.UserSessionIdle, Config.MaxUserSessions).
const (
	DefaultUserSessionIdle = settings.DefaultUserSessionIdle
	DefaultMaxUserSessions = settings.DefaultMaxUserSessions
)

// ErrCredentialRequired means the caller has no stored credential for a per_user server (or is not known by any
// subject): the call is not run.
var ErrCredentialRequired = errors.New("credential required")

// callerSecretVar is the ${VAR} reference the caller's secret is injected as, resolved by the session's own lookup
// only: the secret itself is never expanded (a secret holding "${HOME}" stays as it is).
const callerSecretVar = "MCPGW_CALLER_SECRET"

// userSessionPrefix starts the names of per-user session actors (child ids end in "/user-<hash>").
const userSessionPrefix = "user-"

// userSecretLoaded carries the caller's secret read from the store (off the mailbox) to the session's actor.
type userSecretLoaded struct {
	secret []byte
	err    error
}

// userSessionName is the child name prefix of a subject's sessions (a sequence number follows): a hash, so that neither the subject nor its length
// shows in actor ids, logs or metrics.
func userSessionName(subject string) string {
	h := sha256.Sum256([]byte("mcpgw user session\x00" + subject))
	return userSessionPrefix + hex.EncodeToString(h[:16])
}

// perUser reports whether the server runs its callers' calls on their own sessions.
func perUser(rec persistence.Server) bool {
	return rec.CredentialMode == persistence.CredentialPerUser && rec.UserCredential != nil
}

// credentialRequired is the error a call of a caller without a credential gets.
func credentialRequired(rec persistence.Server, status string) *pb.ErrorInfo {
	if rec.UserCredential != nil && rec.UserCredential.OAuth != nil {
		return &pb.ErrorInfo{Code: errcode.CredentialRequired, ServerName: rec.Name, ServerStatus: status, CredentialOauth: true,
			Message: fmt.Sprintf("Server %s needs your own OAuth authorization: start it with POST %s and open the authorization_url it answers",
				rec.Name, gateway.OAuthStartPath(rec.ID))}
	}
	return &pb.ErrorInfo{Code: errcode.CredentialRequired, ServerName: rec.Name, ServerStatus: status,
		Message: fmt.Sprintf("Server %s needs your own credential: store it with PUT %s {\"secret\": \"...\"}", rec.Name,
			gateway.CredentialPath(rec.ID))}
}

// userSessions are a server actor's per-user session actors, by subject. A session that ended (stopping, or told
// to stop) is never sent a request again: a new one is spawned (under a new name) while the old one stops, and the
// calls still waiting on the old one are released when it has terminated.
type userSessions struct {
	bySubject map[string]*userSessionRef
	ending    []*userSessionRef
	seq       uint64
}

type userSessionRef struct {
	pid    *actor.PID
	shared *proxyShared
	// relay: the calls in flight on the session, for its backend's requests to their client.
	relay *relayState
	ended bool
	// done is closed once the server actor saw the session actor terminate.
	done chan struct{}
}

func (r *userSessionRef) live() bool { return !r.ended && !r.shared.isStopped() }

// get returns the subject's live session, retiring one that ended.
func (u *userSessions) get(subject string) *userSessionRef {
	r := u.bySubject[subject]
	if r == nil {
		return nil
	}
	if !r.live() {
		u.retire(subject, r)
		return nil
	}
	return r
}

// retire moves the subject's session r to the ending ones.
func (u *userSessions) retire(subject string, r *userSessionRef) {
	r.ended = true
	delete(u.bySubject, subject)
	u.ending = append(u.ending, r)
}

// running counts the live sessions.
func (u *userSessions) running() int {
	n := 0
	for _, r := range u.bySubject {
		if r.live() {
			n++
		}
	}
	return n
}

// terminated releases what waits on the session actor pid, which has stopped.
func (u *userSessions) terminated(pid *actor.PID) {
	for s, r := range u.bySubject {
		if r.pid.Equal(pid) {
			close(r.done)
			delete(u.bySubject, s)
			return
		}
	}
	for i, r := range u.ending {
		if r.pid.Equal(pid) {
			close(r.done)
			u.ending = slices.Delete(u.ending, i, i+1)
			return
		}
	}
}

// userSessionCheck refuses a per_user call that cannot get a session: no subject, or no room for one more
// caller's session (the caller has none yet).
func (a *serverActor) userSessionCheck(subject string) *pb.ErrorInfo {
	if subject == "" {
		return credentialRequired(a.rec, a.status)
	}
	if a.users.get(subject) != nil {
		return nil
	}
	max := a.deps.Config.MaxUserSessions
	if max <= 0 {
		max = DefaultMaxUserSessions
	}
	if n := a.users.running(); n >= max {
		return &pb.ErrorInfo{Code: errcode.ServerBusy, ServerName: a.rec.Name, ServerStatus: a.status,
			Message: fmt.Sprintf("Server %s already runs %d callers' own sessions, the limit (MCP_AGGREGATOR_MAX_USER_SESSIONS); retry later", a.rec.Name, n)}
	}
	return nil
}

// clientSessionKey is the key of a client's own session of a shared server among a server actor's caller sessions
// (subjects never hold a NUL).
func clientSessionKey(client string) string { return "client\x00" + client }

// clientSession reports whether a call of the client relay_client names runs on a session of the client's own: the
// backend has sent requests to its client, and the client has one, or there is room for one more.
func (a *serverActor) clientSession(m *pb.CallTool) bool {
	if m.RelayTo == nil || m.RelayClient == "" || !a.relay.asked.Load() {
		return false
	}
	if a.users.get(clientSessionKey(m.RelayClient)) != nil {
		return true
	}
	max := a.deps.Config.MaxUserSessions
	if max <= 0 {
		max = DefaultMaxUserSessions
	}
	return a.users.running() < max
}

// callerCall sends the call to the caller's own session (key: a per_user server's subject, or clientSessionKey),
// spawning the session (with the call queued in it, so that it runs once connected, or fails with the reason the
// session could not open) when none runs. The call is counted in flight on that session's relay (id, relayTo) before
// it can run; the returned relay is where it is uncounted. The returned function waits for the answer, or for the
// session's end; its scrub removes the caller's secret from error texts.
func (a *serverActor) callerCall(ctx actor.Context, key, subject string, cctx context.Context, deadline time.Time,
	params *mcp.CallToolParams, id uint64, relayTo *pb.PID, task *taskCall) (func(context.Context, *mcp.CallToolParams) (*mcp.CallToolResult, func(string) string, error), *relayState) {
	wait, relay := a.callerRequest(ctx, key, subject, cctx, deadline, func(ctx context.Context, up proxyUpstream) (any, error) {
		// A task's call of a tool the backend runs as a task follows the backend's task on this session
		// (tasks_backend.go), when the backend declared tasks to it too.
		if task != nil && up.tasks != nil && up.tasks.tasks.Load() {
			return followBackendTask(ctx, up.tasks, up.sess, params, task.ttl, task.onTask)
		}
		return up.sess.CallTool(ctx, params)
	}, id, relayTo)
	return func(context.Context, *mcp.CallToolParams) (*mcp.CallToolResult, func(string) string, error) {
		res, scrub, err := wait()
		if err != nil {
			return nil, scrub, err
		}
		out, ok := res.(*mcp.CallToolResult)
		if !ok {
			return nil, scrub, fmt.Errorf("unexpected result %T of a call on a caller's session", res)
		}
		return out, scrub, nil
	}, relay
}

// callerRequest runs do on the caller's own session as callerCall runs a call; wait returns its result.
func (a *serverActor) callerRequest(ctx actor.Context, key, subject string, cctx context.Context, deadline time.Time,
	do func(context.Context, proxyUpstream) (any, error), id uint64, relayTo *pb.PID) (wait func() (any, func(string) string, error), _ *relayState) {
	req := &proxyRequest{ctx: cctx, deadline: deadline, do: do}
	fut := actor.NewFuture(a.sys, time.Until(deadline)+time.Second)
	ref := a.users.get(key)
	var relay *relayState
	if ref != nil {
		relay = ref.relay
		relay.begin(id, relayTo)
		a.sys.Root.RequestWithCustomSender(ref.pid, req, fut.PID())
	} else {
		relay = &relayState{timeout: a.deps.Config.RequestTimeout, oneClient: subject == ""}
		relay.begin(id, relayTo)
		var err error
		if ref, err = a.spawnUserSession(ctx, key, subject, relay, queuedRequest{m: req, sender: fut.PID()}); err != nil {
			return func() (any, func(string) string, error) { return nil, nil, err }, relay
		}
	}
	done := ref.done
	return func() (any, func(string) string, error) {
		type result struct {
			res any
			err error
		}
		ch := make(chan result, 1)
		go func() {
			res, err := fut.Result()
			ch <- result{res, err}
		}()
		var r result
		select {
		case r = <-ch:
		case <-done:
			// The session ended: an answer it sent is on its way; a request it never took gets none.
			select {
			case r = <-ch:
			case <-time.After(time.Second):
				r.err = ErrProxyClosed
			}
		}
		if r.err != nil {
			if errors.Is(r.err, actor.ErrDeadLetter) {
				return nil, nil, ErrProxyClosed
			}
			return nil, nil, r.err
		}
		reply, ok := r.res.(*proxyReply)
		if !ok {
			return nil, nil, fmt.Errorf("unexpected reply %T to a request on a caller's session", r.res)
		}
		return reply.res, reply.scrub, reply.err
	}, relay
}

// spawnUserSession starts the caller's session actor (key as in callerCall; subject "" for a client's session of a
// shared server, which connects with the registration as it is) with first queued; it connects by itself.
func (a *serverActor) spawnUserSession(ctx actor.Context, key, subject string, relay *relayState, first queuedRequest) (*userSessionRef, error) {
	idle := a.deps.Config.UserSessionIdle
	if idle <= 0 {
		idle = DefaultUserSessionIdle
	}
	name, kind := userSessionName(subject), "per-user session opening"
	if subject == "" {
		name, kind = clientSessionName(key), "per-client session opening (the backend sends requests to its client)"
	}
	shared := &proxyShared{}
	p := &proxyActor{deps: a.deps, rec: a.rec, shared: shared, subject: subject, idle: idle, relay: relay,
		opts: ProxyOptions{Handlers: ProxyHandlers{Progress: a.userProgress()}}}
	a.users.seq++
	pid, err := ctx.SpawnNamed(actor.PropsFromProducer(func() actor.Actor {
		c := *p
		c.pending = map[uint64]context.CancelFunc{}
		c.queued = []queuedRequest{first}
		return &c
	}), fmt.Sprintf("%s-%d", name, a.users.seq))
	if err != nil {
		return nil, fmt.Errorf("start your session: %w: %w", ErrProxyClosed, err)
	}
	a.watchForProxy(pid, shared)
	ref := &userSessionRef{pid: pid, shared: shared, relay: relay, done: make(chan struct{})}
	if a.users.bySubject == nil {
		a.users.bySubject = map[string]*userSessionRef{}
	}
	a.users.bySubject[key] = ref
	a.log().Info(kind, "proxy", pid.Id, "user_sessions", a.users.running())
	return ref, nil
}

// clientSessionName is the child name prefix of a client's sessions of a shared server: a hash, as userSessionName.
func clientSessionName(key string) string {
	h := sha256.Sum256([]byte("mcpgw client session\x00" + key))
	return clientSessionPrefix + hex.EncodeToString(h[:16])
}

// clientSessionPrefix starts the names of per-client session actors.
const clientSessionPrefix = "client-"

// userProgress forwards a per-user session's progress notifications to the call that asked for them (the token is
// the server actor's, as on its own session).
func (a *serverActor) userProgress() func(context.Context, *mcp.ProgressNotificationParams) {
	progress, sys := a.progress, a.sys
	return func(_ context.Context, p *mcp.ProgressNotificationParams) {
		if to, ok := progress.Load(p.ProgressToken); ok {
			sys.Root.Send(to.(*actor.PID), &pb.Progress{Progress: p.Progress, Total: p.Total, Message: p.Message})
		}
	}
}

// endUserSession stops the subject's session, if it runs, and the subject's sessions of the per-server endpoint.
func (a *serverActor) endUserSession(ctx actor.Context, subject string) {
	a.endUserProxies(ctx, subject)
	r := a.users.bySubject[subject]
	if r == nil {
		return
	}
	a.users.retire(subject, r)
	a.log().Info("per-user session ended: its credential changed", "proxy", r.pid.Id)
	ctx.Stop(r.pid)
}

// proxyPrefix starts the names of the per-server endpoint's proxy actors (ProxyOptions; proxy_actor.go).
const proxyPrefix = "proxy-"

// proxyUserPrefix is the name prefix of the subject's proxy sessions of a per_user server (a hash of the subject,
// as userSessionName, then protoactor's sequence): so that the ones to end when the subject's credential changes are
// found among the server actor's children, and still count against the per-server cap.
func proxyUserPrefix(subject string) string {
	return proxyPrefix + userSessionName(subject) + "-"
}

// ErrCredentialChanged is why a caller's upstream session of the per-server endpoint ended when their credential
// was revoked or replaced (ProxyHandlers.Closed's error wraps it): the front end may open a new upstream session
// for the same client, which takes the new credential, or is refused ErrCredentialRequired after a revocation.
var ErrCredentialChanged = errors.New("your credential was revoked or replaced")

// endUserProxies ends the subject's upstream sessions of the per-server endpoint (/mcp/servers/{name}): they were
// opened with the credential that was just revoked or replaced. They end with ErrCredentialChanged, on which the
// front end opens the client a new upstream session with the new credential (the client's own session goes on),
// or ends the client's session when none is left (a revocation).
func (a *serverActor) endUserProxies(ctx actor.Context, subject string) {
	mark := "/" + proxyUserPrefix(subject)
	why := fmt.Errorf("%w: server %s", ErrCredentialChanged, a.rec.Name)
	n := 0
	for _, c := range ctx.Children() {
		if strings.Contains(c.Id, mark) {
			if up, ok := a.userProxies[c.Id]; ok && up.subject == subject {
				up.shared.end(why) // before the answer to EndUserSession: no later request reaches the old session
			}
			ctx.Send(c, &proxyServerGone{err: why})
			n++
		}
	}
	if n > 0 {
		a.log().Info("per-user proxy sessions ended: their credential changed", "proxy_sessions", n)
	}
}

// userProxy is a proxy session of the per-server endpoint on a caller's own credential (serverActor.userProxies,
// by actor id): what endUserProxies ends when the caller's credential changes.
type userProxy struct {
	subject string
	shared  *proxyShared
}

// CredentialRequiredError is ErrCredentialRequired with what credentialRequired says: where to store the
// credential, or, for a server whose callers authorize through OAuth, where to start the authorization.
type CredentialRequiredError struct {
	Message string
	OAuth   bool
}

func (e *CredentialRequiredError) Error() string {
	return e.Message + ": " + ErrCredentialRequired.Error()
}

// Unwrap makes the error ErrCredentialRequired.
func (e *CredentialRequiredError) Unwrap() error { return ErrCredentialRequired }

// credentialRequiredError is the CredentialRequiredError of a caller without a credential for rec.
func credentialRequiredError(rec persistence.Server) error {
	info := credentialRequired(rec, "")
	return &CredentialRequiredError{Message: info.Message, OAuth: info.CredentialOauth}
}

// credentialChanged reports whether rec's credential settings differ from old's.
func credentialChanged(old, rec persistence.Server) bool {
	if old.CredentialMode != rec.CredentialMode || (old.UserCredential == nil) != (rec.UserCredential == nil) {
		return true
	}
	return old.UserCredential != nil && *old.UserCredential != *rec.UserCredential
}

// endCallerSessions stops every caller's session (per-user and per-client); the calls on them fail as on a closed
// session, the next ones open new sessions.
func (a *serverActor) endCallerSessions(why string) {
	for key, r := range a.users.bySubject {
		a.users.retire(key, r)
		a.sys.Root.Send(r.pid, &proxyServerGone{reason: why})
	}
	if n := len(a.users.ending); n > 0 {
		a.log().Info("callers' sessions ended", "reason", why, "sessions", n)
	}
}

// classifyUserError maps what a caller's own session reported; false when the error is the call's own (timeout,
// the backend's JSON-RPC error, ...), which classifyCallError maps.
func classifyUserError(err error, rec persistence.Server, status string) (*pb.ErrorInfo, bool) {
	switch {
	case errors.Is(err, ErrCredentialRequired):
		return credentialRequired(rec, status), true
	case errors.Is(err, backendauth.ErrReauthorize) && rejectedByTransport(err):
		// The caller's OAuth grant could not give a token the backend takes (an exchanged token that expired, a
		// refused refresh): the request was not run (never sent, or refused with 401; the transport says so), so
		// the caller is asked as one without a grant, and the front end may exchange their token again and run the
		// call once more.
		return credentialRequired(rec, status), true
	case errors.Is(err, ErrProxyConnect):
		return &pb.ErrorInfo{Code: errcode.ServerUnavailable, ServerName: rec.Name, ServerStatus: status,
			Message: fmt.Sprintf("Your session of server %s could not connect (is your credential right? %s): %v",
				rec.Name, replaceHint(rec), err)}, true
	case errors.Is(err, ErrProxyClosed):
		return &pb.ErrorInfo{Code: errcode.ServerUnavailable, ServerName: rec.Name, ServerStatus: status,
			Message: fmt.Sprintf("Your session of server %s closed during the call; retry", rec.Name)}, true
	}
	return nil, false
}

// startUser reads the caller's secret off the mailbox; onUserSecret then connects with it.
func (p *proxyActor) startUser(ctx actor.Context) {
	ctx.SetReceiveTimeout(p.idle)
	store, id, subject, sys, self := p.deps.Store, p.rec.ID, p.subject, p.sys, p.self
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), p.deps.Config.ConnectionTimeout)
		defer cancel()
		v, err := store.GetUserSecret(sctx, id, subject)
		if errors.Is(err, persistence.ErrNotFound) {
			err = ErrCredentialRequired
		}
		sys.Root.Send(self, &userSecretLoaded{secret: v.Secret, err: err})
	}()
}

func (p *proxyActor) onUserSecret(ctx actor.Context, m *userSecretLoaded) {
	if m.err != nil {
		if !errors.Is(m.err, ErrCredentialRequired) {
			m.err = fmt.Errorf("read your credential: %w", m.err)
		}
		p.fail(ctx, m.err)
		return
	}
	if p.rec.UserCredential != nil && p.rec.UserCredential.OAuth != nil {
		p.connectOAuth(ctx, m.secret)
		return
	}
	rec, err := withCallerSecret(p.rec)
	if err != nil {
		p.fail(ctx, err)
		return
	}
	secret := string(m.secret)
	p.secrets = callerSecrets(p.rec.UserCredential, secret)
	o := p.deps.Backend()
	base := o.Env
	if base == nil {
		base = os.LookupEnv
	}
	o.Env = func(name string) (string, bool) {
		if name == callerSecretVar {
			return secret, true
		}
		return base(name)
	}
	p.connect(ctx, rec, o)
}

// onIdle closes the session after the idle time without a request, unless requests are still running.
func (p *proxyActor) onIdle(ctx actor.Context) {
	if p.idle <= 0 {
		return
	}
	if len(p.pending) > 0 || len(p.queued) > 0 {
		ctx.SetReceiveTimeout(p.idle) // a firing cancels the timer: watch again
		return
	}
	p.why = fmt.Errorf("%w: idle for %s", ErrProxyClosed, p.idle)
	p.logger().Info("caller's session closed: idle", "idle", p.idle.String())
	ctx.Stop(p.self)
}

// withCallerSecret is rec with a reference to the caller's secret where its user_credential says: the header
// (prefix first; the registration's own header of that name, in any case, is replaced) or the environment variable.
func withCallerSecret(rec persistence.Server) (persistence.Server, error) {
	slot := rec.UserCredential
	if slot == nil {
		return rec, errors.New("the server has no user_credential")
	}
	var cfg map[string]any
	if err := json.Unmarshal(rec.ConnectionConfig, &cfg); err != nil || cfg == nil {
		return rec, fmt.Errorf("connection_config is not a JSON object")
	}
	ref := "${" + callerSecretVar + "}"
	member := func(key string) map[string]any {
		m, _ := cfg[key].(map[string]any)
		if m == nil {
			m = map[string]any{}
		}
		cfg[key] = m
		return m
	}
	switch {
	case slot.Env != "" && rec.TransportType == persistence.TransportSTDIO:
		member("env")[slot.Env] = ref
	case slot.Header != "" && rec.TransportType != persistence.TransportSTDIO:
		h := member("headers")
		for k := range h {
			if strings.EqualFold(k, slot.Header) {
				delete(h, k)
			}
		}
		h[slot.Header] = slot.Prefix + ref
	default:
		return rec, fmt.Errorf("user_credential does not fit a %s server", rec.TransportType)
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return rec, err
	}
	rec.ConnectionConfig = raw
	return rec, nil
}

// callerSecrets scrubs the caller's secret, alone and as injected, from error texts.
func callerSecrets(slot *persistence.UserCredentialSlot, secret string) *backend.Secrets {
	env := map[string]string{"SECRET": secret}
	if slot != nil && slot.Prefix != "" {
		env["INJECTED"] = slot.Prefix + secret
	}
	cfg, _ := json.Marshal(map[string]any{"command": "x", "env": env})
	return backend.NewSecrets(persistence.Server{TransportType: persistence.TransportSTDIO, ConnectionConfig: cfg},
		func(string) (string, bool) { return "", false })
}

// connectOAuth connects a caller's own session of an OAuth backend (issue 28): the stored secret is the caller's
// grant (internal/backendauth), whose access token the go-sdk transport sends as Authorization: Bearer on every
// request through the session's OAuth handler, which refreshes it before it expires and on a 401. The
// registration's own Authorization header (a service credential for discovery) is never sent on it. A stored secret
// that is not a grant means the caller has not authorized yet.
func (p *proxyActor) connectOAuth(ctx actor.Context, raw []byte) {
	g, err := backendauth.DecodeGrant(raw)
	if err != nil {
		p.fail(ctx, fmt.Errorf("%w: %w", ErrCredentialRequired, err))
		return
	}
	if g.Expired(time.Now()) {
		// Nothing can renew it (no refresh token; an exchanged token has none): the caller authorizes again, or
		// the front end exchanges their token again.
		p.fail(ctx, fmt.Errorf("%w: your OAuth token expired", ErrCredentialRequired))
		return
	}
	rec, err := withoutHeader(p.rec, "Authorization")
	if err != nil {
		p.fail(ctx, err)
		return
	}
	o := p.deps.Backend()
	client := backendauth.Client(o.Outbound, connconfig.AllowsInsecureHTTP(rec.ConnectionConfig))
	h := backendauth.NewSessionHandler(p.deps.Store, client, p.rec.ID, p.subject, g, p.logger())
	h.Renew = p.opts.Renew
	o.OAuth = h
	// The tokens change as the session renews them (refresh, the stored grant, a new exchange): the scrubber asks
	// the handler for them every time, or a backend echoing a renewed token would get it to the caller and the log.
	p.secrets = &grantSecrets{tokens: h.Secrets}
	p.connect(ctx, rec, o)
}

// withoutHeader is rec without the connection_config header name (in any case).
func withoutHeader(rec persistence.Server, name string) (persistence.Server, error) {
	var cfg map[string]any
	if err := json.Unmarshal(rec.ConnectionConfig, &cfg); err != nil || cfg == nil {
		return rec, fmt.Errorf("connection_config is not a JSON object")
	}
	h, _ := cfg["headers"].(map[string]any)
	for k := range h {
		if strings.EqualFold(k, name) {
			delete(h, k)
		}
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return rec, err
	}
	rec.ConnectionConfig = raw
	return rec, nil
}

// tokenSecrets scrubs a caller's OAuth tokens from error texts.
func tokenSecrets(tokens []string) *backend.Secrets {
	env := map[string]string{}
	for i, t := range tokens {
		if t != "" {
			env[fmt.Sprintf("T%d", i)] = t
		}
	}
	cfg, _ := json.Marshal(map[string]any{"command": "x", "env": env})
	return backend.NewSecrets(persistence.Server{TransportType: persistence.TransportSTDIO, ConnectionConfig: cfg},
		func(string) (string, bool) { return "", false })
}

// scrubber removes a session's own secrets from an error text (*backend.Secrets, grantSecrets).
type scrubber interface{ Scrub(text string) string }

// grantSecrets scrubs the tokens of a caller's OAuth session, as they are when it scrubs: the session's handler
// renews them while the session runs. Safe for concurrent use (requests scrub from their own goroutines).
type grantSecrets struct {
	tokens func() []string

	mu   sync.Mutex
	key  string // the tokens last seen, joined
	last *backend.Secrets
}

func (g *grantSecrets) Scrub(text string) string {
	toks := g.tokens()
	key := strings.Join(toks, "\x00")
	g.mu.Lock()
	if g.last == nil || key != g.key {
		g.key, g.last = key, tokenSecrets(toks)
	}
	s := g.last
	g.mu.Unlock()
	return s.Scrub(text)
}

// replaceHint says how a caller replaces their credential: a new authorization for an OAuth server, else a new
// secret.
func replaceHint(rec persistence.Server) string {
	if rec.UserCredential != nil && rec.UserCredential.OAuth != nil {
		return "authorize again with POST " + gateway.OAuthStartPath(rec.ID)
	}
	return "replace it with PUT " + gateway.CredentialPath(rec.ID)
}

// rejectedByTransport reports whether err says the transport did not deliver the request (codeRejected, the
// go-sdk's jsonrpc2.ErrRejected, in its chain: its headers could not be set, or the backend refused it before
// running it), so it did not run.
func rejectedByTransport(err error) bool {
	var we *jsonrpc.Error
	return errors.As(err, &we) && we.Code == codeRejected
}
