package actors

import (
	"context"

	"github.com/mcpgw/aggregator/actors/routing"
	"github.com/mcpgw/aggregator/gateway"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// Errors the Control methods return (wrapped) besides persistence.ErrNotFound and persistence.ErrAlreadyExists;
// declared in package gateway, the use-case layer, so that the front ends map them without importing the actors.
var (
	ErrAskTimeout   = gateway.ErrAskTimeout
	ErrMaxServers   = gateway.ErrMaxServers
	ErrShuttingDown = gateway.ErrShuttingDown
)

// RegisterRequest is a validated registration (gateway.RegisterRequest).
type RegisterRequest = gateway.RegisterRequest

// ConnectResult answers POST /servers/{id}/connect.
type ConnectResult struct {
	ServerID string `json:"server_id"`
	Status   string `json:"status"`
	Message  string `json:"message"`
}

// DisconnectResult answers POST /servers/{id}/disconnect.
type DisconnectResult struct {
	ServerID        string `json:"server_id"`
	Status          string `json:"status"`
	PendingRequests int    `json:"pending_requests"`
	Message         string `json:"message"`
}

// Control is what the HTTP front end and the MCP meta-tools ask of the actor system. Every method asks an actor
// with a deadline and returns ErrAskTimeout rather than hang. Reads that need no actor go to the Store directly.
type Control interface {
	// Register persists a new server and, when AutoConnect is set, starts connecting it; it answers at once
	// whatever the backend does.
	Register(ctx context.Context, r RegisterRequest) (persistence.Server, error)
	// RegisterKeyed is Register under an idempotency key (persistence.Store.CreateServerIdempotent): a retry of a
	// registration the store already holds under k answers that server as stored now, with replayed true, and
	// changes nothing (no second activation, no event).
	RegisterKeyed(ctx context.Context, r RegisterRequest, k persistence.IdempotencyKey) (srv persistence.Server, replayed bool, err error)
	// Update changes a server's editable fields; a changed connection config reconnects a connected server.
	Update(ctx context.Context, id string, p persistence.ServerPatch) (persistence.Server, error)
	// Connect starts connecting (idempotent: an already connected server answers "Server already connected").
	Connect(ctx context.Context, id string) (ConnectResult, error)
	// Disconnect closes the session; force=false lets calls in flight drain for up to 30 s.
	Disconnect(ctx context.Context, id string, force bool) (DisconnectResult, error)
	// Remove disconnects and deletes the server with its tools and history.
	Remove(ctx context.Context, id string) error

	// Routes is the current routing table: a lock-free snapshot, kept current from events.
	Routes() *routing.RouteTable
	// StoredTools are servers' tools as stored (what an admin reads: hidden and withheld tools too), from the
	// routing table once it holds every change of their tools announced before the call (read-your-writes).
	StoredTools(ctx context.Context, ids ...string) (map[string][]persistence.Tool, error)
	// Call runs a tool on the server the route names; progress, when set, receives the backend's progress
	// notifications while the call runs. Errors of the call itself come back in the reply's ErrorInfo.
	Call(ctx context.Context, r routing.Route, argsJSON []byte, progress func(*pb.Progress)) (*pb.CallToolReply, error)
	// RefreshTools starts a discovery of a connected server (UnavailableError when it is not connected).
	RefreshTools(ctx context.Context, id string) error
	// Search ranks the tools of the callable servers for a query (hierarchical or direct).
	Search(ctx context.Context, r SearchRequest) (SearchResponse, error)
	// Skills lists the skills taxonomy with tool counts and embeddings.
	Skills() []SkillInfo
}
