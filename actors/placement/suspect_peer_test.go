package placement

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
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
// peer's word about a member whose port still answers (a live or frozen node) evicts nothing. The survivor is
// another process (this test binary, TestSuspicionPeerProcess: two remotings in one process race in protoactor's
// start), which prints each eviction its provider is asked for.
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

	cmd := exec.Command(os.Args[0], "-test.run=^TestSuspicionPeerProcess$")
	cmd.Env = append(os.Environ(), "AGGREGATOR_SUSPICION_PEER=1", "AGGREGATOR_SUSPICION_DEAD="+deadAddr,
		"AGGREGATOR_SUSPICION_LIVE="+liveAddr)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
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
	next := func() string {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the survivor process ended early")
			}
			return l
		case <-time.After(30 * time.Second):
			t.Fatal("the survivor process said nothing for 30 s")
		}
		return ""
	}
	survivor, ok := strings.CutPrefix(next(), "survivor at ")
	if !ok {
		t.Fatal("the survivor process did not say where it listens")
	}

	// This node found the member at deadAddr dead upon a broken link of its own, and tells the others.
	sys := quietActorSystem()
	r := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0))
	r.Start()
	t.Cleanup(func() {
		r.Shutdown(false)
		sys.Shutdown()
	})
	m := NewMembers("finder", sys.Address())
	m.Update(map[string]string{"finder": sys.Address(), "survivor": survivor, "dead": deadAddr, "live": liveAddr})
	ev := &evictions{}
	s := &Suspicion{Members: m, Evictor: ev, Tell: TellOthers(sys.Root, m, sys.Address())}
	// A word about a live member first (as a confused or stale node might send): it must evict nothing.
	sys.Root.Send(actor.NewPID(survivor, SuspicionActor), &pb.MemberDead{Address: liveAddr, Member: "live", From: sys.Address()})
	s.Suspect(deadAddr)
	s.wg.Wait()
	if len(ev.addrs) != 1 || ev.addrs[0] != deadAddr {
		t.Fatalf("the finder evicted %v, want [%s]", ev.addrs, deadAddr)
	}
	if got := next(); got != "evicted "+deadAddr {
		t.Fatalf("survivor: %q, want it to evict the dead member (%s) upon the finder's word", got, deadAddr)
	}
	// Once its probes are over, the survivor says it is done; it must not have evicted the live member.
	stdin.Close()
	for {
		l := next()
		if l == "done" {
			break
		}
		t.Errorf("survivor: %q after the dead member's eviction, want nothing (the live member %s stays)", l, liveAddr)
	}
}

// TestSuspicionPeerProcess is the survivor of TestSurvivorEvictsUponAPeersWord (it runs only in the child process):
// a node whose view has the dead and the live member, with no link of its own to either, running its suspicion
// actor; it prints each eviction, and "done" once its probes are over after its stdin closes.
func TestSuspicionPeerProcess(t *testing.T) {
	if os.Getenv("AGGREGATOR_SUSPICION_PEER") != "1" {
		t.Skip("the survivor process of TestSurvivorEvictsUponAPeersWord")
	}
	sys := quietActorSystem()
	r := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0))
	r.Start()
	m := NewMembers("survivor", sys.Address())
	m.Update(map[string]string{"survivor": sys.Address(), "dead": os.Getenv("AGGREGATOR_SUSPICION_DEAD"),
		"live": os.Getenv("AGGREGATOR_SUSPICION_LIVE")})
	s := &Suspicion{Members: m, Evictor: printEvictor{}}
	if _, err := sys.Root.SpawnNamed(s.Props(), SuspicionActor); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("survivor at " + sys.Address() + "\n")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	s.wg.Wait()
	os.Stdout.WriteString("done\n")
	r.Shutdown(false)
}

// printEvictor prints each eviction it is asked for.
type printEvictor struct{}

func (printEvictor) Evict(_ context.Context, addr string) (bool, error) {
	fmt.Printf("evicted %s\n", addr)
	return true, nil
}
