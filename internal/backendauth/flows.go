package backendauth

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
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
	// DefaultMaxFlows bounds the flows pending at once in the store (every node together).
	DefaultMaxFlows = 1024
	// MaxFlowsPerCaller bounds one caller's pending flows.
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
	// ErrTooManyFlows: the caller, or the store, has too many flows pending.
	ErrTooManyFlows = errors.New("too many authorizations in progress")
	// ErrNoRedirect: the daemon does not know the URL browsers reach it at (MCP_AGGREGATOR_CONSOLE_URL).
	ErrNoRedirect = errors.New("the console URL is not known: set MCP_AGGREGATOR_CONSOLE_URL")
	// ErrAuthorization wraps what went wrong with the backend or its authorization server (discovery,
	// registration, the code exchange, the authorization server's own error).
	ErrAuthorization = errors.New("authorization failed")
)

// Store is what the flows keep in the store: the callers' grants, the pending flows and the registered clients
// (an encrypting store: persistence/crypt).
type Store interface {
	persistence.CredentialStore
	persistence.OAuthStore
}

// FlowsConfig configures Flows.
type FlowsConfig struct {
	// Store keeps the grants, the pending flows and the registered clients (an encrypting store: persistence/crypt).
	Store Store
	// Outbound is the daemon's outbound policy every OAuth request follows.
	Outbound *backend.Outbound
	// Env resolves ${VAR} references of the servers' connection_config (nil: none resolve).
	Env connconfig.LookupEnv
	// RedirectURL is the callback URL registered at authorization servers: the daemon's CallbackPath as browsers
	// reach it ("" refuses to start flows: ErrNoRedirect). Every node of a cluster has the same.
	RedirectURL string
	// TTL is how long a flow waits (DefaultFlowTTL); MaxFlows bounds the pending ones (DefaultMaxFlows).
	TTL      time.Duration
	MaxFlows int
	// EndSession ends the caller's backend sessions once a completed flow's grant is stored (nil: nothing to end);
	// an exchange's grant ends none (store).
	EndSession func(ctx context.Context, serverID, subject string) error
	// Logger (nil: slog.Default()).
	Logger *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Flows runs callers' authorization code flows. A flow is started by its caller (Start: discovery, the client,
// the authorization URL with PKCE), returns through the authorization server's redirect to the daemon (Callback:
// the code is kept, nothing exchanged yet), and is completed by the same caller (Complete: the code is exchanged
// with the flow's PKCE verifier and the grant stored as the caller's credential). Splitting the redirect from the
// completion binds the grant to the caller who started the flow even though the redirect itself carries no
// identity: a caller who lures someone else through their authorization URL gets nothing, since only the starter
// can complete it. A flow lives in the store (its verifier and code sealed), so each step may be served by any
// node; its state is returned once and taken once, and the flow expires with TTL. The client the aggregator
// registers dynamically at an authorization server is kept per (server, authorization server) and reused.
type Flows struct {
	cfg FlowsConfig
	log *slog.Logger
}

// flowData is a pending flow's private part, sealed in the store: what the completion needs to exchange the code.
type flowData struct {
	ServerName    string           `json:"server_name"`
	Verifier      string           `json:"verifier"`
	ClientID      string           `json:"client_id"`
	ClientSecret  string           `json:"client_secret,omitempty"`
	AuthStyle     oauth2.AuthStyle `json:"auth_style,omitempty"`
	Registered    bool             `json:"registered,omitempty"` // the client is the stored dynamic registration
	TokenURL      string           `json:"token_url"`
	RevocationURL string           `json:"revocation_url,omitempty"`
	Issuer        string           `json:"issuer"`
	IssSupported  bool             `json:"iss_supported,omitempty"`
	Resource      string           `json:"resource"`
	Scopes        []string         `json:"scopes,omitempty"`
	RedirectURL   string           `json:"redirect_url"`
	AllowInsecure bool             `json:"allow_insecure,omitempty"`
}

// registration is a stored dynamically registered client (persistence.OAuthClient's data, sealed).
type registration struct {
	ClientID     string           `json:"client_id"`
	ClientSecret string           `json:"client_secret,omitempty"`
	AuthStyle    oauth2.AuthStyle `json:"auth_style,omitempty"`
	// Exchange: the client was registered with the token exchange grant.
	Exchange bool `json:"token_exchange,omitempty"`
	// RedirectURIs are the redirect URIs the client was registered with: the daemons' of a cluster whose console
	// URLs differ (MCP_AGGREGATOR_CONSOLE_URL per node), at most MaxRedirectURIs. A client stored before they were
	// recorded has none: it was registered with its row's RedirectURL alone.
	RedirectURIs []string `json:"redirect_uris,omitempty"`
}

// MaxRedirectURIs bounds the redirect URIs one registered client lists (the most recent daemons' kept).
const MaxRedirectURIs = 16

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
	return &Flows{cfg: cfg, log: log}
}

