package actors

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

// TestRouterOrdersStatusByEpochAndSeq: status changes of one server can reach a router out of order when ownership
// moved between processes (a late notice from the earlier owner). The router applies a change only when its (lease
// epoch, sequence) is newer than the last it applied; changes without an epoch (seen only by this process) apply as
// they come.
func TestRouterOrdersStatusByEpochAndSeq(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(context.Background(), t.TempDir()+"/agg.db")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv := persistence.Server{Name: "s", TransportType: persistence.TransportSTDIO, ConnectionConfig: json.RawMessage(`{"command":"true"}`),
		Status: persistence.StatusDisconnected}
	if err := st.CreateServer(context.Background(), &srv, 0); err != nil {
		t.Fatal(err)
	}
	sys, err := Start(context.Background(), Deps{Store: st, Config: DefaultConfig()})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Shutdown(context.Background())
	steps := []struct {
		epoch, seq int64
		to, want   string
	}{
		{2, 10, persistence.StatusConnecting, persistence.StatusConnecting},
		{2, 11, persistence.StatusConnected, persistence.StatusConnected},
		{1, 99, persistence.StatusError, persistence.StatusConnected},        // the earlier owner's late notice
		{2, 11, persistence.StatusDisconnected, persistence.StatusConnected}, // a duplicate
		{0, 0, persistence.StatusDisconnected, persistence.StatusDisconnected},
		{3, 1, persistence.StatusDegraded, persistence.StatusDegraded}, // a newer owner
		{2, 50, persistence.StatusError, persistence.StatusDegraded},
	}
	for i, st := range steps {
		sys.sys.Root.Send(sys.router, &pb.ServerStatusChanged{ServerId: srv.ID, ServerName: srv.Name, To: st.to, Epoch: st.epoch, Seq: st.seq})
		if _, err := sys.askActor(context.Background(), sys.router, &readyMsg{}, time.Second); err != nil {
			t.Fatal(err)
		}
		if got, _ := sys.Routes().Server(srv.ID); got.Status != st.want {
			t.Fatalf("step %d (epoch %d seq %d -> %s): table shows %s, want %s", i, st.epoch, st.seq, st.to, got.Status, st.want)
		}
	}
}
