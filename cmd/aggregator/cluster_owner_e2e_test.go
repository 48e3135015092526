package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/mcpproxy"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence/pgtest"
)

// TestClusterOwnerRoutingE2E is owner routing with real parts: three nodes on etcd and PostgreSQL behind a real
// HAProxy running deploy/haproxy.cfg (its node addresses mapped to loopback). Every node names a server's owner in
// the Mcp-Aggregator-Owner header of /mcp/servers/{name} (the owner itself, or a node that forwards there) and of a
// REST tool call. Through the balancer the header never reaches the client, and once a path (a tool name) has been
// answered, a new session on it and all of that session's requests (the calls of that name) land on the owner: the
// other nodes see none of them (their count of requests of that route does not move), so nothing goes between
// nodes. Without the owner routing, each session would stay on whichever node round robin gave its initialize, and
// REST calls would go round robin: two times in three another node than the owner.
func TestClusterOwnerRoutingE2E(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	etcd := peertest.StartEtcd(t)
	db := pgtest.NewDatabase(t)
	nodes := newCluster(t, 3, db, func(int) []string {
		return []string{"MCP_AGGREGATOR_CLUSTER=etcd", "MCP_AGGREGATOR_CLUSTER_ETCD=" + etcd}
	})
	echoBin := peertest.GoBinary(t, "./cmd/mcp-echo-backend")
	var names []string
	for i := 0; i < 6; i++ {
		name := fmt.Sprintf("echo%d", i)
		code, body := nodes[0].do("POST", "/servers", map[string]any{"name": name, "transport_type": "HTTP",
			"connection_config": map[string]any{"base_url": startEchoBackend(t, echoBin, 0), "allow_insecure_http": true}})
		if code != 201 {
			t.Fatalf("register %s: %d %v", name, code, body)
		}
		names = append(names, name)
	}
	waitFor(t, 60*time.Second, "every server CONNECTED", func() bool {
		st := nodes[2].statuses(t)
		for _, name := range names {
			if st[name] != "CONNECTED" {
				return false
			}
		}
		return true
	})
	// The owner of each server: the node that holds its backend session.
	owner := map[string]*clusterNode{}
	waitFor(t, 30*time.Second, "each server's session held by one node", func() bool {
		clear(owner)
		for _, n := range nodes {
			held, _ := n.backendSessions(t)
			for name := range held {
				owner[name] = n
			}
		}
		return len(owner) == len(names)
	})
	ownersSeen := map[*clusterNode]bool{}
	for _, n := range owner {
		ownersSeen[n] = true
	}
	t.Logf("owners: %d nodes own the %d servers", len(ownersSeen), len(names))

	// Straight to each node: the answer names the owner (its MCP listener's host:port), whoever answered.
	for _, name := range names {
		want := hostOf(t, owner[name].mcp)
		for _, n := range nodes {
			resp, err := http.Get(n.mcp + "/mcp/servers/" + name) // no session: the go-sdk refuses it, named all the same
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := resp.Header.Get(actors.OwnerHeader); got != want {
				t.Errorf("%s answered %s for %s (status %d), want the owner %s (%s)", n.name, got, name, resp.StatusCode, want, owner[name].name)
			}
		}
	}

	// The balancer, from deploy/haproxy.cfg.
	var restAddrs, mcpAddrs []string
	for _, n := range nodes {
		restAddrs = append(restAddrs, hostOf(t, n.rest))
		mcpAddrs = append(mcpAddrs, hostOf(t, n.mcp))
	}
	restBind := fmt.Sprintf("127.0.0.1:%d", peertest.FreePort(t))
	mcpBind := fmt.Sprintf("127.0.0.1:%d", peertest.FreePort(t))
	lb := peertest.StartHAProxy(t, peertest.LoopbackHAProxyConfig(t, restAddrs, mcpAddrs, restBind, mcpBind), restBind, mcpBind)
	defer func() {
		if t.Failed() {
			t.Logf("haproxy:\n%s", tail(lb.Logs(), 6000))
		}
	}()
	seen := &headerLog{}
	client := &http.Client{Transport: seen}
	session := func(name string) *mcp.ClientSession {
		t.Helper()
		c := mcp.NewClient(&mcp.Implementation{Name: "owner-routing", Version: "1"}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + mcpBind + "/mcp/servers/" + name, HTTPClient: client},
			&mcp.ClientSessionOptions{ProtocolVersion: actors.ProtocolVersion})
		if err != nil {
			t.Fatalf("session on %s through haproxy: %v", name, err)
		}
		return s
	}
	callN := func(s *mcp.ClientSession, name string, n int) {
		t.Helper()
		for i := range n {
			res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": fmt.Sprintf("%s %d", name, i)}})
			if err != nil || res.IsError {
				t.Fatalf("call %d on %s through haproxy: %v %+v", i, name, err, res)
			}
		}
	}
	var rests []string
	for _, n := range nodes {
		rests = append(rests, n.rest)
	}
	for _, name := range names {
		// The first session on a path goes where round robin (or the session's stickiness) sends it; its answers
		// teach the balancer the owner.
		s := session(name)
		callN(s, name, 2)
		s.Close()

		before := settledPerServerRequests(t, rests)
		s = session(name)
		callN(s, name, 10)
		s.Close()
		after := settledPerServerRequests(t, rests)
		for i, n := range nodes {
			grew := after[i] - before[i]
			switch {
			case n == owner[name] && grew < 11:
				t.Errorf("%s: the owner %s served %d requests of the session (initialize and 10 calls at least): not routed to the owner", name, n.name, grew)
			case n != owner[name] && grew != 0:
				t.Errorf("%s: %s, which does not own it, received %d of the session's requests: forwarded to the owner %s (a hop)", name, n.name, grew, owner[name].name)
			}
		}
	}

	// REST tool calls: straight to each node, the answer names the owner of the server that ran the call; through
	// the balancer, after the first call of a name, the calls of that name reach only the owner's REST listener (a
	// call elsewhere would go to the owner's actor over the cluster port).
	const callRoute = "/api/v1/tools/call"
	restCall := func(base, tool string) (int, http.Header) {
		t.Helper()
		req, _ := http.NewRequest("POST", base+callRoute, strings.NewReader(`{"name":"`+tool+`","arguments":{"message":"hi"}}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	direct := &http.Client{}
	for _, name := range names {
		want := hostOf(t, owner[name].mcp)
		for _, n := range nodes {
			req, _ := http.NewRequest("POST", n.rest+callRoute, strings.NewReader(`{"name":"`+name+`.echo","arguments":{"message":"hi"}}`))
			req.Header.Set("Content-Type", "application/json")
			resp, err := direct.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := resp.Header.Get(actors.OwnerHeader); resp.StatusCode != 200 || got != want {
				t.Errorf("REST call of %s.echo on %s: %d, owner %q, want 200 naming the owner %s (%s)", name, n.name, resp.StatusCode, got, want, owner[name].name)
			}
		}
	}
	for _, name := range names {
		if code, _ := restCall("http://"+restBind, name+".echo"); code != 200 {
			t.Fatalf("REST call of %s.echo through haproxy: %d", name, code)
		}
		before := settledRequests(t, rests, callRoute)
		for range 10 {
			if code, _ := restCall("http://"+restBind, name+".echo"); code != 200 {
				t.Fatalf("REST call of %s.echo through haproxy: %d", name, code)
			}
		}
		after := settledRequests(t, rests, callRoute)
		for i, n := range nodes {
			grew := after[i] - before[i]
			switch {
			case n == owner[name] && grew != 10:
				t.Errorf("REST %s.echo: the owner %s received %d of the 10 calls: not routed to the owner", name, n.name, grew)
			case n != owner[name] && grew != 0:
				t.Errorf("REST %s.echo: %s, which does not own it, received %d of the 10 calls (each a hop to the owner %s)", name, n.name, grew, owner[name].name)
			}
		}
	}

	if h := seen.owners(); len(h) > 0 {
		t.Errorf("the %s header reached the client through the balancer: %v", actors.OwnerHeader, h)
	}
	if seen.count() == 0 {
		t.Fatal("no answer went through the balancer")
	}
}

// hostOf is the host:port of a URL.
func hostOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// settledPerServerRequests is perServerRequests once it stopped moving (a session's standalone GET stream is
// counted when it ends, a moment after the session closed).
func settledPerServerRequests(t testing.TB, rests []string) []int {
	t.Helper()
	return settledRequests(t, rests, mcpproxy.Prefix+"{name}")
}

// settledRequests is requestsOn once it stopped moving.
func settledRequests(t testing.TB, rests []string, route string) []int {
	t.Helper()
	last := requestsOn(t, rests, route)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(300 * time.Millisecond)
		now := requestsOn(t, rests, route)
		if slices.Equal(now, last) {
			return now
		}
		last = now
	}
	return last
}

// perServerRequests is, for each node (its REST listener's root URL), how many /mcp/servers/{name} requests it
// has answered.
func perServerRequests(t testing.TB, rests []string) []int {
	t.Helper()
	return requestsOn(t, rests, mcpproxy.Prefix+"{name}")
}

// requestsOn is, for each node (its REST listener's root URL), how many requests of a route it has answered
// (mcp_aggregator_http_requests_total of that route pattern, every listener, method and status).
func requestsOn(t testing.TB, rests []string, route string) []int {
	t.Helper()
	out := make([]int, len(rests))
	for i, rest := range rests {
		resp, err := http.Get(rest + "/metrics")
		if err != nil {
			t.Fatalf("%s metrics: %v", rest, err)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "mcp_aggregator_http_requests_total{") && strings.Contains(line, `route="`+route+`"`) {
				var v float64
				if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
					out[i] += int(v)
				}
			}
		}
		resp.Body.Close()
	}
	return out
}

// headerLog is a transport that keeps every Mcp-Aggregator-Owner value its answers carried.
type headerLog struct {
	mu      sync.Mutex
	n       int
	carried []string
}

func (h *headerLog) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		h.mu.Lock()
		h.n++
		h.carried = append(h.carried, resp.Header.Values(actors.OwnerHeader)...)
		h.mu.Unlock()
	}
	return resp, err
}

func (h *headerLog) owners() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.carried...)
}

func (h *headerLog) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}
