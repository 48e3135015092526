package backendauth

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/internal/connconfig"
	"github.com/mcpgw/aggregator/persistence"
)

// Defaults of Flows.
const (
	// DefaultFlowTTL is how long a started flow waits for its caller to come back from the authorization server;
	// its state and PKCE verifier die with it.
	DefaultFlowTTL = 10 * time.Minute
	// DefaultMaxFlows bounds the flows pending at once on one node.
	DefaultMaxFlows = 1024
	// MaxFlowsPerCaller bounds one caller's pending flows (each holds a goroutine and, with dynamic client
	// registration, a client registered at the authorization server).
	MaxFlowsPerCaller = 4
	// CallbackPath is the route of the authorization server's redirect (the registered redirect URI's path).
	CallbackPath = "/api/v1/aggregator/oauth/callback"
)

// Errors of the flows; the REST routes map them to their answers.
var (
	// ErrNotOAuth: the server is not a per_user server with user_credential.oauth.
	ErrNotOAuth = errors.New("the server takes no OAuth authorization")
	// ErrNotProtected: the backend answered without asking for authorization (no 401).
	ErrNotProtected = errors.New("the backend does not ask for OAuth authorization")
	// ErrUnknownFlow: no pending flow of this caller has that state (never started, someone else's, used, expired).
	ErrUnknownFlow = errors.New("no such authorization in progress")
	// ErrNotReturned: the flow is pending but the authorization server has not redirected back yet.
	ErrNotReturned = errors.New("the authorization server has not sent you back yet")
	// ErrTooManyFlows: the caller, or the node, has too many flows pending.
	ErrTooManyFlows = errors.New("too many authorizations in progress")
	// ErrNoRedirect: the daemon does not know the URL browsers reach it at (MCP_AGGREGATOR_CONSOLE_URL).
	ErrNoRedirect = errors.New("the console URL is not known: set MCP_AGGREGATOR_CONSOLE_URL")
	// ErrAuthorization wraps what went wrong with the backend or its authorization server (discovery,
	// registration, the code exchange, the authorization server's own error).
	ErrAuthorization = errors.New("authorization failed")
)

