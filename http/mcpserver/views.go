package mcpserver

import (
	"net/http"
	"strings"
	"sync"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/persistence"
)

// ProfilesPrefix is where each profile's MCP endpoint is served: /mcp/profiles/{name}.
const ProfilesPrefix = "/mcp/profiles/"

// MaxViews caps the scoped endpoints Views keeps (one per profile, and one per distinct set of profiles bound
// client tokens have): each holds a go-sdk server with its tool set.
const MaxViews = 256

// Views serves the aggregated endpoint as each caller may see it: the unrestricted endpoint for admins and
// unbound client tokens, and a scoped endpoint (Options.Scope) per profile at /mcp/profiles/{name} and per set of
// profiles a client token is bound to on /mcp itself. A scoped endpoint is a go-sdk server of its own, made on
// first use: its tool set follows the routing table like the main one's, so its clients get
// notifications/tools/list_changed exactly when their profile's tool set changes, and never for another
// profile's change.
type Views struct {
	gw    Gateway
	store persistence.Store
	opts  Options
	main  *Server

	mu     sync.Mutex
	scoped map[string]*scopedView
}

type scopedView struct {
	// ready is closed once the view is made (of): its fields are set then, srv nil if making it failed.
	ready      chan struct{}
	srv        *Server
	streamable http.Handler
	sse        http.Handler
}

// NewViews wraps the main endpoint (built with opts, Scope nil) for serving scoped views beside it.
func NewViews(main *Server, gw Gateway, store persistence.Store, opts Options) *Views {
	opts.Scope = nil
	return &Views{gw: gw, store: store, opts: opts, main: main, scoped: map[string]*scopedView{}}
}

// Close stops every scoped endpoint (not the main one, which its owner closes).
func (v *Views) Close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, sv := range v.scoped {
		<-sv.ready // one being made is closed once made (its maker closes ready before it takes the lock)
		if sv.srv != nil {
			sv.srv.Close()
		}
	}
	v.scoped = map[string]*scopedView{}
}

// of returns the scoped endpoint of sc, making it on first use (nil when MaxViews are already made). It is made
// outside the lock (New applies the routing table before it serves: tens of milliseconds at 10,000 tools), so the
// first request of one view never waits for another view being made; requests for the view being made wait for
// it.
func (v *Views) of(sc routing.Scope) *scopedView {
	key := strings.Join(sc, ",")
	v.mu.Lock()
	sv, ok := v.scoped[key]
	if ok {
		v.mu.Unlock()
		<-sv.ready
		if sv.srv == nil {
			return nil
		}
		return sv
	}
	if len(v.scoped) >= MaxViews {
		v.mu.Unlock()
		return nil
	}
	sv = &scopedView{ready: make(chan struct{})}
	v.scoped[key] = sv
	v.mu.Unlock()
	defer func() {
		// ready first: Close waits for it holding the lock, so the lock is taken only after.
		close(sv.ready)
		if sv.srv == nil { // New panicked (net/http recovers a handler's panic): the next request tries again
			v.mu.Lock()
			if v.scoped[key] == sv {
				delete(v.scoped, key)
			}
			v.mu.Unlock()
		}
	}()
	opts := v.opts
	opts.Scope = sc
	srv := New(v.gw, v.store, opts)
	sv.streamable, sv.sse = srv.StreamableHandler(), srv.SSEHandler()
	sv.srv = srv
	return sv
}

// bound is the profiles the request's caller is bound to (nil: admins, unbound callers, auth off).
func (v *Views) bound(r *http.Request) []string {
	id, ok := auth.FromContext(r.Context())
	if !ok {
		return nil
	}
	return gateway.Bound(v.gw.Routes(), id)
}

// pick serves r with the endpoint its caller may see; profile is the one asked by path ("" on /mcp).
func (v *Views) pick(w http.ResponseWriter, r *http.Request, profile string, main http.Handler, handler func(*scopedView) http.Handler) {
	bound := v.bound(r)
	if profile == "" && bound == nil {
		main.ServeHTTP(w, r)
		return
	}
	sc, err := v.gw.Routes().ScopeFor(profile, bound)
	if err != nil {
		if e := apierror.FromError(err, apierror.Subject{}); e != nil {
			apierror.Write(w, e)
			return
		}
		http.Error(w, "profile refused", http.StatusForbidden)
		return
	}
	sv := v.of(sc)
	if sv == nil {
		apierror.Write(w, &apierror.Error{Status: http.StatusServiceUnavailable, Code: apierror.CodeServiceUnavailable,
			Detail: "Too many profile endpoints are open"})
		return
	}
	handler(sv).ServeHTTP(w, r)
}

// StreamableHandler serves /mcp: the main endpoint, or for a client token bound to profiles the union of them.
func (v *Views) StreamableHandler() http.Handler {
	main := v.main.StreamableHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v.pick(w, r, "", main, func(sv *scopedView) http.Handler { return sv.streamable })
	})
}

// SSEHandler serves /sse like StreamableHandler serves /mcp.
func (v *Views) SSEHandler() http.Handler {
	main := v.main.SSEHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v.pick(w, r, "", main, func(sv *scopedView) http.Handler { return sv.sse })
	})
}

// ProfileHandler serves /mcp/profiles/{name} (streamable HTTP): an unknown profile is 404 PROFILE_NOT_FOUND, a
// profile outside the caller's binding 403.
func (v *Views) ProfileHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, ProfilesPrefix)
		if name == "" || strings.Contains(name, "/") {
			apierror.Write(w, &apierror.Error{Status: http.StatusNotFound, Code: apierror.CodeProfileNotFound, Detail: "Profile not found"})
			return
		}
		v.pick(w, r, name, nil, func(sv *scopedView) http.Handler { return sv.streamable })
	})
}

// SSEProfilesPrefix is where each profile's legacy SSE endpoint is served: /sse/profiles/{name} (the stdio relay
// opens it for `aggregator stdio --profile NAME`).
const SSEProfilesPrefix = "/sse/profiles/"

// ProfileSSEHandler serves /sse/profiles/{name} like ProfileHandler serves /mcp/profiles/{name}.
func (v *Views) ProfileSSEHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, SSEProfilesPrefix)
		if name == "" || strings.Contains(name, "/") {
			apierror.Write(w, &apierror.Error{Status: http.StatusNotFound, Code: apierror.CodeProfileNotFound, Detail: "Profile not found"})
			return
		}
		v.pick(w, r, name, nil, func(sv *scopedView) http.Handler { return sv.sse })
	})
}