// Started is a started flow: the URL the caller's browser opens, and until when the flow waits.
type Started struct {
	AuthorizationURL string
	ExpiresAt        time.Time
}

// Start begins subject's flow for srv: it asks the backend (without credentials) for its authorization challenge,
// discovers the protected resource and authorization server metadata, takes the registration's client_id, the
// client registered before for this server and authorization server, or registers one (RFC 7591), stores the flow
// and returns the authorization URL (PKCE S256, the resource indicator).
func (f *Flows) Start(ctx context.Context, srv persistence.Server, subject string) (Started, error) {
	d, err := f.discover(ctx, srv)
	if err != nil {
		return Started{}, err
	}
	// The authorization endpoint comes from the authorization server's metadata: a browser opens it, but it must
	// still be a URL a browser may be sent to (https, or http to loopback).
	if p := connconfig.PlainHTTPProblem(d.asm.AuthorizationEndpoint, false); p != "" || !httpURL(d.asm.AuthorizationEndpoint) {
		return Started{}, fmt.Errorf("%w: authorization endpoint refused: %s", ErrAuthorization, p)
	}
	data := flowData{ServerName: srv.Name, Verifier: oauth2.GenerateVerifier(), TokenURL: d.asm.TokenEndpoint,
		RevocationURL: d.asm.RevocationEndpoint, Issuer: d.asm.Issuer, IssSupported: d.asm.AuthorizationResponseIssParameterSupported,
		Resource: d.prm.Resource, RedirectURL: f.cfg.RedirectURL, AllowInsecure: d.allowInsecure}
	if err := f.client(ctx, d, srv, &data); err != nil {
		return Started{}, err
	}
	data.Scopes = scopes(d.slot, d.challenges, d.prm, d.asm)
	state := rand.Text()
	cfg := oauth2.Config{ClientID: data.ClientID, RedirectURL: data.RedirectURL, Scopes: data.Scopes,
		Endpoint: oauth2.Endpoint{AuthURL: d.asm.AuthorizationEndpoint, TokenURL: d.asm.TokenEndpoint}}
	authURL := cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(data.Verifier), oauth2.SetAuthURLParam("resource", data.Resource))
	raw, err := json.Marshal(data)
	if err != nil {
		return Started{}, err
	}
	now := f.cfg.Now()
	expires := now.Add(f.cfg.TTL)
	err = f.cfg.Store.CreateOAuthFlow(ctx, persistence.OAuthFlow{State: state, ServerID: srv.ID, Subject: subject,
		Data: raw, ExpiresAt: expires}, MaxFlowsPerCaller, f.cfg.MaxFlows, now)
	if errors.Is(err, persistence.ErrOAuthFlowLimit) {
		return Started{}, ErrTooManyFlows
	}
	if err != nil {
		return Started{}, fmt.Errorf("store the flow: %w", err)
	}
	return Started{AuthorizationURL: authURL, ExpiresAt: expires}, nil
}

// discovery is what a flow or an exchange learns about a server's backend before asking its authorization server.
type discovery struct {
	slot          *persistence.OAuthSlot
	client        *http.Client
	allowInsecure bool
	challenges    []oauthex.Challenge
	prm           *oauthex.ProtectedResourceMetadata
	asm           *oauthex.AuthServerMeta
}

