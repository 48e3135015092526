package lifecycle_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/mcpgw/aggregator/actors/lifecycle"
	"github.com/mcpgw/aggregator/persistence"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
)

func TestGateDrains(t *testing.T) {
	var g lifecycle.Gate
	if !g.Enter() || !g.Enter() {
		t.Fatal("an open gate refused a call")
	}
	idle, n := g.Close()
	if n != 2 {
		t.Fatalf("Close reports %d calls in flight, want 2", n)
	}
	if g.Enter() {
		t.Fatal("a closed gate admitted a call")
	}
	g.Leave()
	select {
	case <-idle:
		t.Fatal("idle before the last call left")
	default:
	}
	g.Leave()
	<-idle // closed once the last call left
	if again, n := g.Close(); n != 0 || again == nil {
		t.Fatalf("Close again = %d in flight", n)
	}
}

func TestHTTPHealth(t *testing.T) {
	tests := []struct {
		name        string
		status      int
		ok, counted bool
	}{
		{name: "2xx is healthy", status: 204, ok: true, counted: true},
		{name: "4xx is reported, not counted", status: 404},
		{name: "5xx is a failure", status: 503, counted: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(tt.status) }))
			defer srv.Close()
			ok, counted, msg := lifecycle.HTTPHealth(context.Background(), srv.Client(), srv.URL)
			if ok != tt.ok || counted != tt.counted || ok != (msg == "") {
				t.Fatalf("HTTPHealth = %v, %v, %q; want ok %v counted %v", ok, counted, msg, tt.ok, tt.counted)
			}
		})
	}
}

// The state machine refuses a server that skips CONNECTING.
func ExampleCheck() {
	fmt.Println(lifecycle.Check(persistence.StatusDisconnected, persistence.StatusConnecting))
	fmt.Println(lifecycle.Check(persistence.StatusDisconnected, persistence.StatusConnected))
	// Output:
	// <nil>
	// invalid state transition DISCONNECTED -> CONNECTED
}

func TestStartupFollow(t *testing.T) {
	const reset = "no session after (re)start"
	tests := []struct {
		name    string
		evt     any
		settles bool
	}{
		{name: "connected after connecting", evt: &pb.ServerStatusChanged{ServerId: "s", From: persistence.StatusConnecting, To: persistence.StatusConnected}, settles: true},
		{name: "failed", evt: &pb.ServerStatusChanged{ServerId: "s", From: persistence.StatusConnecting, To: persistence.StatusError}, settles: true},
		{name: "removed", evt: &pb.ServerRemoved{ServerId: "s"}, settles: true},
		{name: "disconnected by an admin", evt: &pb.ServerStatusChanged{ServerId: "s", From: persistence.StatusConnected, To: persistence.StatusDisconnected}, settles: true},
		{name: "the reset of a stale status", evt: &pb.ServerStatusChanged{ServerId: "s", From: persistence.StatusConnected, To: persistence.StatusDisconnected, Reason: reset}},
		{name: "an attempt cancelled", evt: &pb.ServerStatusChanged{ServerId: "s", From: persistence.StatusConnecting, To: persistence.StatusDisconnected}},
		{name: "connecting", evt: &pb.ServerStatusChanged{ServerId: "s", From: persistence.StatusDisconnected, To: persistence.StatusConnecting}},
		{name: "another server", evt: &pb.ServerRemoved{ServerId: "other"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := lifecycle.NewStartup([]string{"s"})
			w.Follow(tt.evt, reset)
			select {
			case <-w.Done():
				if !tt.settles {
					t.Fatal("settled, want still pending")
				}
			default:
				if tt.settles {
					t.Fatalf("still pending %v, want settled", w.Pending())
				}
			}
		})
	}
	if w := lifecycle.NewStartup(nil); w.Done() == nil {
		t.Fatal("no Done channel")
	} else {
		<-w.Done() // nothing to wait for: closed at once
	}
}

func TestNextHealth(t *testing.T) {
	tests := []struct {
		name         string
		failures     int
		status       string
		ok, counted  bool
		wantFailures int
		wantStep     int
	}{
		{name: "success resets", failures: 2, status: persistence.StatusConnected, ok: true, counted: true, wantStep: lifecycle.HealthSteady},
		{name: "success of a degraded server", failures: 2, status: persistence.StatusDegraded, ok: true, counted: true, wantStep: lifecycle.HealthRecovered},
		{name: "a 4xx is not counted", failures: 1, status: persistence.StatusConnected, wantFailures: 1, wantStep: lifecycle.HealthSteady},
		{name: "first failure", status: persistence.StatusConnected, counted: true, wantFailures: 1, wantStep: lifecycle.HealthSteady},
		{name: "second failure degrades", failures: 1, status: persistence.StatusConnected, counted: true, wantFailures: 2, wantStep: lifecycle.HealthDegraded},
		{name: "third failure ends the session", failures: 2, status: persistence.StatusDegraded, counted: true, wantFailures: 3, wantStep: lifecycle.HealthFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, step := lifecycle.NextHealth(tt.failures, tt.status, tt.ok, tt.counted)
			if f != tt.wantFailures || step != tt.wantStep {
				t.Fatalf("NextHealth = %d, %d; want %d, %d", f, step, tt.wantFailures, tt.wantStep)
			}
		})
	}
}
