// Package membership holds the etcd membership provider of the daemon's cluster (a protoactor-go
// cluster.ClusterProvider). protoactor-go's own etcd provider (v0.0.0-20240822202345, the newest the module proxy
// serves) reads the member list and then watches for changes from "now": a node that registers between the two is
// never seen by this one (measured here: one node of three saw two members for good). This provider watches from the
// revision it read, so no change is lost, and starts watching again from where it was after a watch breaks.
package membership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/mcpgw/aggregator/internal/retry"
)

// Etcd is a cluster.ClusterProvider on etcd: each member keeps a key under Prefix/<cluster>/ bound to a lease that
// it renews; the members are the keys there. A member that dies stops renewing, and etcd deletes its key when the
// lease lapses (TTL); one that stops cleanly revokes its lease, which deletes the key at once.
type Etcd struct {
	// Endpoints are etcd's client endpoints (host:port).
	Endpoints []string
	// Prefix is where the members' keys live ("/mcp-aggregator").
	Prefix string
	// TTL is how long a dead member's key outlives it (3 s when zero; etcd rounds to whole seconds).
	TTL time.Duration
	// Logger receives the provider's warnings (nil: discarded).
	Logger *slog.Logger

	mu     sync.Mutex
	client *clientv3.Client
	lease  clientv3.LeaseID
	// registered: the member's key is kept alive (see Registered).
	registered bool
	// self is this member's key (empty for a client); system its actor system id, incarnation the number in its
	// member id; rejoin asks keepRegistered to register again (the key was deleted).
	self        string
	system      string
	incarnation int
	rejoin      chan struct{}
	cancel      context.CancelFunc
	done        chan struct{}
	members     map[string]*cluster.Member // key -> member
	// leaseOf is the lease each member's key is bound to (key -> lease), for Evict.
	leaseOf map[string]clientv3.LeaseID
	// publishFn receives the membership after every change (the cluster's member list).
	publishFn func(cluster.Members)
}

var _ cluster.ClusterProvider = (*Etcd)(nil)

// record is what a member's key holds.
type record struct {
	ID    string   `json:"id"`
	Host  string   `json:"host"`
	Port  int32    `json:"port"`
	Kinds []string `json:"kinds"`
}

// StartMember implements cluster.ClusterProvider: it registers this member and follows the others.
func (e *Etcd) StartMember(c *cluster.Cluster) error {
	host, port, err := c.ActorSystem.GetHostPort()
	if err != nil {
		return fmt.Errorf("etcd membership: own address: %w", err)
	}
	self := record{ID: c.ActorSystem.ID, Host: host, Port: int32(port), Kinds: c.GetClusterKinds()}
	return e.start(c.Config.Name, &self, c.MemberList.UpdateClusterTopology)
}

// StartClient implements cluster.ClusterProvider: it follows the members without registering.
func (e *Etcd) StartClient(c *cluster.Cluster) error {
	return e.start(c.Config.Name, nil, c.MemberList.UpdateClusterTopology)
}