// discover asks the backend (without credentials) for its authorization challenge, then discovers the protected
// resource metadata and the authorization server metadata.
func (f *Flows) discover(ctx context.Context, srv persistence.Server) (*discovery, error) {
	slot, endpoint, allowInsecure, err := f.target(srv)
	if err != nil {
		return nil, err
	}
	d := &discovery{slot: slot, allowInsecure: allowInsecure, client: Client(f.cfg.Outbound, allowInsecure)}
	if d.challenges, err = challenge(ctx, d.client, endpoint); err != nil {
		return nil, err
	}
	if d.prm, err = resourceMetadata(ctx, d.client, d.challenges, endpoint); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAuthorization, err)
	}
	if d.asm, err = auth.GetAuthServerMetadata(ctx, d.prm.AuthorizationServers[0], d.client); err != nil {
		return nil, fmt.Errorf("%w: authorization server metadata: %w", ErrAuthorization, err)
	}
	if d.asm == nil { // the 2025-03-26 fallback: the endpoints at their default paths
		as := strings.TrimRight(d.prm.AuthorizationServers[0], "/")
		d.asm = &oauthex.AuthServerMeta{Issuer: d.prm.AuthorizationServers[0], AuthorizationEndpoint: as + "/authorize",
			TokenEndpoint: as + "/token", RegistrationEndpoint: as + "/register"}
	}
	return d, nil
}

// exchanges reports whether the server's flows may exchange callers' tokens at this authorization server: the
// registration opts in and the authorization server offers the grant.
func (d *discovery) exchanges() bool {
	return d.slot.TokenExchange && slices.Contains(d.asm.GrantTypesSupported, oauthex.GrantTypeTokenExchange)
}

func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != ""
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

// challenge sends the backend an initialize request without credentials; its answer must be 401 (the MCP
// authorization challenge, WWW-Authenticate with resource_metadata) for a flow to start. It returns the challenges.
func challenge(ctx context.Context, client *http.Client, endpoint string) ([]oauthex.Challenge, error) {
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},` +
		`"clientInfo":{"name":"mcp-aggregator","version":"1"}}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: the endpoint URL: %w", ErrAuthorization, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	res, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: reach the backend: %w", ErrAuthorization, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		return nil, fmt.Errorf("%w (it answered %d)", ErrNotProtected, res.StatusCode)
	}
	cs, err := oauthex.ParseWWWAuthenticate(res.Header.Values("WWW-Authenticate"))
	if err != nil {
		return nil, fmt.Errorf("%w: the backend's WWW-Authenticate: %w", ErrAuthorization, err)
	}
	return cs, nil
}

// challengeParam is the first Bearer challenge's parameter name ("" none).
func challengeParam(cs []oauthex.Challenge, name string) string {
	for _, c := range cs {
		if strings.EqualFold(c.Scheme, "bearer") && c.Params[name] != "" {
			return c.Params[name]
		}
	}
	return ""
}

// resourceMetadata discovers the backend's protected resource metadata (RFC 9728) where MCP authorization says to
// look: the challenge's resource_metadata, then the well-known URL at the endpoint's path, then at the root; a
// backend without any is its own authorization server (the 2025-03-26 fallback).
func resourceMetadata(ctx context.Context, client *http.Client, cs []oauthex.Challenge, endpoint string) (*oauthex.ProtectedResourceMetadata, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("the endpoint URL: %w", err)
	}
	type candidate struct{ metadata, resource string }
	var candidates []candidate
	if m := challengeParam(cs, "resource_metadata"); m != "" {
		candidates = append(candidates, candidate{m, endpoint})
	}
	at := *u
	at.RawQuery, at.Fragment = "", ""
	at.Path = "/.well-known/oauth-protected-resource/" + strings.TrimLeft(u.Path, "/")
	candidates = append(candidates, candidate{at.String(), endpoint})
	root, origin := at, *u
	root.Path = "/.well-known/oauth-protected-resource"
	origin.Path, origin.RawQuery, origin.Fragment = "", "", ""
	candidates = append(candidates, candidate{root.String(), origin.String()})
	for _, c := range candidates {
		prm, err := oauthex.GetProtectedResourceMetadata(ctx, c.metadata, c.resource, client)
		if err != nil || prm == nil {
			continue
		}
		if len(prm.AuthorizationServers) == 0 {
			return nil, errors.New("the protected resource metadata names no authorization server")
		}
		return prm, nil
	}
	return &oauthex.ProtectedResourceMetadata{AuthorizationServers: []string{origin.String()}, Resource: endpoint}, nil
}

