package server

import (
	"context"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgw/aggregator/internal/gopool"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// logRelay is a client's Relay that records the log messages it is given.
type logRelay struct{ logs chan string }

func (r *logRelay) Supports(string) bool { return false }
func (r *logRelay) Elicit(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	return nil, context.Canceled
}
func (r *logRelay) CreateMessage(context.Context, *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
	return nil, context.Canceled
}
func (r *logRelay) ListRoots(context.Context, *mcp.ListRootsParams) (*mcp.ListRootsResult, error) {
	return nil, context.Canceled
}
func (r *logRelay) Log(_ context.Context, p *mcp.LoggingMessageParams) {
	s, _ := p.Data.(string)
	r.logs <- s
}

// TestAttachRelayGrace: a relayed call's relay outlives the call's answer by the node's grace (the shared Later): a
// log message the backend sent just before its result and that arrives after it still reaches the client, and
// once the grace has passed the relay is gone from the registry (its actor stopped).
func TestAttachRelayGrace(t *testing.T) {
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	logMsg := func(text string) *pb.RelayLog {
		return &pb.RelayLog{ParamsJson: []byte(`{"level":"info","data":"` + text + `"}`)}
	}

	// Within the grace (a long one: nothing ends the relay during the test).
	r := &logRelay{logs: make(chan string, 4)}
	call := &pb.CallTool{}
	stop := AttachRelay(WithRelay(context.Background(), r), sys, call, gopool.NewLater(time.Hour))
	if stop == nil || call.RelayTo == nil {
		t.Fatal("no relay attached for a caller with a Relay")
	}
	pid := actor.NewPID(call.RelayTo.Address, call.RelayTo.Id)
	stop() // the call has answered
	sys.Root.Send(pid, logMsg("late"))
	select {
	case got := <-r.logs:
		if got != "late" {
			t.Fatalf("log %q, want late", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a log message arriving within the grace did not reach the client")
	}

	// After the grace: the relay leaves the registry.
	call = &pb.CallTool{}
	stop = AttachRelay(WithRelay(context.Background(), r), sys, call, gopool.NewLater(time.Millisecond))
	pid = actor.NewPID(call.RelayTo.Address, call.RelayTo.Id)
	sys.Root.Send(pid, logMsg("during")) // spawns the relay's actor
	<-r.logs
	stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := sys.ProcessRegistry.Get(pid); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the relay was still registered long after its grace")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