// start registers self (nil: a client) in the cluster's directory and calls publish with the whole membership
// after every change, from one goroutine.
func (e *Etcd) start(clusterName string, self *record, publish func(cluster.Members)) error {
	if e.Logger == nil {
		e.Logger = slog.New(slog.DiscardHandler)
	}
	ttl := e.TTL
	if ttl <= 0 {
		ttl = 3 * time.Second
	}
	// gRPC's reconnect backoff grows to two minutes by default: after an etcd outage the member would register
	// again (and see the others) only that late. Reconnect within a second instead.
	client, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints, DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 2 * time.Second,
			Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}})}})
	if err != nil {
		return fmt.Errorf("etcd membership: connect to %v: %w", e.Endpoints, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.mu.Lock()
	e.client, e.cancel, e.done, e.members = client, cancel, make(chan struct{}), map[string]*cluster.Member{}
	e.leaseOf = map[string]clientv3.LeaseID{}
	e.mu.Unlock()
	dir := strings.TrimSuffix(e.Prefix, "/") + "/" + clusterName + "/"
	e.mu.Lock()
	e.publishFn = publish
	e.mu.Unlock()
	if self != nil {
		if err := e.register(ctx, dir, self, ttl); err != nil {
			cancel()
			client.Close()
			return err
		}
	}
	rev, err := e.load(ctx, dir)
	if err != nil {
		cancel()
		client.Close()
		return err
	}
	go e.follow(ctx, dir, rev)
	return nil
}

// register writes this member's key under a lease that a keep-alive renews until Shutdown, and keeps it
// registered: when the keep-alive ends (etcd was unreachable for longer than the TTL, restarted, or this process
// was frozen) or the key is deleted, the member registers again under a new lease as soon as etcd answers, so that
// it rejoins by itself.
//
// A member's id is <incarnation>@<actor system id>. protoactor blocks for good the id of a member that left (its
// member list never admits it again): a member whose key was deleted (the others saw it leave) registers again
// under the next incarnation, and is a new member to protoactor; one whose key is still there keeps its id (a
// transaction moves the key to the new lease, so the others never see it leave). The actor system id itself is
// never a member id, so that protoactor's block of a member that left never refuses the node's connections.
func (e *Etcd) register(ctx context.Context, dir string, self *record, ttl time.Duration) error {
	e.mu.Lock()
	e.system, e.incarnation, e.rejoin = self.ID, 1, make(chan struct{}, 1)
	self.ID = memberID(1, e.system)
	e.self = dir + self.ID
	e.mu.Unlock()
	alive, err := e.put(ctx, dir, self, ttl)
	if err != nil {
		return err
	}
	go e.keepRegistered(ctx, dir, self, ttl, alive)
	return nil
}

func memberID(incarnation int, system string) string {
	return fmt.Sprintf("%d@%s", incarnation, system)
}

// put grants a lease, moves the member's key to it when the key still exists, or else (first registration, or the
// key was deleted) tells the node it is not a member and writes the key of its next incarnation; it then keeps
// the lease alive.
func (e *Etcd) put(ctx context.Context, dir string, self *record, ttl time.Duration) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	grant, err := e.client.Grant(rctx, int64(max(ttl/time.Second, 1)))
	if err != nil {
		return nil, fmt.Errorf("etcd membership: grant lease: %w", err)
	}
	e.mu.Lock()
	key, first := e.self, e.lease == 0
	e.mu.Unlock()
	raw, _ := json.Marshal(self)
	kept := false
	if !first {
		resp, err := e.client.Txn(rctx).If(clientv3.Compare(clientv3.Version(key), ">", 0)).
			Then(clientv3.OpPut(key, string(raw), clientv3.WithLease(grant.ID))).Commit()
		if err != nil {
			return nil, fmt.Errorf("etcd membership: register again: %w", err)
		}
		if kept = resp.Succeeded; !kept {
			// The others saw this member leave: the node hears it first (it gives its servers up), then joins anew.
			e.mu.Lock()
			members := maps.Clone(e.members)
			delete(members, key)
			e.incarnation++
			self.ID = memberID(e.incarnation, e.system)
			e.self = dir + self.ID
			key = e.self
			e.mu.Unlock()
			e.publish(members)
			raw, _ = json.Marshal(self)
		}
	}
	if !kept {
		if _, err := e.client.Put(rctx, key, string(raw), clientv3.WithLease(grant.ID)); err != nil {
			return nil, fmt.Errorf("etcd membership: register: %w", err)
		}
	}
	alive, err := e.client.KeepAlive(ctx, grant.ID)
	if err != nil {
		return nil, fmt.Errorf("etcd membership: keep the lease alive: %w", err)
	}
	e.mu.Lock()
	old := e.lease
	e.lease = grant.ID
	e.registered = true
	e.mu.Unlock()
	if old != 0 {
		// The key moved off it (or is gone): revoking it deletes nothing and stops its keep-alive, if any.
		_, _ = e.client.Revoke(rctx, old)
	}
	return alive, nil
}

// keepRegistered drains the keep-alive's answers and registers the member again whenever the keep-alive ends or
// its key is deleted, until ctx ends.
func (e *Etcd) keepRegistered(ctx context.Context, dir string, self *record, ttl time.Duration, alive <-chan *clientv3.LeaseKeepAliveResponse) {
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-alive:
			if ok {
				continue // the client renews; answers are only drained
			}
		case <-e.rejoin:
		}
		if ctx.Err() != nil {
			return
		}
		e.mu.Lock()
		e.registered = false
		e.mu.Unlock()
		e.Logger.Warn("etcd membership: this member's registration lapsed (etcd unreachable or restarted, or this process stalled); registering again")
		lost := time.Now()
		// Wait 100 ms, then try; the waits between tries double to 1 s.
		if retry.Sleep(ctx, 100*time.Millisecond) != nil {
			return
		}
		var err error
		alive, err = retry.Do(ctx, retry.Backoff{Initial: 200 * time.Millisecond, Max: time.Second, Multiplier: 2}.Schedule(),
			retry.Options{}, func() (<-chan *clientv3.LeaseKeepAliveResponse, error) { return e.put(ctx, dir, self, ttl) })
		if err != nil {
			return // only when ctx ended
		}
		e.mu.Lock()
		id := self.ID
		e.mu.Unlock()
		e.Logger.Info("etcd membership: registered again", "member", id, "after", time.Since(lost).Round(time.Millisecond).String())
	}
}

// load reads every member and publishes them; it returns the revision read, to watch from.
func (e *Etcd) load(ctx context.Context, dir string) (int64, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := e.client.Get(rctx, dir, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("etcd membership: read the members: %w", err)
	}
	members := map[string]*cluster.Member{}
	leases := map[string]clientv3.LeaseID{}
	for _, kv := range resp.Kvs {
		if m, ok := decode(kv.Value); ok {
			members[string(kv.Key)] = m
			leases[string(kv.Key)] = clientv3.LeaseID(kv.Lease)
		}
	}
	e.mu.Lock()
	e.leaseOf = leases
	e.mu.Unlock()
	e.publish(members)
	return resp.Header.Revision, nil
}

