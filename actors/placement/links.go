package placement

import (
	"sync"

	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
)

// Links follows the remoting connections between this node and the others, so that a request in flight to another
// node gives up when a connection it depends on breaks, instead of waiting for its whole timeout (a tool call's is
// the request timeout, a minute by default).
//
// protoactor's remoting loses messages without a word when it tears a connection down: an endpoint writer that
// stops drops what waits in its mailbox (the senders get no dead letter), and the batch whose send failed. Worse, in
// the version we build with, a writer that closes its own connection publishes that the endpoint terminated, which
// stops the writer that replaced it, whose own close stops the next one: under traffic, a burst of such churn
// follows a node that resumes after a freeze (SIGSTOP, a long GC pause), and every request or reply queued in one
// of those writers is gone. A request goes out through this node's writer to the owner and its answer comes back
// through the owner's writer to this node, so both directions are watched: this node's endpoints (protoactor's
// EndpointTerminatedEvent) and the connections the others opened to this node's remoting server (their end is
// seen by a gRPC stream interceptor, which reads the peer's address from the connect request that opens them).
type Links struct {
	mu sync.Mutex
	// broken maps a node's remoting address to a channel closed when a connection with it breaks; a watcher that
	// comes later gets a new one.
	broken map[string]chan struct{}
	// onDown, when set, is told of every broken connection (after the watchers), outside the lock.
	onDown func(addr string)
}

// NewLinks is a node's links, none broken yet.
func NewLinks() *Links {
	return &Links{broken: map[string]chan struct{}{}}
}

// Watch returns a channel closed when a connection with the node at addr breaks from now on, in either direction.
func (l *Links) Watch(addr string) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch, ok := l.broken[addr]
	if !ok {
		ch = make(chan struct{})
		l.broken[addr] = ch
	}
	return ch
}

// Down records that a connection with the node at addr broke: the requests watching it give up.
func (l *Links) Down(addr string) {
	l.mu.Lock()
	if ch, ok := l.broken[addr]; ok {
		close(ch)
		delete(l.broken, addr)
	}
	fn := l.onDown
	l.mu.Unlock()
	if fn != nil {
		fn(addr)
	}
}

// OnDown has fn told of every connection with another node that breaks (Suspicion.Suspect: the node may be dead);
// fn must not block.
func (l *Links) OnDown(fn func(addr string)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.onDown = fn
}

// Follow watches this node's endpoints to the others (their writers) on the actor system's event stream.
func (l *Links) Follow(es *eventstream.EventStream) *eventstream.Subscription {
	return es.Subscribe(func(evt any) {
		if t, ok := evt.(*remote.EndpointTerminatedEvent); ok {
			l.Down(t.Address)
		}
	})
}

// ServerOption is the gRPC option of this node's remoting server that reports the end of each connection another
// node opened to it (its endpoint writer to this node, which carries the answers to this node's requests).
func (l *Links) ServerOption() grpc.ServerOption {
	return grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		in := &inboundStream{ServerStream: ss}
		err := handler(srv, in)
		if in.peer != "" {
			l.Down(in.peer)
		}
		return err
	})
}

// inboundStream is a remoting stream from another node: its first message, a connect request, names the node's
// address. (The handler reads the stream on the goroutine that runs the interceptor: peer needs no lock.)
type inboundStream struct {
	grpc.ServerStream
	peer string
}

// RecvMsg implements grpc.ServerStream.
func (s *inboundStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil && s.peer == "" {
		if rm, ok := m.(*remote.RemoteMessage); ok {
			if sc := rm.GetConnectRequest().GetServerConnection(); sc != nil {
				s.peer = sc.Address
			}
		}
	}
	return err
}
