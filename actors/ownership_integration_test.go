package actors_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/internal/errcode"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/pgtest"
	"github.com/mcpgw/aggregator/persistence/postgres"
	"github.com/mcpgw/aggregator/persistence/sqlite"
)

// ownershipStores are the two stores two processes can share: PostgreSQL, and the embedded file (two processes on
// one host, e.g. `serve` and `aggregator stdio`).
func ownershipStores(t *testing.T) map[string]func(t *testing.T) (persistence.Store, persistence.Store) {
	return map[string]func(t *testing.T) (persistence.Store, persistence.Store){
		"sqlite": func(t *testing.T) (persistence.Store, persistence.Store) {
			path := t.TempDir() + "/agg.db"
			a, err := sqlite.Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			b, err := sqlite.Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			return a, b
		},
		"postgres": func(t *testing.T) (persistence.Store, persistence.Store) {
			url := pgtest.NewDatabase(t)
			a, err := postgres.Open(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			b, err := postgres.Open(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			return a, b
		},
	}
}

// ownershipConfig has a short lease so that a takeover is quick to test: 2 s, not shorter, because a renewal must
// finish within a third of it, and under -race on a loaded two-core CI machine the embedded store's one writer
// (discovery storing tools, pins and prompts of freshly connected servers) can hold it longer than the 333 ms a
// 1 s lease leaves: the owner then gave its servers up, which is the design, but not what these tests examine.
func ownershipConfig() actors.Config {
	cfg := testConfig()
	cfg.LeaseTTL = 2 * time.Second
	return cfg
}

// TestOneOwnerPerServer: two daemon processes on one store (each an actor system with its own node id). Only the
// one holding a server's lease runs its session: one child process per server at every sample; the other answers
// calls with SERVER_UNAVAILABLE naming the owner. When the owner stops, the standby takes every server over (its
// sessions and children) and serves calls.
func TestOneOwnerPerServer(t *testing.T) {
	t.Parallel()
	for name, open := range ownershipStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			stA, stB := open(t)
			defer stA.Close()
			defer stB.Close()
			cfg := ownershipConfig()
			a := &rig{t: t, store: stA, cfg: cfg}
			sysA, err := actors.Start(context.Background(), actors.Deps{Store: stA, Config: cfg, NodeID: "node-a"})
			if err != nil {
				t.Fatal(err)
			}
			a.sys = sysA
			defer a.stop()

			cmd, args := peertest.EverythingStdio(t)
			markers := map[string]string{}
			var ids []string
			for i := 0; i < 3; i++ {
				marker := fmt.Sprintf("owner-%s-%d-%d", name, i, time.Now().UnixNano())
				s := a.register(fmt.Sprintf("srv%d", i), persistence.TransportSTDIO,
					map[string]any{"command": cmd, "args": append(append([]string{}, args...), marker)}, nil, true)
				markers[s.ID] = marker
				ids = append(ids, s.ID)
			}
			for _, id := range ids {
				a.waitStatus(id, persistence.StatusConnected, 30*time.Second)
			}

			sysB, err := actors.Start(context.Background(), actors.Deps{Store: stB, Config: cfg, NodeID: "node-b"})
			if err != nil {
				t.Fatal(err)
			}
			b := &rig{t: t, store: stB, sys: sysB, cfg: cfg}
			defer b.stop()
			// The standby has nothing of its own to wait for: its start settles at once.
			wctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := sysB.AwaitStartup(wctx); err != nil {
				t.Fatalf("the standby's startup did not settle: %v", err)
			}
			cancel()

			// For three lease periods: one child per server, the owner serves, the standby names the owner.
			until := time.Now().Add(3 * cfg.LeaseTTL)
			for time.Now().Before(until) {
				for _, id := range ids {
					if n := len(peertest.ProcessesWithArg(markers[id])); n != 1 {
						t.Fatalf("server %s has %d child processes, want exactly 1", id, n)
					}
					mustEcho(t, a, id, "from the owner")
					rep, err := b.echo(id, "from the standby")
					if err != nil || rep.Error == nil || rep.Error.Code != errcode.ServerUnavailable ||
						!strings.Contains(rep.Error.Message, "node-a") {
						t.Fatalf("call through the standby: want SERVER_UNAVAILABLE naming node-a, got %+v %v", rep, err)
					}
				}
				time.Sleep(100 * time.Millisecond)
			}
			if got, _ := stB.GetServer(context.Background(), ids[0]); got.Status != persistence.StatusConnected {
				t.Fatalf("the standby changed the owner's status to %s", got.Status)
			}

			// The owner stops cleanly: it releases its leases, and the standby takes every server over. The owner's
			// children are gone when it has stopped (the standby may already have started its own: a released
			// lease is free at once).
			before := map[string][]int{}
			for _, id := range ids {
				before[id] = peertest.ProcessesWithArg(markers[id])
			}
			a.stop()
			for _, id := range ids {
				if left := slices.DeleteFunc(peertest.ProcessesWithArg(markers[id]), func(pid int) bool { return !slices.Contains(before[id], pid) }); len(left) != 0 {
					t.Fatalf("server %s: the owner's child processes %v left after it stopped", id, left)
				}
			}
			for _, id := range ids {
				b.waitStatus(id, persistence.StatusConnected, 3*cfg.LeaseTTL+20*time.Second)
				mustEcho(t, b, id, "from the new owner")
				if n := len(peertest.ProcessesWithArg(markers[id])); n != 1 {
					t.Fatalf("server %s has %d child processes after the takeover, want 1", id, n)
				}
			}
			leases, _, err := stB.ListLeases(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range leases {
				if l.Owner != "node-b" || l.Epoch != 2 {
					t.Fatalf("lease %+v: want node-b at epoch 2", l)
				}
			}
		})
	}
}