// scopes are the scopes a flow asks for: the registration's, else the challenge's, else the resource metadata's;
// with offline_access when the authorization server has it (a refresh token).
func scopes(slot *persistence.OAuthSlot, cs []oauthex.Challenge, prm *oauthex.ProtectedResourceMetadata, asm *oauthex.AuthServerMeta) []string {
	var out []string
	switch {
	case len(slot.Scopes) > 0:
		out = append(out, slot.Scopes...)
	case challengeParam(cs, "scope") != "":
		out = strings.Fields(challengeParam(cs, "scope"))
	default:
		out = append(out, prm.ScopesSupported...)
	}
	if slices.Contains(asm.ScopesSupported, "offline_access") && !slices.Contains(out, "offline_access") {
		out = append(out, "offline_access")
	}
	return out
}

// client sets data's client: the registration's pre-registered public client, else the client registered before
// for (server, authorization server) whose redirect URIs include this daemon's, else a new dynamic registration,
// stored for the next flows. Decision (per-node console URLs): one client per (server, authorization server),
// registered with every redirect URI the daemons sharing the store have used: a daemon whose redirect URI the
// stored client lacks registers a new one listing the stored client's URIs and its own (the most recent
// MaxRedirectURIs), which replaces it, so the nodes of a cluster converge on one client after one flow each rather
// than registering again whenever flows alternate between them. A replaced client is not deleted at the
// authorization server (RFC 7591 gives no way): the grants and flows issued to it keep its client id and keep
// working.
func (f *Flows) client(ctx context.Context, d *discovery, srv persistence.Server, data *flowData) error {
	slot, asm, hc := d.slot, d.asm, d.client
	if slot.ClientID != "" {
		data.ClientID, data.AuthStyle = slot.ClientID, oauth2.AuthStyleInParams // public: client_id in the body
		return nil
	}
	var prior []string // the redirect URIs of the client this registration replaces
	stored, err := f.cfg.Store.GetOAuthClient(ctx, srv.ID, asm.Issuer)
	switch {
	case err == nil:
		var r registration
		if err := json.Unmarshal(stored.Data, &r); err != nil || r.ClientID == "" {
			f.log.Warn("a stored OAuth client is unreadable: registering a new one", "server_id", srv.ID)
			break
		}
		uris := r.RedirectURIs
		if len(uris) == 0 {
			uris = []string{stored.RedirectURL}
		}
		if slices.Contains(uris, f.cfg.RedirectURL) && (r.Exchange || !d.exchanges()) {
			data.ClientID, data.ClientSecret, data.AuthStyle, data.Registered = r.ClientID, r.ClientSecret, r.AuthStyle, true
			return nil
		}
		prior = uris
	case !errors.Is(err, persistence.ErrNotFound):
		// Unreadable (a key no longer configured) or the store failing: register anew; storing it may fail too.
		f.log.Warn("could not read the stored OAuth client: registering a new one", "server_id", srv.ID, "error", err)
	}
	if asm.RegistrationEndpoint == "" {
		return fmt.Errorf("%w: the authorization server offers no dynamic client registration: set user_credential.oauth.client_id", ErrAuthorization)
	}
	uris := redirectURIs(prior, f.cfg.RedirectURL)
	grants := []string{"authorization_code", "refresh_token"}
	if d.exchanges() {
		grants = append(grants, oauthex.GrantTypeTokenExchange)
	}
	res, err := oauthex.RegisterClient(ctx, asm.RegistrationEndpoint, &oauthex.ClientRegistrationMetadata{
		ClientName: "MCP aggregator", RedirectURIs: uris, TokenEndpointAuthMethod: "none",
		GrantTypes: grants, ResponseTypes: []string{"code"}, ApplicationType: applicationType(uris)}, hc)
	if err != nil {
		return fmt.Errorf("%w: register a client: %w", ErrAuthorization, err)
	}
	r := registration{ClientID: res.ClientID, ClientSecret: res.ClientSecret, AuthStyle: authStyle(res.TokenEndpointAuthMethod),
		Exchange: d.exchanges(), RedirectURIs: uris}
	data.ClientID, data.ClientSecret, data.AuthStyle, data.Registered = r.ClientID, r.ClientSecret, r.AuthStyle, true
	raw, err := json.Marshal(r)
	if err == nil {
		err = f.cfg.Store.PutOAuthClient(ctx, persistence.OAuthClient{ServerID: srv.ID, Issuer: asm.Issuer,
			RedirectURL: f.cfg.RedirectURL, Data: raw})
	}
	if err != nil {
		// This flow goes on with the new client; the next one registers again.
		f.log.Warn("could not store the registered OAuth client", "server_id", srv.ID, "error", err)
	}
	f.log.Info("registered an OAuth client at the backend's authorization server", "server_id", srv.ID, "issuer", asm.Issuer)
	return nil
}

