package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/http/auth"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// fakeActors is the actor system as the gateway sees it: a fixed routing table and a recorded Call.
type fakeActors struct {
	rt    *routing.RouteTable
	calls []routing.Route
	args  []string
	reply *pb.CallToolReply
	err   error
}

func (f *fakeActors) Routes() *routing.RouteTable { return f.rt }
func (f *fakeActors) Call(_ context.Context, r routing.Route, args []byte, _ func(*pb.Progress)) (*pb.CallToolReply, error) {
	f.calls = append(f.calls, r)
	f.args = append(f.args, string(args))
	return f.reply, f.err
}
func (f *fakeActors) Register(context.Context, gateway.RegisterRequest) (persistence.Server, error) {
	return persistence.Server{}, errors.New("not used")
}
func (f *fakeActors) RegisterKeyed(context.Context, gateway.RegisterRequest, persistence.IdempotencyKey) (persistence.Server, bool, error) {
	return persistence.Server{}, false, errors.New("not used")
}
func (f *fakeActors) Search(context.Context, gateway.SearchRequest) (gateway.SearchResponse, error) {
	return gateway.SearchResponse{}, errors.New("not used")
}

// policyFunc adapts a function to gateway.Policy.
type policyFunc func(ctx context.Context, caller auth.Identity, route routing.Route) error

func (f policyFunc) AllowCall(ctx context.Context, c gateway.PolicyCall) error {
	return f(ctx, c.Caller, c.Route)
}

func newFake() *fakeActors {
	servers := []routing.ServerEntry{
		{ID: "id-a", Name: "alpha", Status: persistence.StatusConnected},
		{ID: "id-b", Name: "beta", Status: persistence.StatusDegraded},
	}
	tools := []persistence.Tool{
		{ID: 1, Name: "alpha.echo", OriginalName: "echo", SourceServerID: "id-a"},
		{ID: 2, Name: "alpha.shared", OriginalName: "shared", SourceServerID: "id-a"},
		{ID: 3, Name: "beta.shared", OriginalName: "shared", SourceServerID: "id-b"},
	}
	return &fakeActors{rt: routing.NewRouteTable(servers, tools, "__"),
		reply: &pb.CallToolReply{ResultJson: []byte(`{"content":[]}`)}}
}