// FlowsConfig configures Flows.
type FlowsConfig struct {
	// Store keeps the grants (an encrypting store: persistence/crypt).
	Store persistence.CredentialStore
	// Outbound is the daemon's outbound policy every OAuth request follows.
	Outbound *backend.Outbound
	// Env resolves ${VAR} references of the servers' connection_config (nil: none resolve).
	Env connconfig.LookupEnv
	// RedirectURL is the callback URL registered at authorization servers: the daemon's CallbackPath as browsers
	// reach it ("" refuses to start flows: ErrNoRedirect).
	RedirectURL string
	// TTL is how long a flow waits (DefaultFlowTTL); MaxFlows bounds the pending ones (DefaultMaxFlows).
	TTL      time.Duration
	MaxFlows int
	// EndSession ends the caller's backend session once a new grant is stored (nil: nothing to end).
	EndSession func(ctx context.Context, serverID, subject string) error
	// Logger (nil: slog.Default()).
	Logger *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Flows runs callers' authorization code flows. A flow is started by its caller (Start: discovery, client
// registration, the authorization URL), returns through the authorization server's redirect to the daemon
// (Callback: the code is kept, nothing exchanged yet), and is completed by the same caller (Complete: the code is
// exchanged with the flow's PKCE verifier and the grant stored as the caller's credential). Splitting the redirect
// from the completion binds the grant to the caller who started the flow even though the redirect itself carries
// no identity: a caller who lures someone else through their authorization URL gets nothing, since only the
// starter can complete it. States are single-use and expire with TTL; flows live on the node that started them.
type Flows struct {
	cfg FlowsConfig
	log *slog.Logger

	mu      sync.Mutex
	pending map[string]*flow // by state
}

type flow struct {
	serverID, serverName, subject string
	expires                       time.Time
	// returned is what the authorization server sent back (Callback); nil until then.
	returned *returned
	// release hands the returned code to the waiting handler (Complete); done answers the exchange's outcome.
	release chan *auth.AuthorizationResult
	done    chan error
	taken   bool
}

type returned struct {
	result *auth.AuthorizationResult
	err    error // the authorization server's error answer
}

// NewFlows returns the flow runner.
func NewFlows(cfg FlowsConfig) *Flows {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultFlowTTL
	}
	if cfg.MaxFlows <= 0 {
		cfg.MaxFlows = DefaultMaxFlows
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Env == nil {
		cfg.Env = func(string) (string, bool) { return "", false }
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Flows{cfg: cfg, log: log, pending: map[string]*flow{}}
}

// Started is a started flow: the URL the caller's browser opens, and until when the flow waits.
type Started struct {
	AuthorizationURL string
	ExpiresAt        time.Time
}

// Start begins subject's flow for srv: it asks the backend (without credentials) for its authorization challenge,
// discovers the authorization server, registers a client (or uses the registration's client_id) and returns the
// authorization URL (PKCE S256, the resource indicator). The flow then waits, off ctx, up to the TTL.
func (f *Flows) Start(ctx context.Context, srv persistence.Server, subject string) (Started, error) {
	slot, endpoint, allowInsecure, err := f.target(srv)
	if err != nil {
		return Started{}, err
	}
	if err := f.room(subject); err != nil {
		return Started{}, err
	}
	client := Client(f.cfg.Outbound, allowInsecure)
	req, res, err := challenge(ctx, client, endpoint)
	if err != nil {
		return Started{}, err
	}
	var captured *Grant
	var fl *flow // the flow await records (the fetcher runs inside Authorize, on the goroutine below)
	urlCh := make(chan Started, 1)
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.cfg.TTL)
	hcfg := &auth.AuthorizationCodeHandlerConfig{
		RedirectURL:         f.cfg.RedirectURL,
		RequestRefreshToken: true,
		Client:              client,
		AuthorizationCodeFetcher: func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
			return f.await(ctx, srv, subject, args.URL, urlCh, &fl)
		},
		NewTokenSource: func(ctx context.Context, c *oauth2.Config, tok *oauth2.Token) (oauth2.TokenSource, error) {
			g := grantFrom(c, tok)
			captured = &g
			return oauth2.StaticTokenSource(tok), nil
		},
	}
	if slot.ClientID != "" {
		hcfg.PreregisteredClient = &oauthex.ClientCredentials{ClientID: slot.ClientID}
	} else {
		hcfg.DynamicClientRegistrationConfig = &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			ClientName: "MCP aggregator", RedirectURIs: []string{f.cfg.RedirectURL}, TokenEndpointAuthMethod: "none",
			GrantTypes: []string{"authorization_code", "refresh_token"}, ResponseTypes: []string{"code"}}}
	}
	if len(slot.Scopes) > 0 {
		scopes := append([]string(nil), slot.Scopes...)
		hcfg.ScopeFilter = func([]string) []string { return scopes }
	}
	h, err := auth.NewAuthorizationCodeHandler(hcfg)
	if err != nil {
		cancel()
		return Started{}, fmt.Errorf("%w: %w", ErrAuthorization, err)
	}
	failed := make(chan error, 1)
	go func() {
		defer cancel()
		err := h.Authorize(fctx, req, res)
		if err == nil && captured == nil {
			err = errors.New("the authorization server issued no token")
		}
		if err == nil {
			err = f.store(fctx, srv, subject, *captured)
		}
		if err != nil {
			err = fmt.Errorf("%w: %w", ErrAuthorization, err)
		}
		select {
		case failed <- err: // before the URL was handed out: Start answers it
		default:
		}
		if fl != nil {
			fl.done <- err // Complete answers it
		}
		if err != nil {
			f.log.Info("backend OAuth flow failed", "server_id", srv.ID, "error", err)
		}
	}()
	select {
	case s := <-urlCh:
		return s, nil
	case err := <-failed:
		if err == nil {
			err = fmt.Errorf("%w: the flow ended before asking the user", ErrAuthorization)
		}
		return Started{}, err
	case <-ctx.Done():
		cancel()
		return Started{}, ctx.Err()
	}
}

