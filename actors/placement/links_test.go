package placement

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"

	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// TestAskGivesUpWhenALinkBreaks: a request to an actor on another node whose answer never comes (protoactor's
// remoting dropped it with a connection it tore down) ends as soon as a connection between the two nodes breaks,
// in either direction, instead of waiting for its timeout. The owner is another process (this test binary, see
// TestLinksOwnerProcess: two remotings in one process race in protoactor's start); its actor keeps the request
// unanswered; then one node's endpoint to the other is terminated, as protoactor does when it loses a connection.
func TestAskGivesUpWhenALinkBreaks(t *testing.T) {
	// One asker and one owner for both cases (protoactor's remoting start races with a running one in the same
	// process).
	pid := startOwnerProcess(t)
	sys := quietActorSystem()
	l := NewLinks()
	l.Follow(sys.EventStream)
	r := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0, remote.WithServerOptions(l.ServerOption())))
	r.Start()
	t.Cleanup(func() {
		r.Shutdown(false)
		sys.Shutdown()
	})
	ask := func(msg any, timeout time.Duration) error { return askWatching(sys, l, pid, msg, timeout) }
	for _, tc := range []struct {
		name string
		// breakLink terminates one endpoint: the owner's to the asker (which carries the answers), or the asker's to
		// the owner.
		breakLink func(asker *actor.ActorSystem, owner *actor.PID)
	}{
		{"the owner's connection to the asker", func(asker *actor.ActorSystem, owner *actor.PID) {
			asker.Root.Send(owner, &pb.Activate{ServerId: "break", DeadOwner: asker.Address()})
		}},
		{"the asker's connection to the owner", func(asker *actor.ActorSystem, owner *actor.PID) {
			asker.EventStream.Publish(&remote.EndpointTerminatedEvent{Address: owner.Address})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A first request opens both connections (its answer comes back on the owner's own); after a broken
			// one, protoactor opens a new one.
			for start := time.Now(); ; {
				err := ask(&pb.Activate{ServerId: "ping"}, time.Second)
				if err == nil {
					break
				}
				if time.Since(start) > 10*time.Second {
					t.Fatalf("the owner does not answer: %v", err)
				}
			}
			done := make(chan error, 1)
			go func() {
				err := ask(&pb.Activate{ServerId: "lost"}, time.Minute)
				done <- err
			}()
			time.Sleep(200 * time.Millisecond) // the request reaches the owner, which keeps it
			broken := time.Now()
			tc.breakLink(sys, pid)
			select {
			case err := <-done:
				if !errors.Is(err, errBroken) {
					t.Fatalf("the request ended with %v; want the link's break", err)
				}
				t.Logf("the request gave up %v after the link broke", time.Since(broken).Round(time.Millisecond))
			case <-time.After(10 * time.Second):
				t.Fatal("the request still waits 10 s after a connection with the owner broke")
			}
		})
	}
}

// errBroken: askWatching gave up because a connection with the owner broke.
var errBroken = errors.New("a connection with the owner broke")

// askWatching asks pid as the actors do for another node: the ask gives up when a connection with its node breaks.
func askWatching(sys *actor.ActorSystem, l *Links, pid *actor.PID, msg any, timeout time.Duration) error {
	broken := l.Watch(pid.Address)
	done := make(chan error, 1)
	go func() {
		_, err := sys.Root.RequestFuture(pid, msg, timeout).Result()
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-broken:
		return errBroken
	}
}

// startOwnerProcess runs TestLinksOwnerProcess in a child process and returns its actor.
func startOwnerProcess(t *testing.T) *actor.PID {
	t.Helper()
	cmd, stdin, stdout := startTestChild(t, "TestLinksOwnerProcess", "AGGREGATOR_LINKS_OWNER=1")
	t.Cleanup(func() {
		stdin.Close() // the owner exits when its stdin closes
		if err := cmd.Wait(); err != nil {
			t.Logf("owner process: %v", err)
		}
	})
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if addr, ok := strings.CutPrefix(sc.Text(), "owner at "); ok {
			go func() {
				for sc.Scan() {
				}
			}()
			return actor.NewPID(addr, "owner")
		}
	}
	t.Fatalf("the owner process did not start: %v", sc.Err())
	return nil
}

// TestLinksOwnerProcess is the owner's side of TestAskGivesUpWhenALinkBreaks (it runs only in the child process):
// an actor that answers "ping", keeps anything else unanswered, and on "break" terminates this node's endpoint to
// the address given (as protoactor does when it loses a connection).
func TestLinksOwnerProcess(t *testing.T) {
	if os.Getenv("AGGREGATOR_LINKS_OWNER") != "1" {
		t.Skip("the owner process of TestAskGivesUpWhenALinkBreaks")
	}
	sys := quietActorSystem()
	r := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0))
	r.Start()
	_, err := sys.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
		if m, ok := c.Message().(*pb.Activate); ok {
			switch m.ServerId {
			case "ping":
				c.Respond(&pb.Activated{})
			case "break":
				sys.EventStream.Publish(&remote.EndpointTerminatedEvent{Address: m.DeadOwner})
			}
		}
	}), "owner")
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("owner at " + sys.Address() + "\n")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	r.Shutdown(false)
}

// quietActorSystem is an actor system that logs nothing (protoactor's remoting is chatty).
func quietActorSystem() *actor.ActorSystem {
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	return actor.NewActorSystemWithConfig(actor.Configure(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return discard })))
}