// TestLeaseLostClosesSession: when another owner takes a server's lease (here written into the store directly, as a
// process that saw this one's lease lapse would), the old owner notices at its next renewal, closes the session and
// stops the child at once, and writes nothing more about the server: the new owner's status stays.
func TestLeaseLostClosesSession(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	st, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := ownershipConfig()
	sys, err := actors.Start(context.Background(), actors.Deps{Store: st, Config: cfg, NodeID: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, store: st, sys: sys, cfg: cfg}
	defer r.stop()
	cmd, args := peertest.EverythingStdio(t)
	marker := fmt.Sprintf("lost-%d", time.Now().UnixNano())
	s := r.register("victim", persistence.TransportSTDIO, map[string]any{"command": cmd, "args": append(args, marker)}, nil, true)
	r.waitStatus(s.ID, persistence.StatusConnected, 30*time.Second)

	// An intruder takes the lease over, as a process would once this one's lease lapsed; it marks the server
	// ERROR under its own fence.
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(context.Background(), `UPDATE mcp.server_leases SET owner = 'intruder', epoch = epoch + 1,
		expires_at = clock_timestamp() + interval '1 hour' WHERE server_id = $1`, s.ID)
	conn.Close(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	intruder, _, err := st.ListLeases(context.Background())
	if err != nil || len(intruder) != 1 || intruder[0].Owner != "intruder" {
		t.Fatalf("leases after the takeover: %+v %v", intruder, err)
	}
	msg := "the intruder's own status"
	if err := st.RecordTransition(context.Background(), persistence.Transition{ServerID: s.ID, From: persistence.StatusConnected,
		To: persistence.StatusError, Reason: "intruder", ErrorMessage: &msg, At: time.Now(), Fence: &intruder[0]}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(cfg.LeaseTTL + 5*time.Second)
	for len(peertest.ProcessesWithArg(marker)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the old owner still runs the child %s after losing the lease", marker)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rep, err := r.echo(s.ID, "after the loss")
	if err != nil || rep.Error == nil || !strings.Contains(rep.Error.Message, "intruder") {
		// The actor stands by (it learns the holder at its next request for the lease) or reports it lost it.
		if err != nil || rep.Error == nil || rep.Error.Code != errcode.ServerUnavailable {
			t.Fatalf("call after the lease was lost: want SERVER_UNAVAILABLE, got %+v %v", rep, err)
		}
	}
	time.Sleep(cfg.LeaseTTL)
	got, err := st.GetServer(context.Background(), s.ID)
	if err != nil || got.Status != persistence.StatusError || ptr(got.ErrorMessage) != msg {
		t.Fatalf("the old owner overwrote the new owner's status: %s %s %v", got.Status, ptr(got.ErrorMessage), err)
	}
}

// TestFeedKeepsOtherProcessesCurrent: two processes on one PostgreSQL. What one does (register, connect, discover,
// rename, delete) reaches the other's routing table and search index through the store's feed, within a second,
// without the other polling; the other serves nothing itself (it stands by for every server).
func TestFeedKeepsOtherProcessesCurrent(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	stA, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer stA.Close()
	stB, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer stB.Close()
	cfg := ownershipConfig()
	sysA, err := actors.Start(context.Background(), actors.Deps{Store: stA, Config: cfg, NodeID: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	a := &rig{t: t, store: stA, sys: sysA, cfg: cfg}
	defer a.stop()
	sysB, err := actors.Start(context.Background(), actors.Deps{Store: stB, Config: cfg, NodeID: "node-b"})
	if err != nil {
		t.Fatal(err)
	}
	b := &rig{t: t, store: stB, sys: sysB, cfg: cfg}
	defer b.stop()

	cmd, args := peertest.EverythingStdio(t)
	s := a.register("fed", persistence.TransportSTDIO, map[string]any{"command": cmd, "args": args}, nil, true)
	waitRoutes(t, sysB, 30*time.Second, "the other process sees the server CONNECTED with its tools", func(rt *routing.RouteTable) bool {
		srv, ok := rt.Server(s.ID)
		_, tool := rt.Tool("fed.echo")
		return ok && srv.Status == persistence.StatusConnected && tool
	})
	// Its prompts and resources too (FeaturesChanged through the feed; the other process reads them from the store).
	waitRoutes(t, sysB, 30*time.Second, "the other process lists the server's prompts and resources", func(rt *routing.RouteTable) bool {
		_, prompt := rt.Prompt("fed__simple-prompt")
		return prompt && len(rt.Resources()) > 0 && len(rt.ResourceTemplates()) > 0
	})
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		res, err := sysB.Search(context.Background(), actors.SearchRequest{Query: "echo back a message", Limit: 5, IncludeExternal: true})
		if err == nil && len(res.Tools) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("search on the other process: %+v %v", res, err)
		}
	}

	name := "fed2"
	if _, err := sysA.Update(context.Background(), s.ID, persistence.ServerPatch{Name: &name}); err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, sysB, time.Second, "the rename", func(rt *routing.RouteTable) bool {
		_, ok := rt.Tool("fed2.echo")
		_, prompt := rt.Prompt("fed2__simple-prompt")
		return ok && prompt
	})
	if _, err := sysA.Disconnect(context.Background(), s.ID, true); err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, sysB, time.Second, "the disconnect", func(rt *routing.RouteTable) bool {
		srv, _ := rt.Server(s.ID)
		return srv.Status == persistence.StatusDisconnected && len(rt.Prompts()) == 0 && len(rt.Resources()) == 0
	})
	if err := sysA.Remove(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, sysB, time.Second, "the delete", func(rt *routing.RouteTable) bool {
		_, ok := rt.Server(s.ID)
		prompts, resources, templates := rt.ServerFeatures(s.ID)
		return !ok && len(prompts)+len(resources)+len(templates) == 0
	})
}