// target checks that srv takes OAuth and returns its slot and endpoint.
func (f *Flows) target(srv persistence.Server) (*persistence.OAuthSlot, string, bool, error) {
	if srv.CredentialMode != persistence.CredentialPerUser || srv.UserCredential == nil || srv.UserCredential.OAuth == nil ||
		srv.TransportType != persistence.TransportHTTP {
		return nil, "", false, ErrNotOAuth
	}
	if f.cfg.RedirectURL == "" {
		return nil, "", false, ErrNoRedirect
	}
	cfg, err := connconfig.Resolve(srv.ConnectionConfig, f.cfg.Env)
	if err != nil {
		return nil, "", false, fmt.Errorf("%w: connection_config: %w", ErrAuthorization, err)
	}
	endpoint := cfg.Endpoint(srv.TransportType)
	if endpoint == "" {
		return nil, "", false, fmt.Errorf("%w: connection_config has no endpoint URL", ErrAuthorization)
	}
	return srv.UserCredential.OAuth, endpoint, cfg.AllowInsecureHTTP, nil
}

// room refuses a flow beyond the caller's or the node's bound.
func (f *Flows) room(subject string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.pending) >= f.cfg.MaxFlows {
		return ErrTooManyFlows
	}
	n := 0
	for _, fl := range f.pending {
		if fl.subject == subject {
			n++
		}
	}
	if n >= MaxFlowsPerCaller {
		return ErrTooManyFlows
	}
	return nil
}

// challenge sends the backend an initialize request without credentials and returns it with the answer, which
// must be 401 (the MCP authorization challenge, WWW-Authenticate with resource_metadata) for a flow to start.
func challenge(ctx context.Context, client *http.Client, endpoint string) (*http.Request, *http.Response, error) {
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},` +
		`"clientInfo":{"name":"mcp-aggregator","version":"1"}}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(body))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: the endpoint URL: %w", ErrAuthorization, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	res, err := client.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: reach the backend: %w", ErrAuthorization, err)
	}
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		return nil, nil, fmt.Errorf("%w (it answered %d)", ErrNotProtected, res.StatusCode)
	}
	res.Body = io.NopCloser(bytes.NewReader(raw))
	// The handler finds the protected resource metadata from the challenge and from the request's URL.
	req = req.Clone(context.WithoutCancel(ctx))
	return req, res, nil
}

// await runs in the handler's Authorize: it records the flow under the authorization URL's state, hands the URL to
// Start, and waits for Complete to release the code the authorization server sent back.
func (f *Flows) await(ctx context.Context, srv persistence.Server, subject, authURL string, urlCh chan<- Started, current **flow) (*auth.AuthorizationResult, error) {
	u, err := url.Parse(authURL)
	if err != nil {
		return nil, fmt.Errorf("authorization URL: %w", err)
	}
	// The authorization endpoint came from the authorization server's metadata: a browser opens it, but it must
	// still be a URL a browser may be sent to (https, or http to loopback).
	if p := connconfig.PlainHTTPProblem(authURL, false); p != "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, fmt.Errorf("authorization endpoint refused: %s", p)
	}
	state := u.Query().Get("state")
	if state == "" {
		return nil, errors.New("authorization URL without state")
	}
	fl := &flow{serverID: srv.ID, serverName: srv.Name, subject: subject, expires: f.cfg.Now().Add(f.cfg.TTL),
		release: make(chan *auth.AuthorizationResult, 1), done: make(chan error, 1)}
	*current = fl
	f.mu.Lock()
	f.pending[state] = fl
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		if f.pending[state] == fl {
			delete(f.pending, state)
		}
		f.mu.Unlock()
	}()
	urlCh <- Started{AuthorizationURL: authURL, ExpiresAt: fl.expires}
	select {
	case r := <-fl.release:
		if r == nil {
			return nil, errors.New("the authorization server refused")
		}
		return r, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("no answer from the authorization server in %s", f.cfg.TTL)
	}
}