// redirectURIs is prior (a stored client's redirect URIs) with own added last, the most recent MaxRedirectURIs
// kept.
func redirectURIs(prior []string, own string) []string {
	out := make([]string, 0, len(prior)+1)
	for _, u := range prior {
		if u != "" && u != own && !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	out = append(out, own)
	if len(out) > MaxRedirectURIs {
		out = out[len(out)-MaxRedirectURIs:]
	}
	return out
}

// applicationType is RFC 7591's application_type of a client redirected to redirects: native when all are
// loopback.
func applicationType(redirects []string) string {
	for _, r := range redirects {
		u, err := url.Parse(r)
		if err != nil || !(u.Hostname() == "localhost" || strings.HasPrefix(u.Hostname(), "127.") || u.Hostname() == "::1") {
			return "web"
		}
	}
	return "native"
}

// authStyle is how the client authenticates at the token endpoint, from its registered method.
func authStyle(method string) oauth2.AuthStyle {
	switch method {
	case "client_secret_basic":
		return oauth2.AuthStyleInHeader
	case "", "none", "client_secret_post":
		return oauth2.AuthStyleInParams
	}
	return oauth2.AuthStyleAutoDetect
}

// Callback records what the authorization server sent back to the redirect URI (the code and iss, or its error)
// for the flow of state. It exchanges nothing: the flow's caller completes it. A state is accepted once.
func (f *Flows) Callback(ctx context.Context, state, code, iss, errCode, errDescription string) error {
	if !validState(state) {
		return ErrUnknownFlow
	}
	var codeJSON []byte
	errText := ""
	switch {
	case errCode != "":
		errText = errCode
		if errDescription != "" {
			errText += ": " + errDescription
		}
		errText = clip(errText, 200)
	case code == "":
		errText = "the authorization server sent no code"
	default:
		codeJSON, _ = json.Marshal(code)
	}
	if len(iss) > persistence.MaxOAuthIssuerBytes {
		iss = ""
	}
	err := f.cfg.Store.ReturnOAuthFlow(ctx, state, codeJSON, iss, errText, f.cfg.Now())
	if errors.Is(err, persistence.ErrNotFound) {
		return ErrUnknownFlow
	}
	return err
}

func validState(state string) bool {
	return state != "" && len(state) <= persistence.MaxOAuthStateBytes && !strings.ContainsAny(state, " \t\r\n")
}

// Completed is a completed flow: the server it was for.
type Completed struct {
	ServerID, ServerName string
}

// Complete exchanges the code of subject's flow of state and stores the grant. Another caller's state, a used or
// expired one, or an unknown one is ErrUnknownFlow (and leaves the flow to its caller); ErrNotReturned when the
// authorization server has not redirected back yet.
func (f *Flows) Complete(ctx context.Context, subject, state string) (Completed, error) {
	if !validState(state) {
		return Completed{}, ErrUnknownFlow
	}
	fl, err := f.cfg.Store.TakeOAuthFlow(ctx, state, subject, f.cfg.Now())
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		return Completed{}, ErrUnknownFlow
	case errors.Is(err, persistence.ErrOAuthFlowPending):
		return Completed{}, ErrNotReturned
	case err != nil:
		return Completed{}, fmt.Errorf("read the flow: %w", err)
	}
	var data flowData
	if err := json.Unmarshal(fl.Data, &data); err != nil {
		return Completed{}, fmt.Errorf("%w: the stored flow is unreadable", ErrAuthorization)
	}
	out := Completed{ServerID: fl.ServerID, ServerName: data.ServerName}
	if fl.Error != "" {
		return out, fmt.Errorf("%w: the authorization server answered %s", ErrAuthorization, fl.Error)
	}
	var code string
	if err := json.Unmarshal(fl.Code, &code); err != nil || code == "" {
		return out, fmt.Errorf("%w: the authorization server sent no code", ErrAuthorization)
	}
	if err := checkIssuer(fl.Iss, data.Issuer, data.IssSupported); err != nil {
		return out, fmt.Errorf("%w: %w", ErrAuthorization, err)
	}
	cfg := &oauth2.Config{ClientID: data.ClientID, ClientSecret: data.ClientSecret, RedirectURL: data.RedirectURL,
		Scopes: data.Scopes, Endpoint: oauth2.Endpoint{TokenURL: data.TokenURL, AuthStyle: data.AuthStyle}}
	xctx := context.WithValue(ctx, oauth2.HTTPClient, Client(f.cfg.Outbound, data.AllowInsecure))
	tok, err := cfg.Exchange(xctx, code, oauth2.VerifierOption(data.Verifier), oauth2.SetAuthURLParam("resource", data.Resource))
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.ErrorCode == "invalid_client" && data.Registered {
			// The authorization server no longer knows the stored client: the next flow registers a new one.
			if derr := f.cfg.Store.DeleteOAuthClient(ctx, fl.ServerID, data.Issuer); derr != nil && !errors.Is(derr, persistence.ErrNotFound) {
				f.log.Warn("could not forget a refused OAuth client", "server_id", fl.ServerID, "error", derr)
			}
		}
		return out, fmt.Errorf("%w: the code exchange: %w", ErrAuthorization, scrubExchange(err))
	}
	g := grantFrom(cfg, tok)
	g.RevocationURL = data.RevocationURL
	if err := f.store(ctx, fl.ServerID, subject, g, true); err != nil {
		return out, fmt.Errorf("%w: %w", ErrAuthorization, err)
	}
	return out, nil
}

