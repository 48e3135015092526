package placement

import (
	"maps"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster"

	"github.com/mcpgw/aggregator/persistence"
)

// provider is a membership provider that may report whether its registration holds (as the etcd one does), and
// whose Shutdown may hang.
type provider struct {
	registered *bool
	hang       chan struct{}
}

func (p *provider) StartMember(*cluster.Cluster) error { return nil }
func (p *provider) StartClient(*cluster.Cluster) error { return nil }
func (p *provider) Shutdown(bool) error {
	if p.hang != nil {
		<-p.hang
	}
	return nil
}

// etcdLike adds Registered to provider.
type etcdLike struct{ provider }

func (p *etcdLike) Registered() bool { return *p.registered }

// TestTakeoverRisk: a cluster node gives its sessions up while the store is away only when it is out of the
// membership, or its provider says its registration may be gone.
func TestTakeoverRisk(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		name     string
		provider cluster.ClusterProvider
		joined   bool
		want     bool
	}{
		{"member, provider without registration", &provider{}, true, false},
		{"out of the membership", &provider{}, false, true},
		{"member, registered", &etcdLike{provider{registered: &yes}}, true, false},
		{"member, registration lost", &etcdLike{provider{registered: &no}}, true, true},
		{"out, registered", &etcdLike{provider{registered: &yes}}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMembers("node-a", "a:1")
			if tc.joined {
				m.Update(map[string]string{"node-a": "a:1", "node-b": "b:1"})
			}
			c := &ClusterConfig{Provider: tc.provider}
			if got := c.TakeoverRisk(m)(); got != tc.want {
				t.Errorf("risk = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSettle: a node without a port gets a free one, and is advertised at its host unless told otherwise.
func TestSettle(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in        ClusterConfig
		wantAddr  string // empty: a free port on 127.0.0.1
		wantAdver string
	}{
		{"given port, advertised host", ClusterConfig{Host: "0.0.0.0", Port: 7000, Advertise: "node-a.internal"}, "node-a.internal:7000", "node-a.internal"},
		{"given port, host advertised", ClusterConfig{Host: "10.0.0.5", Port: 7000}, "10.0.0.5:7000", "10.0.0.5"},
		{"free port", ClusterConfig{Host: "127.0.0.1"}, "", "127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.in
			if err := c.Settle(); err != nil {
				t.Fatal(err)
			}
			if c.Advertise != tc.wantAdver {
				t.Errorf("advertise = %q, want %q", c.Advertise, tc.wantAdver)
			}
			if tc.wantAddr != "" && c.Address() != tc.wantAddr {
				t.Errorf("address = %q, want %q", c.Address(), tc.wantAddr)
			}
			if c.Port == 0 {
				t.Error("no port settled")
			}
		})
	}
}

// TestLeave: leaving gives up waiting for a provider that does not answer.
func TestLeave(t *testing.T) {
	if !(&ClusterConfig{Provider: &provider{}}).Leave(time.Second) {
		t.Error("a provider that deregisters at once: Leave = false")
	}
	hang := make(chan struct{})
	defer close(hang)
	if (&ClusterConfig{Provider: &provider{hang: hang}}).Leave(10 * time.Millisecond) {
		t.Error("a provider that hangs: Leave = true")
	}
}

// TestTopologyMembers: protoactor's members by node id (a member id may carry a prefix before '@').
func TestTopologyMembers(t *testing.T) {
	got := TopologyMembers(&cluster.ClusterTopology{Members: []*cluster.Member{
		{Id: "node-a", Host: "10.0.0.1", Port: 7000},
		{Id: "x@node-b", Host: "::1", Port: 7001},
	}})
	want := map[string]string{"node-a": "10.0.0.1:7000", "node-b": "[::1]:7001"}
	if !maps.Equal(got, want) {
		t.Errorf("members = %v, want %v", got, want)
	}
}

// TestMCPAddress: the MCP listener of a node, as its heartbeat recorded it.
func TestMCPAddress(t *testing.T) {
	nodes := []persistence.Node{{ID: "node-a", Address: "http://a:8080"}, {ID: "stdio-1"}}
	for _, tc := range []struct {
		node, want string
		ok         bool
	}{
		{"node-a", "http://a:8080", true},
		{"stdio-1", "", false}, // a process without an MCP endpoint
		{"node-z", "", false},
	} {
		if got, ok := MCPAddress(nodes, tc.node); got != tc.want || ok != tc.ok {
			t.Errorf("MCPAddress(%s) = %q, %v; want %q, %v", tc.node, got, ok, tc.want, tc.ok)
		}
	}
}
