package actors

import (
	"context"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
	"github.com/mcpgw/aggregator/supervision"
)

// TestActorsView: the view lists the node's actors as a tree (a server actor under the placement, with its server's
// id, name and status), counts the router's restarts, reads a mailbox's depth (an actor held busy with messages
// waiting) and says which node owns the server.
func TestActorsView(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(context.Background(), t.TempDir()+"/agg.db")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := DefaultConfig()
	cfg.Restart = supervision.Backoff{Initial: 2 * time.Millisecond, Max: 10 * time.Millisecond, Multiplier: 2}
	sys, err := Start(context.Background(), Deps{Store: st, Config: cfg, Metrics: metrics.New(nil), NodeID: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = sys.Shutdown(ctx)
	}()
	ctx := context.Background()
	srv, err := sys.Register(ctx, RegisterRequest{Name: "hosted", TransportType: persistence.TransportHTTP,
		ConnectionConfig: []byte(`{"base_url":"http://127.0.0.1:1/mcp"}`)})
	if err != nil {
		t.Fatal(err)
	}
	pid, err := sys.activateLocal(ctx, srv.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	// Two router crashes, each restarted.
	for i := range 2 {
		sys.sys.Root.Send(sys.router, &panicForTest{})
		if _, err := sys.askActor(ctx, sys.router, &readyMsg{}, 10*time.Second); err != nil {
			t.Fatalf("router after crash %d: %v", i+1, err)
		}
	}
	// An actor held in its first message, with three more waiting.
	release := make(chan struct{})
	defer close(release)
	busy, err := sys.sys.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
		if _, ok := c.Message().(string); ok {
			<-release
		}
	}), "inspect-busy")
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		sys.sys.Root.Send(busy, "work")
	}

	var v ActorView
	deadline := time.Now().Add(15 * time.Second)
	for {
		if v, err = sys.Actors(ctx); err != nil {
			t.Fatal(err)
		}
		b := find(v.Actors, busy.Id)
		r := find(v.Actors, sys.router.Id)
		sp := placementOf(v, srv.ID)
		if b != nil && b.MailboxDepth != nil && *b.MailboxDepth == 3 && r != nil && r.Restarts == 2 && sp.Owner == "node-a" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the view never showed the busy actor's 3 waiting messages, the router's 2 restarts and the owner: busy %+v, router %+v, server %+v",
				b, r, sp)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if v.Node != "node-a" || v.Cluster {
		t.Errorf("node %q cluster %v, want node-a on a single node", v.Node, v.Cluster)
	}
	pl := find(v.Actors, "placement")
	if pl == nil {
		t.Fatal("no placement actor at the top")
	}
	var sa *ActorInfo
	for i := range pl.Children {
		if pl.Children[i].ID == pid.Id {
			sa = &pl.Children[i]
		}
	}
	if sa == nil {
		t.Fatalf("the server actor %s is not a child of the placement: %+v", pid.Id, pl.Children)
	}
	if sa.Kind != "server" || sa.ServerID != srv.ID || sa.ServerName != "hosted" || sa.MailboxDepth == nil {
		t.Errorf("server actor %+v", *sa)
	}
	switch sa.State {
	case persistence.StatusConnecting, persistence.StatusError, persistence.StatusDisconnected:
	default:
		t.Errorf("server actor state %q, want the server's status", sa.State)
	}
	if sp := placementOf(v, srv.ID); !sp.Local || sp.Actor != pid.Id || sp.Name != "hosted" {
		t.Errorf("placement of the server %+v", sp)
	}
	// The same depth, by server name, for /metrics (mcp_aggregator_server_mailbox_depth).
	if d, ok := sys.Snapshot().Mailboxes["hosted"]; !ok || d < 0 {
		t.Errorf("the snapshot's mailboxes %v lack the hosted server's", sys.Snapshot().Mailboxes)
	}
	for _, kind := range []string{"router", "discovery", "indexer", "registry"} {
		if a := find(v.Actors, kind); a == nil || a.Kind != kind || a.State != "running" {
			t.Errorf("%s: %+v", kind, a)
		}
	}
}

func find(list []ActorInfo, id string) *ActorInfo {
	for i := range list {
		if list[i].ID == id {
			return &list[i]
		}
		if a := find(list[i].Children, id); a != nil {
			return a
		}
	}
	return nil
}

func placementOf(v ActorView, id string) ServerPlacement {
	for _, p := range v.Servers {
		if p.ServerID == id {
			return p
		}
	}
	return ServerPlacement{}
}

func TestActorKindAndServerID(t *testing.T) {
	const id = "0b6f1c2e-8a6d-4c1e-9a53-3d2f4c5b6a7e"
	tests := []struct{ name, kind, server string }{
		{"server-" + id + "-12", "server", id},
		{"proxy-$5", "proxy", ""},
		{"$42", "anonymous", ""},
		{"router", "router", ""},
		{"access-policy", "access-policy", ""},
		{"server-short", "server", ""},
	}
	for _, tc := range tests {
		if got := actorKind(tc.name); got != tc.kind {
			t.Errorf("actorKind(%q) = %q, want %q", tc.name, got, tc.kind)
		}
		if tc.kind == "server" {
			if got := serverIDOf(tc.name); got != tc.server {
				t.Errorf("serverIDOf(%q) = %q, want %q", tc.name, got, tc.server)
			}
		}
	}
}