// Call resolves, asks the policy, then the actor; whatever fails first stops the call before the actor is asked.
func TestCallOrder(t *testing.T) {
	deny := policyFunc(func(_ context.Context, caller auth.Identity, route routing.Route) error {
		if caller.Name == "mallory" && route.ServerName == "alpha" {
			return gateway.ErrDenied
		}
		return nil
	})
	tests := []struct {
		name    string
		req     gateway.CallRequest
		reply   *pb.CallToolReply
		askErr  error
		check   func(t *testing.T, err error)
		called  string // the route asked, "" none
		argsOut string
	}{
		{name: "namespaced name", req: gateway.CallRequest{Name: "alpha.echo", Arguments: json.RawMessage(`{"x":1}`)},
			called: "alpha.echo", argsOut: `{"x":1}`, check: noError},
		{name: "null arguments are an empty object", req: gateway.CallRequest{Name: "alpha__echo", Arguments: json.RawMessage(`null`)},
			called: "alpha.echo", argsOut: `{}`, check: noError},
		{name: "ambiguous original name", req: gateway.CallRequest{Name: "shared"}, check: func(t *testing.T, err error) {
			var re *gateway.RouteError
			var amb *routing.AmbiguousToolError
			if !errors.As(err, &re) || !errors.As(err, &amb) {
				t.Fatalf("err = %v, want a RouteError of an ambiguous name", err)
			}
			if got := re.Candidates(); len(got) != 2 {
				t.Fatalf("candidates = %q, want both aliases", got)
			}
		}},
		{name: "server id picks one", req: gateway.CallRequest{Name: "shared", ServerID: "id-b"}, called: "beta.shared", argsOut: `{}`, check: noError},
		{name: "unknown tool", req: gateway.CallRequest{Name: "alpha.nope"}, check: func(t *testing.T, err error) {
			var re *gateway.RouteError
			if !errors.As(err, &re) || !errors.Is(err, routing.ErrToolNotFound) {
				t.Fatalf("err = %v, want a RouteError of ErrToolNotFound", err)
			}
		}},
		{name: "unknown profile", req: gateway.CallRequest{Name: "alpha.echo", Profile: "nope"}, check: func(t *testing.T, err error) {
			if !errors.Is(err, routing.ErrProfileNotFound) {
				t.Fatalf("err = %v, want ErrProfileNotFound", err)
			}
		}},
		{name: "outside the caller's scope", req: gateway.CallRequest{Name: "alpha.echo", Within: routing.Scope{"none"}}, check: func(t *testing.T, err error) {
			if !errors.Is(err, routing.ErrToolNotFound) {
				t.Fatalf("err = %v, want ErrToolNotFound", err)
			}
		}},
		{name: "policy refuses", req: gateway.CallRequest{Name: "alpha.echo", Caller: auth.Identity{Name: "mallory"}}, check: func(t *testing.T, err error) {
			if !errors.Is(err, gateway.ErrDenied) {
				t.Fatalf("err = %v, want ErrDenied", err)
			}
		}},
		{name: "policy allows another server", req: gateway.CallRequest{Name: "beta.shared", Caller: auth.Identity{Name: "mallory"}},
			called: "beta.shared", argsOut: `{}`, check: noError},
		{name: "actor reports an error", req: gateway.CallRequest{Name: "alpha.echo"}, called: "alpha.echo", argsOut: `{}`,
			reply: &pb.CallToolReply{Error: &pb.ErrorInfo{Code: errcode.ServerBusy, Message: "busy"}}, check: func(t *testing.T, err error) {
				var ce *gateway.CallError
				if !errors.As(err, &ce) || ce.Info.GetCode() != errcode.ServerBusy || ce.Call.Route.Name != "alpha.echo" {
					t.Fatalf("err = %v, want a CallError SERVER_BUSY of alpha.echo", err)
				}
			}},
		{name: "asking the actor fails", req: gateway.CallRequest{Name: "alpha.echo"}, called: "alpha.echo", argsOut: `{}`,
			askErr: gateway.ErrAskTimeout, check: func(t *testing.T, err error) {
				var ce *gateway.CallError
				if !errors.As(err, &ce) || !errors.Is(err, gateway.ErrAskTimeout) {
					t.Fatalf("err = %v, want a CallError wrapping ErrAskTimeout", err)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			if tt.reply != nil {
				f.reply = tt.reply
			}
			f.err = tt.askErr
			g := gateway.New(f, gateway.Options{Policy: deny})
			res, err := g.Call(context.Background(), tt.req)
			tt.check(t, err)
			switch {
			case tt.called == "" && len(f.calls) > 0:
				t.Fatalf("the actor was asked %v", f.calls)
			case tt.called != "" && (len(f.calls) != 1 || f.calls[0].Name != tt.called || f.args[0] != tt.argsOut):
				t.Fatalf("the actor was asked %v with %q, want %s with %s", f.calls, f.args, tt.called, tt.argsOut)
			}
			if err == nil && (res.Call.Route.Name != tt.called || res.Call.Asked != tt.req.Name || res.Call.Done.Before(res.Call.Routed)) {
				t.Fatalf("call = %+v", res.Call)
			}
		})
	}
}

func noError(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A call that asks for the go-sdk object from actors that only answer JSON gets the JSON decoded.
func TestCallObjectFromJSON(t *testing.T) {
	f := newFake()
	f.reply = &pb.CallToolReply{ResultJson: []byte(`{"content":[{"type":"text","text":"hi"}],"isError":true}`)}
	res, err := gateway.New(f, gateway.Options{}).Call(context.Background(), gateway.CallRequest{Name: "beta.shared", Object: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Object == nil || !res.Object.IsError || len(res.Object.Content) != 1 {
		t.Fatalf("object = %+v", res.Object)
	}
	if meta := res.Call.Metadata(); meta["routed_to"] != "beta" || meta["warning"] == nil {
		t.Fatalf("metadata = %v, want beta with the DEGRADED warning", meta)
	}
}

// Bound restricts a client token to its profiles, never an admin or anyone while auth is off.
func TestBound(t *testing.T) {
	rt := newFake().rt
	for _, id := range []auth.Identity{auth.Anonymous("127.0.0.1"), {Name: "root", Scope: auth.ScopeAdmin}, {Name: "unbound", Scope: auth.ScopeClient}} {
		if sc := gateway.Bound(rt, id); sc != nil {
			t.Errorf("Bound(%+v) = %q, want nil", id, sc)
		}
	}
}

// The use-case layer costs a call no allocation of its own: Call allocates what resolving the name and asking the
// actor allocate, nothing more (the call path's speed is measured in BENCHMARKS.md; this keeps the layer free).
func TestCallAllocatesNothingOfItsOwn(t *testing.T) {
	f := &fixedActors{rt: newFake().rt, reply: &pb.CallToolReply{ResultJson: []byte(`{"content":[]}`)}}
	g := gateway.New(f, gateway.Options{})
	ctx := context.Background()
	req := gateway.CallRequest{Name: "alpha__echo", Arguments: json.RawMessage(`{"x":1}`)}
	direct := testing.AllocsPerRun(200, func() {
		route, err := f.rt.ResolveIn(nil, req.Name, "")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.Call(ctx, route, req.Arguments, nil)
	})
	through := testing.AllocsPerRun(200, func() {
		if _, err := g.Call(ctx, req); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("allocations per call: %.0f through the gateway, %.0f directly", through, direct)
	if through > direct {
		t.Fatalf("Call allocates %.0f times, resolving and asking the actor directly %.0f", through, direct)
	}
}

// fixedActors answers every call with one reply and records nothing (so that it allocates nothing itself).
type fixedActors struct {
	fakeActors
	rt    *routing.RouteTable
	reply *pb.CallToolReply
}

func (f *fixedActors) Routes() *routing.RouteTable { return f.rt }
func (f *fixedActors) Call(context.Context, routing.Route, []byte, func(*pb.Progress)) (*pb.CallToolReply, error) {
	return f.reply, nil
}

// TestMetadataJSON: the metadata written by hand is what encoding/json makes of Metadata, byte for byte, for names
// that need escaping, a DEGRADED server's warning and times from zero to hours.
func TestMetadataJSON(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		route         routing.Route
		routed, total time.Duration
	}{
		{routing.Route{ServerName: "alpha", ServerID: "01a2", Name: "alpha.echo", Strategy: routing.StrategyAlias}, 0, 0},
		{routing.Route{ServerName: "b<e>&\"t\\a", ServerID: "x\u2028y", Name: "é.ü\n", Strategy: routing.StrategyNamespaceResolved,
			ServerStatus: persistence.StatusDegraded}, 1234567 * time.Nanosecond, 3*time.Hour + 7*time.Microsecond},
		{routing.Route{ServerName: "s", ServerStatus: persistence.StatusConnected}, time.Microsecond, 2 * time.Microsecond},
		{routing.Route{ServerName: "s"}, 999 * time.Nanosecond, 123456789 * time.Second},
	} {
		c := gateway.Call{Route: tc.route, Start: t0, Routed: t0.Add(tc.routed), Done: t0.Add(tc.total)}
		want, err := json.Marshal(c.Metadata())
		if err != nil {
			t.Fatal(err)
		}
		if got := c.MetadataJSON(); string(got) != string(want) {
			t.Errorf("MetadataJSON = %s\nwant %s", got, want)
		}
	}
}
