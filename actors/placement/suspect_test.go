package placement

import (
	"bufio"
	"context"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestDialProbeTellsDeadFromFrozen: the premise of the fast failover, on a real process listening on a port: while
// it runs, and while it is frozen (SIGSTOP: its kernel still accepts connections), the probe is answered, so a
// frozen node is never taken for dead; once it is killed (SIGKILL), the probe is refused.
func TestDialProbeTellsDeadFromFrozen(t *testing.T) {
	cmd, stdin, stdout := startTestChild(t, "TestProbeListenerProcess", "AGGREGATOR_PROBE_LISTENER=1")
	waited := false
	t.Cleanup(func() {
		stdin.Close()
		if !waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	var addr string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "listening at "); ok {
			addr = a
			break
		}
	}
	if addr == "" {
		t.Fatal("the listener process did not say where it listens")
	}
	ctx := t.Context()
	if got := DialProbe(ctx, addr, ProbeTimeout); got != ProbeAnswered {
		t.Fatalf("probe of a running process: %v, want answered", got)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	got := DialProbe(ctx, addr, ProbeTimeout)
	_ = cmd.Process.Signal(syscall.SIGCONT)
	if got != ProbeAnswered {
		t.Fatalf("probe of a frozen process: %v, want answered (a frozen node must not be taken for dead)", got)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	waited = true
	if got := DialProbe(ctx, addr, ProbeTimeout); got != ProbeRefused {
		t.Fatalf("probe of a killed process: %v, want refused", got)
	}
}

// TestProbeListenerProcess is the process TestDialProbeTellsDeadFromFrozen probes: it listens until its stdin
// closes.
func TestProbeListenerProcess(t *testing.T) {
	if os.Getenv("AGGREGATOR_PROBE_LISTENER") != "1" {
		t.Skip("the listener process of TestDialProbeTellsDeadFromFrozen")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	os.Stdout.WriteString("listening at " + ln.Addr().String() + "\n")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
}

// evictions records what Suspicion asked the provider to evict; with members set, the evicted member leaves that
// view, as the provider's topology change does (onTopology).
type evictions struct {
	mu      sync.Mutex
	addrs   []string
	members *Members
}

func (e *evictions) Evict(_ context.Context, addr string) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.addrs = append(e.addrs, addr)
	if e.members != nil {
		e.members.mu.RLock()
		keep := map[string]string{}
		for id, a := range e.members.addrs {
			if a != addr {
				keep[id] = a
			}
		}
		e.members.mu.RUnlock()
		e.members.Update(keep)
	}
	return true, nil
}

// TestSuspicionEvictsOnlyTheDead: a broken link (Suspect), or another member's word (Told), makes the node probe
// the other end; it is evicted only when it is a member, not this node, and its port refuses connections (a closed
// listener here); a member whose port answers (churn between live nodes, or a frozen process) or gives no answer (a
// partition) is left to the membership's own detection, whatever a peer said. A member found dead upon a broken
// link of this node's own is told to the others (Tell); one found dead upon a peer's word is not told again.
func TestSuspicionEvictsOnlyTheDead(t *testing.T) {
	live, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := closed.Addr().String()
	closed.Close()
	const partitioned = "127.0.0.1:1" // answered by the probe below with no answer
	const flaky = "127.0.0.1:2"       // no answer to the first two dials, refused after
	for _, tc := range []struct {
		name    string
		suspect string
		evicted bool
	}{
		{"a member whose port refuses connections", deadAddr, true},
		{"a member whose port answers", live.Addr().String(), false},
		{"a member whose port gives no answer", partitioned, false},
		{"a member whose port fails to answer, then refuses (a dying process)", flaky, true},
		{"this node", "127.0.0.1:7000", false},
		{"an address no member has", "127.0.0.1:7999", false},
	} {
		for _, told := range []bool{false, true} {
			name := tc.name + ", its link broke"
			if told {
				name = tc.name + ", a peer's word"
			}
			t.Run(name, func(t *testing.T) {
				m := NewMembers("self", "127.0.0.1:7000")
				m.Update(map[string]string{"self": "127.0.0.1:7000", "dead": deadAddr, "live": live.Addr().String(), "part": partitioned,
					"flaky": flaky})
				ev := &evictions{members: m}
				var flakyDials atomic.Int32
				var tellMu sync.Mutex
				var tells []string
				s := &Suspicion{Members: m, Evictor: ev, Probe: func(ctx context.Context, addr string) ProbeResult {
					switch {
					case addr == partitioned:
						return ProbeNoAnswer
					case addr == flaky && flakyDials.Add(1) <= 2:
						return ProbeNoAnswer
					case addr == flaky:
						return ProbeRefused
					}
					return DialProbe(ctx, addr, ProbeTimeout)
				}, Tell: func(addr, member string) {
					tellMu.Lock()
					defer tellMu.Unlock()
					tells = append(tells, member+"@"+addr)
				}}
				for range 2 { // a second break or word, while the first is probed or after the eviction: one probe
					if told {
						s.Told(tc.suspect, "127.0.0.1:7001")
					} else {
						s.Suspect(tc.suspect)
					}
				}
				s.wg.Wait()
				ev.mu.Lock()
				defer ev.mu.Unlock()
				want := 0
				if tc.evicted {
					want = 1
				}
				if len(ev.addrs) != want {
					t.Fatalf("evicted %v, want %d eviction(s)", ev.addrs, want)
				}
				wantTells := ""
				if tc.evicted && !told {
					wantTells = evictedID(tc.suspect, deadAddr) + "@" + tc.suspect
				}
				if got := strings.Join(tells, ","); got != wantTells {
					t.Errorf("told the others %q, want %q", got, wantTells)
				}
			})
		}
	}
}

// TestLinksTellSuspicionOfABreak: Links.Down tells the hook set with OnDown.
func TestLinksTellSuspicionOfABreak(t *testing.T) {
	l := NewLinks()
	var got []string
	l.OnDown(func(addr string) { got = append(got, addr) })
	w := l.Watch("127.0.0.1:1")
	l.Down("127.0.0.1:1")
	<-w
	l.OnDown(nil)
	l.Down("127.0.0.1:2")
	if strings.Join(got, ",") != "127.0.0.1:1" {
		t.Errorf("OnDown was told %v, want only 127.0.0.1:1", got)
	}
}

// TestProbeSchedule: a suspect whose port still answers is dialled again soon at first (a dead process's listener
// is gone within milliseconds of its connections), and for about a second in all before it is taken for churn.
func TestProbeSchedule(t *testing.T) {
	var total time.Duration
	for i := 1; i < probeAttempts; i++ {
		d := probeDelay(i)
		if d <= 0 || d > 100*time.Millisecond {
			t.Errorf("delay before attempt %d: %v, want within (0, 100 ms]", i, d)
		}
		total += d
	}
	if first := probeDelay(1); first > 25*time.Millisecond {
		t.Errorf("first retry after %v, want soon (at most 25 ms)", first)
	}
	if total < time.Second || total > 1200*time.Millisecond {
		t.Errorf("a port that keeps answering is dialled over %v, want about a second", total)
	}
}

// evictedID is the member id of the suspects of TestSuspicionEvictsOnlyTheDead that are evicted.
func evictedID(addr, deadAddr string) string {
	if addr == deadAddr {
		return "dead"
	}
	return "flaky"
}
