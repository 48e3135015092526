package placement

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Reconciler makes sure every server that should be served has an owner: one pass at Start, then one every Every
// (a process on the same store may have stopped) and one soon after each Soon (a change of the cluster's
// membership), until Stop. A pass plans (PlanPass) and activates what it planned on this node through Activate.
// Safe for concurrent use: Soon and Started are called from the membership's goroutines.
type Reconciler struct {
	Store   PassStore
	Members *Members // nil on a single node
	// Hosted reports whether this node hosts the server's actor now.
	Hosted func(id string) bool
	// Activate has this node host the server's actor (dead: a departed member whose lease it may take over).
	Activate func(ctx context.Context, id, dead string) (*actor.PID, error)
	// Stopping reports whether an activation failed because the node is shutting down (the pass ends quietly).
	Stopping func(err error) bool
	Every    time.Duration
	Logger   *slog.Logger

	once    sync.Once
	now     chan struct{}
	started atomic.Bool
	mu      sync.Mutex
	ctx     context.Context // the background passes' (ended by Stop)
	stop    context.CancelFunc
	unowned atomic.Value // map[string]bool
}

func (r *Reconciler) init() { r.once.Do(func() { r.now = make(chan struct{}, 1) }) }

// Start runs a first pass now and returns the actors it activated; Run then keeps reconciling in the background
// until Stop. A first pass that fails is returned.
func (r *Reconciler) Start(ctx context.Context) ([]*actor.PID, error) {
	r.init()
	rctx, cancel := context.WithCancel(context.Background())
	r.mu.Lock()
	r.stop, r.ctx = cancel, rctx
	r.mu.Unlock()
	r.started.Store(true)
	activated, err := r.Pass(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	return activated, nil
}

// Run keeps reconciling in the background after Start, until Stop.
func (r *Reconciler) Run() {
	r.mu.Lock()
	rctx := r.ctx
	r.mu.Unlock()
	go func() {
		tick := time.NewTicker(r.Every)
		defer tick.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-tick.C:
			case <-r.now:
			}
			if _, err := r.Pass(rctx); err != nil && rctx.Err() == nil {
				r.Logger.Warn("reconcile: cannot activate servers now", "error", err)
			}
		}
	}()
}

// Started reports whether Start has been called.
func (r *Reconciler) Started() bool { return r.started.Load() }

// Soon asks for a pass (coalesced with one already asked for; before Start, the first pass happens anyway).
func (r *Reconciler) Soon() {
	r.init()
	select {
	case r.now <- struct{}{}:
	default:
	}
}

// Stop ends the background passes.
func (r *Reconciler) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stop != nil {
		r.stop()
	}
}

// Unowned is the set of servers no cluster member held at the last pass (nil before one).
func (r *Reconciler) Unowned() map[string]bool {
	u, _ := r.unowned.Load().(map[string]bool)
	return u
}

// Pass is one reconciliation pass: it activates every server that should be served and that this node should
// host, and returns the actors it activated.
func (r *Reconciler) Pass(ctx context.Context) ([]*actor.PID, error) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pass, err := PlanPass(sctx, r.Store, r.Members, r.Hosted)
	if err != nil || pass == nil {
		return nil, err // (nil, nil: out of the membership, it hosts nothing until it rejoins)
	}
	r.unowned.Store(pass.Unowned)
	var activated []*actor.PID
	for _, a := range pass.Activate {
		pid, err := r.Activate(sctx, a.ServerID, a.Dead)
		if err != nil {
			if r.Stopping(err) || ctx.Err() != nil {
				return activated, nil
			}
			r.Logger.Warn("reconcile: activate server", "server_id", a.ServerID, "server", pass.Names[a.ServerID], "error", err)
			continue
		}
		activated = append(activated, pid)
	}
	return activated, nil
}

// Share reports, for the scrape-time gauges, whether this node reports server id: in a cluster every node sees
// every server, so each reports only its share (the servers it owns, and those nobody owns that the rendezvous
// hash assigns to it), and the sum over the nodes is the cluster's. owned reports whether this node holds id's
// lease.
func (r *Reconciler) Share(node string, owned func(id string) bool) func(id string) bool {
	unowned := r.Unowned()
	return func(id string) bool {
		if owned(id) {
			return true
		}
		if unowned[id] {
			chosen, _ := r.Members.Choose(id)
			return chosen == node
		}
		return false
	}
}
