package membership

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster"

	"github.com/mcpgw/aggregator/internal/peertest"
)

// view records the memberships a provider published.
type view struct {
	mu   sync.Mutex
	last []string
	// raw is every membership published, with the members' full ids.
	raw []string
}

func (v *view) publish(ms cluster.Members) {
	ids := make([]string, 0, len(ms))
	full := make([]string, 0, len(ms))
	for _, m := range ms {
		full = append(full, m.Id)
		ids = append(ids, m.Id[strings.LastIndexByte(m.Id, '@')+1:]) // <incarnation>@<id>
	}
	sort.Strings(ids)
	sort.Strings(full)
	v.mu.Lock()
	v.last = ids
	v.raw = append(v.raw, strings.Join(full, ","))
	v.mu.Unlock()
}

func (v *view) get() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.last
}

// TestEtcdMembersJoiningTogether: members that register at the same moment all see each other (protoactor's own
// etcd provider misses a member that registers between its read and its watch); one that stops cleanly disappears
// from the others' view at once, one that dies (its keep-alive stops) within its TTL.
func TestEtcdMembersJoiningTogether(t *testing.T) {
	endpoint := peertest.StartEtcd(t)
	const n = 6
	providers := make([]*Etcd, n)
	views := make([]*view, n)
	var wg sync.WaitGroup
	for i := range providers {
		providers[i] = &Etcd{Endpoints: []string{endpoint}, Prefix: "/test", TTL: time.Second}
		views[i] = &view{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			self := record{ID: fmt.Sprintf("m%d", i), Host: "127.0.0.1", Port: int32(10000 + i)}
			if err := providers[i].start("c", &self, views[i].publish); err != nil {
				t.Errorf("member %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	want := func(ids ...int) string {
		s := make([]string, 0, len(ids))
		for _, i := range ids {
			s = append(s, fmt.Sprintf("m%d", i))
		}
		sort.Strings(s)
		return strings.Join(s, ",")
	}
	waitAll := func(what, expect string, members []int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for _, i := range members {
			for strings.Join(views[i].get(), ",") != expect {
				if time.Now().After(deadline) {
					t.Fatalf("%s: member %d sees %v, want %s", what, i, views[i].get(), expect)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	waitAll("all joined", want(0, 1, 2, 3, 4, 5), []int{0, 1, 2, 3, 4, 5})
	start := time.Now()
	if err := providers[5].Shutdown(true); err != nil {
		t.Fatal(err)
	}
	waitAll("a clean leave", want(0, 1, 2, 3, 4), []int{0, 1, 2, 3, 4})
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("a clean leave took %v to be seen, want at once", took)
	}
	// A member that dies: its client stops (no revoke), the key lapses with the lease.
	providers[4].mu.Lock()
	client := providers[4].client
	providers[4].mu.Unlock()
	providers[4].cancel()
	client.Close()
	waitAll("a death", want(0, 1, 2, 3), []int{0, 1, 2, 3})
	for _, p := range providers[:4] {
		if err := p.Shutdown(true); err != nil {
			t.Error(err)
		}
	}
}

// TestEtcdMembersRejoinAfterEtcdRestart: etcd stopped for longer than the members' TTL and started again on the
// same data: every member registers again by itself (its keep-alive ended while etcd was away) and sees all the
// others again; a member whose key was deleted while it was registered again sees itself leave first.
func TestEtcdMembersRejoinAfterEtcdRestart(t *testing.T) {
	etcd := peertest.StartEtcdServer(t)
	const n = 3
	providers := make([]*Etcd, n)
	views := make([]*view, n)
	for i := range providers {
		providers[i] = &Etcd{Endpoints: []string{etcd.Endpoint}, Prefix: "/test", TTL: time.Second}
		views[i] = &view{}
		self := record{ID: fmt.Sprintf("m%d", i), Host: "127.0.0.1", Port: int32(10000 + i)}
		if err := providers[i].start("c", &self, views[i].publish); err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	t.Cleanup(func() {
		for _, p := range providers {
			_ = p.Shutdown(true)
		}
	})
	all := "m0,m1,m2"
	waitAll := func(what string, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for i, v := range views {
			for strings.Join(v.get(), ",") != all || !providers[i].Registered() {
				if time.Now().After(deadline) {
					t.Fatalf("%s: member %d sees %v (registered %v), want %s", what, i, v.get(), providers[i].Registered(), all)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	waitAll("all joined", 10*time.Second)
	etcd.Stop()
	// Past every member's TTL their keep-alives end. The client library notices on a timer of its own (every
	// 500 ms past the TTL), later on a loaded machine: wait for it, within a bound.
	gone := time.Now()
	for i, p := range providers {
		for p.Registered() {
			if time.Since(gone) > 10*time.Second {
				t.Fatalf("member %d still says it is registered after etcd was gone for %v", i, time.Since(gone).Round(time.Millisecond))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("every member knew it was unregistered %v after etcd stopped", time.Since(gone).Round(time.Millisecond))
	etcd.Start()
	back := time.Now()
	waitAll("after etcd restarted", 15*time.Second)
	// The old leases lapse a few seconds after etcd restarts: the members, registered again, stay.
	time.Sleep(5 * time.Second)
	waitAll("after the old leases lapsed", time.Second)
	t.Logf("every member registered again and sees the others %v after etcd restarted", time.Since(back).Round(time.Millisecond))
}

// TestEtcdMemberDeletedRejoinsAsNewIncarnation: a member whose key is deleted while it runs (as when its lease
// lapsed while the process was frozen: the others saw it leave) sees itself leave, then registers again under its
// next incarnation (protoactor never admits a member id that left again), and every member sees it back.
func TestEtcdMemberDeletedRejoinsAsNewIncarnation(t *testing.T) {
	endpoint := peertest.StartEtcd(t)
	providers := make([]*Etcd, 2)
	views := make([]*view, 2)
	for i := range providers {
		providers[i] = &Etcd{Endpoints: []string{endpoint}, Prefix: "/test", TTL: time.Second}
		views[i] = &view{}
		self := record{ID: fmt.Sprintf("m%d", i), Host: "127.0.0.1", Port: int32(10000 + i)}
		if err := providers[i].start("c", &self, views[i].publish); err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	t.Cleanup(func() {
		for _, p := range providers {
			_ = p.Shutdown(true)
		}
	})
	waitRaw := func(what, want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for _, v := range views {
			for {
				v.mu.Lock()
				last := ""
				if len(v.raw) > 0 {
					last = v.raw[len(v.raw)-1]
				}
				v.mu.Unlock()
				if last == want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: a member sees %q, want %q", what, last, want)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	waitRaw("joined", "1@m0,1@m1")
	providers[1].mu.Lock()
	client := providers[1].client
	providers[1].mu.Unlock()
	if _, err := client.Delete(t.Context(), "/test/c/1@m0"); err != nil {
		t.Fatal(err)
	}
	waitRaw("rejoined", "1@m1,2@m0")
	views[0].mu.Lock()
	seen := strings.Join(views[0].raw, " | ")
	views[0].mu.Unlock()
	if !strings.Contains(seen, " | 1@m1 | ") {
		t.Errorf("m0 never saw itself out of the membership: %s", seen)
	}
	if !providers[0].Registered() {
		t.Errorf("m0 does not say it is registered")
	}
}

// TestEtcdEvict: a member evicted by another (placement.Suspicion confirmed it dead) leaves every member's view at
// once, long before its lease would lapse (a minute here): a dead one is gone for good; a live one learns that it
// left (its lease was revoked) and registers again under its next incarnation. A member never evicts itself, and
// an address no member has evicts nothing.
func TestEtcdEvict(t *testing.T) {
	endpoint := peertest.StartEtcd(t)
	providers := make([]*Etcd, 3)
	views := make([]*view, 3)
	for i := range providers {
		providers[i] = &Etcd{Endpoints: []string{endpoint}, Prefix: "/test", TTL: time.Minute}
		views[i] = &view{}
		self := record{ID: fmt.Sprintf("m%d", i), Host: "127.0.0.1", Port: int32(10000 + i)}
		if err := providers[i].start("c", &self, views[i].publish); err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	t.Cleanup(func() {
		for _, p := range providers[:2] { // m2 dies below
			_ = p.Shutdown(true)
		}
	})
	waitRaw := func(what, want string, members ...int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for _, i := range members {
			for {
				views[i].mu.Lock()
				last := ""
				if len(views[i].raw) > 0 {
					last = views[i].raw[len(views[i].raw)-1]
				}
				views[i].mu.Unlock()
				if last == want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: member %d sees %q, want %q", what, i, last, want)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	waitRaw("joined", "1@m0,1@m1,1@m2", 0, 1, 2)

	for _, tc := range []struct {
		name, addr string
	}{
		{"itself", "127.0.0.1:10000"},
		{"an address no member has", "127.0.0.1:9999"},
	} {
		if ok, err := providers[0].Evict(t.Context(), tc.addr); ok || err != nil {
			t.Errorf("evicting %s: %v %v, want false and no error", tc.name, ok, err)
		}
	}

	// m2 dies without revoking its lease (its client just stops), as on SIGKILL; m0 evicts it.
	providers[2].mu.Lock()
	client := providers[2].client
	providers[2].mu.Unlock()
	providers[2].cancel()
	client.Close()
	if ok, err := providers[0].Evict(t.Context(), "127.0.0.1:10002"); !ok || err != nil {
		t.Fatalf("evicting the dead m2: %v %v, want true", ok, err)
	}
	waitRaw("m2 evicted", "1@m0,1@m1", 0, 1)
	// Evicting it again (another survivor that saw its connection break) is no error.
	if ok, err := providers[1].Evict(t.Context(), "127.0.0.1:10002"); ok || err != nil {
		t.Errorf("evicting m2 a second time: %v %v, want false and no error", ok, err)
	}

	// m1 is alive: evicted by mistake, it learns it left and comes back under its next incarnation.
	if ok, err := providers[0].Evict(t.Context(), "127.0.0.1:10001"); !ok || err != nil {
		t.Fatalf("evicting m1: %v %v, want true", ok, err)
	}
	waitRaw("m1 back", "1@m0,2@m1", 0, 1)
	views[1].mu.Lock()
	seen := strings.Join(views[1].raw, " | ")
	views[1].mu.Unlock()
	if !strings.Contains(seen, " | 1@m0 | ") {
		t.Errorf("m1 never saw itself out of the membership: %s", seen)
	}
}
