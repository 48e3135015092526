package placement

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"

	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// TestSurvivorEvictsUponAPeersWord: a survivor whose own connections with a dead member never broke (here it never
// had any: it only runs its suspicion actor) still evicts the member at once, upon the word of the node that found it
// dead, sent over protoactor's remoting (TellOthers, MemberDead): it dials the member itself and is refused. A
// peer's word about a member whose port still answers (a live or frozen node) evicts nothing. Both nodes are
// processes of this test binary (TestSuspicionPeerProcess: two remotings in one process race in protoactor's
// start), which print each eviction their provider is asked for.
func TestSurvivorEvictsUponAPeersWord(t *testing.T) {
	live, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr, liveAddr := closed.Addr().String(), live.Addr().String()
	closed.Close()
	env := []string{"AGGREGATOR_SUSPICION_DEAD=" + deadAddr, "AGGREGATOR_SUSPICION_LIVE=" + liveAddr}

	survivorIn, survivorSays := startSuspicionPeer(t, append(env, "AGGREGATOR_SUSPICION_PEER=survivor")...)
	survivor, ok := strings.CutPrefix(survivorSays(), "survivor at ")
	if !ok {
		t.Fatal("the survivor process did not say where it listens")
	}
	// The finder found the member at deadAddr dead upon a broken link of its own, and tells the others; it also
	// sends a word about the live member (as a confused or stale node might).
	finderIn, finderSays := startSuspicionPeer(t, append(env, "AGGREGATOR_SUSPICION_PEER=finder",
		"AGGREGATOR_SUSPICION_SURVIVOR="+survivor)...)
	defer finderIn.Close()
	if got := finderSays(); got != "evicted "+deadAddr {
		t.Fatalf("finder: %q, want it to evict the dead member (%s)", got, deadAddr)
	}
	if got := survivorSays(); got != "evicted "+deadAddr {
		t.Fatalf("survivor: %q, want it to evict the dead member (%s) upon the finder's word", got, deadAddr)
	}
	// Once its probes are over, the survivor says it is done; it must not have evicted the live member.
	survivorIn.Close()
	for {
		l := survivorSays()
		if l == "done" {
			break
		}
		t.Errorf("survivor: %q after the dead member's eviction, want nothing (the live member %s stays)", l, liveAddr)
	}
}

// startSuspicionPeer runs TestSuspicionPeerProcess in a child process with env; it returns the child's stdin and
// a function reading its next line of output.
func startSuspicionPeer(t *testing.T, env ...string) (io.WriteCloser, func() string) {
	t.Helper()
	cmd, stdin, stdout := startTestChild(t, "TestSuspicionPeerProcess", env...)
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return stdin, func() string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the peer process ended early")
			}
			return l
		case <-time.After(30 * time.Second):
			t.Fatal("the peer process said nothing for 30 s")
		}
		return ""
	}
}

// TestSuspicionPeerProcess is a node of TestSurvivorEvictsUponAPeersWord (it runs only in a child process). Its
// view has the dead and the live member, and no link of its own with either. The survivor runs its suspicion
// actor; the finder sends the survivor a word about the live member, then suspects the dead one (as upon a broken
// link) and tells the others. Each prints each eviction; after its stdin closes, the survivor prints "done" once
// its probes are over.
func TestSuspicionPeerProcess(t *testing.T) {
	role := os.Getenv("AGGREGATOR_SUSPICION_PEER")
	if role == "" {
		t.Skip("a node of TestSurvivorEvictsUponAPeersWord")
	}
	sys := quietActorSystem()
	r := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0))
	r.Start()
	defer r.Shutdown(false)
	members := map[string]string{role: sys.Address(), "dead": os.Getenv("AGGREGATOR_SUSPICION_DEAD"),
		"live": os.Getenv("AGGREGATOR_SUSPICION_LIVE")}
	survivor := os.Getenv("AGGREGATOR_SUSPICION_SURVIVOR")
	if role == "finder" {
		members["survivor"] = survivor
	}
	m := NewMembers(role, sys.Address())
	m.Update(members)
	s := &Suspicion{Members: m, Evictor: printEvictor{}}
	switch role {
	case "survivor":
		if _, err := sys.Root.SpawnNamed(s.Props(), SuspicionActor); err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString("survivor at " + sys.Address() + "\n")
	case "finder":
		sys.Root.Send(actor.NewPID(survivor, SuspicionActor), &pb.MemberDead{Address: members["live"], Member: "live", From: sys.Address()})
		s.Tell = TellOthers(sys.Root, m, sys.Address())
		s.Suspect(members["dead"])
	}
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	s.wg.Wait()
	os.Stdout.WriteString("done\n")
}

// printEvictor prints each eviction it is asked for.
type printEvictor struct{}

func (printEvictor) Evict(_ context.Context, addr string) (bool, error) {
	fmt.Printf("evicted %s\n", addr)
	return true, nil
}