// scrubExchange is the code exchange's error without the response body (which may echo what was sent).
func scrubExchange(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		if re.ErrorCode != "" {
			return fmt.Errorf("the authorization server answered %d %s", re.Response.StatusCode, clip(re.ErrorCode, 100))
		}
		return fmt.Errorf("the authorization server answered %d", re.Response.StatusCode)
	}
	return err
}

// checkIssuer checks the iss parameter of the authorization response (RFC 9207): required and equal to the
// issuer when the authorization server advertises it; when it does not, an iss that is present is refused.
func checkIssuer(iss, issuer string, supported bool) error {
	switch {
	case supported && iss == "":
		return errors.New("the authorization response has no iss although the authorization server advertises it")
	case iss != "" && iss != issuer:
		return fmt.Errorf("the authorization response's issuer %q is not %q", clip(iss, 200), issuer)
	case iss != "" && !supported:
		return errors.New("the authorization response has an iss the authorization server does not advertise")
	}
	return nil
}

// store keeps the grant as the caller's credential; with end, it ends their sessions too (the next ones use it).
// A completed flow ends them: it may authorize another account of the backend. An exchange does not: it renews
// the caller's own token for the same subject, as a refresh does, and their sessions take it from the store
// (SessionHandler), so that a session of the per-server endpoint, whose client would otherwise have to start a new
// one, goes on.
func (f *Flows) store(ctx context.Context, serverID, subject string, g Grant, end bool) error {
	raw, err := g.Encode()
	if err != nil {
		return err
	}
	if _, _, err := f.cfg.Store.PutUserSecret(ctx, persistence.UserSecret{ServerID: serverID, Subject: subject, Secret: raw}); err != nil {
		return fmt.Errorf("store the grant: %w", err)
	}
	if end && f.cfg.EndSession != nil {
		if err := f.cfg.EndSession(ctx, serverID, subject); err != nil {
			f.log.Warn("could not end a per-user session", "server_id", serverID, "error", err)
		}
	}
	return nil
}

// Pending counts the flows waiting in the store (for tests and metrics).
func (f *Flows) Pending(ctx context.Context) (int, error) {
	return f.cfg.Store.CountOAuthFlows(ctx, f.cfg.Now())
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