// follow watches the members' keys from after rev until ctx ends; a broken watch is resumed from the last revision
// seen, or the members are read again when etcd no longer has it (compacted).
func (e *Etcd) follow(ctx context.Context, dir string, rev int64) {
	defer close(e.done)
	for ctx.Err() == nil {
		w := e.client.Watch(clientv3.WithRequireLeader(ctx), dir, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		for resp := range w {
			if err := resp.Err(); err != nil {
				if errors.Is(err, context.Canceled) {
					return
				}
				e.Logger.Warn("etcd membership: watch broke; resuming", "error", err)
				if resp.CompactRevision > 0 {
					if r, err := e.load(ctx, dir); err == nil {
						rev = r
					}
				}
				break
			}
			e.apply(resp.Events)
			rev = resp.Header.Revision
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// apply folds watch events into the member list and publishes it.
func (e *Etcd) apply(events []*clientv3.Event) {
	e.mu.Lock()
	members := make(map[string]*cluster.Member, len(e.members)+len(events))
	for k, m := range e.members {
		members[k] = m
	}
	self, rejoin := e.self, e.rejoin
	e.mu.Unlock()
	for i, ev := range events {
		key := string(ev.Kv.Key)
		switch ev.Type {
		case mvccpb.PUT:
			if m, ok := decode(ev.Kv.Value); ok {
				members[key] = m
				e.mu.Lock()
				e.leaseOf[key] = clientv3.LeaseID(ev.Kv.Lease)
				e.mu.Unlock()
			}
		case mvccpb.DELETE:
			delete(members, key)
			e.mu.Lock()
			delete(e.leaseOf, key)
			e.mu.Unlock()
			if key == self {
				// The others saw this member leave: the node must learn that it left (it gives its servers up,
				// which the others may take over), even if a later event of the batch has it back; and it registers
				// again.
				select {
				case rejoin <- struct{}{}:
				default:
				}
				if i < len(events)-1 {
					e.publish(members)
					members = maps.Clone(members)
				}
			}
		}
	}
	e.publish(members)
}

// publish makes members the cluster's membership.
func (e *Etcd) publish(members map[string]*cluster.Member) {
	e.mu.Lock()
	e.members = members
	list := make(cluster.Members, 0, len(members))
	for _, m := range members {
		list = append(list, m)
	}
	fn := e.publishFn
	e.mu.Unlock()
	fn(list)
}

func decode(raw []byte) (*cluster.Member, bool) {
	var r record
	if json.Unmarshal(raw, &r) != nil || r.ID == "" || r.Host == "" {
		return nil, false
	}
	return &cluster.Member{Id: r.ID, Host: r.Host, Port: r.Port, Kinds: r.Kinds}, true
}

// Shutdown implements cluster.ClusterProvider: the member's lease is revoked (its key goes at once, so the others
// see it leave now rather than after the TTL), and the watch stops.
func (e *Etcd) Shutdown(bool) error {
	e.mu.Lock()
	client, lease, cancel, done := e.client, e.lease, e.cancel, e.done
	e.mu.Unlock()
	if client == nil {
		return nil
	}
	var err error
	if lease != 0 {
		ctx, c := context.WithTimeout(context.Background(), 3*time.Second)
		_, err = client.Revoke(ctx, lease)
		c()
	}
	cancel()
	<-done
	return errors.Join(err, client.Close())
}

// Evict implements placement.Evictor: it revokes the lease of the member whose remoting listens at addr, which
// deletes its key, so that every node sees it leave now rather than when the lease lapses. The caller has confirmed
// that the member is dead (placement.Suspicion); were it alive after all, it would learn that it left (its watch
// sees its key deleted, or its keep-alive ends) and give its servers up, like a member whose lease lapsed. This
// node is never evicted. false when no other member listens at addr.
func (e *Etcd) Evict(ctx context.Context, addr string) (bool, error) {
	e.mu.Lock()
	client, self := e.client, e.self
	var lease clientv3.LeaseID
	for key, m := range e.members {
		if key != self && m.Address() == addr {
			lease = e.leaseOf[key]
			break
		}
	}
	e.mu.Unlock()
	if client == nil || lease == 0 {
		return false, nil
	}
	if _, err := client.Revoke(ctx, lease); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return false, nil // it lapsed or was revoked meanwhile
		}
		return false, fmt.Errorf("etcd membership: revoke the lease of the member at %s: %w", addr, err)
	}
	return true, nil
}

// Registered reports whether this member's key is kept alive now (false from when its keep-alive ended until it
// registered again): while it is false, the other members may see this one leave.
func (e *Etcd) Registered() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.registered
}