// store keeps the grant as the caller's credential and ends their session (the next one uses it).
func (f *Flows) store(ctx context.Context, srv persistence.Server, subject string, g Grant) error {
	raw, err := g.Encode()
	if err != nil {
		return err
	}
	if _, _, err := f.cfg.Store.PutUserSecret(ctx, persistence.UserSecret{ServerID: srv.ID, Subject: subject, Secret: raw}); err != nil {
		return fmt.Errorf("store the grant: %w", err)
	}
	if f.cfg.EndSession != nil {
		if err := f.cfg.EndSession(ctx, srv.ID, subject); err != nil {
			f.log.Warn("could not end a per-user session", "server_id", srv.ID, "error", err)
		}
	}
	return nil
}

// Callback records what the authorization server sent back to the redirect URI (the code and iss, or its error)
// for the flow of state. It exchanges nothing: the flow's caller completes it. A state is accepted once.
func (f *Flows) Callback(state, code, iss, errCode, errDescription string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.pending[state]
	if state == "" || strings.Contains(state, " ") || fl == nil || fl.returned != nil || f.cfg.Now().After(fl.expires) {
		return ErrUnknownFlow
	}
	r := &returned{}
	switch {
	case errCode != "":
		msg := errCode
		if errDescription != "" {
			msg += ": " + errDescription
		}
		r.err = fmt.Errorf("%w: the authorization server answered %s", ErrAuthorization, clip(msg, 200))
	case code == "":
		r.err = fmt.Errorf("%w: the authorization server sent no code", ErrAuthorization)
	default:
		r.result = &auth.AuthorizationResult{Code: code, State: state, Iss: iss}
	}
	fl.returned = r
	return nil
}

// Completed is a completed flow: the server it was for.
type Completed struct {
	ServerID, ServerName string
}

// Complete exchanges the code of subject's flow of state and stores the grant. Another caller's state, a used or
// expired one, or an unknown one is ErrUnknownFlow (and leaves the flow to its caller); ErrNotReturned when the
// authorization server has not redirected back yet.
func (f *Flows) Complete(ctx context.Context, subject, state string) (Completed, error) {
	f.mu.Lock()
	fl := f.pending[state]
	if state == "" || strings.Contains(state, " ") || fl == nil || fl.subject != subject || fl.taken || f.cfg.Now().After(fl.expires) {
		f.mu.Unlock()
		return Completed{}, ErrUnknownFlow
	}
	if fl.returned == nil {
		f.mu.Unlock()
		return Completed{}, ErrNotReturned
	}
	fl.taken = true
	delete(f.pending, state)
	r := fl.returned
	f.mu.Unlock()
	out := Completed{ServerID: fl.serverID, ServerName: fl.serverName}
	if r.err != nil {
		fl.release <- nil // ends the handler's wait: the flow fails
		return out, r.err
	}
	fl.release <- r.result
	select {
	case err := <-fl.done:
		return out, err
	case <-ctx.Done():
		return out, fmt.Errorf("%w: the code exchange is still running: %w", ErrAuthorization, ctx.Err())
	}
}

// Pending counts the flows waiting (for tests and metrics).
func (f *Flows) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pending)
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// RedirectURL is the callback URL of a daemon whose console browsers reach at consoleURL (its scheme and host, then
// CallbackPath); "" when consoleURL is "" or not a URL.
func RedirectURL(consoleURL string) string {
	u, err := url.Parse(consoleURL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return ""
	}
	return u.Scheme + "://" + u.Host + CallbackPath
}
