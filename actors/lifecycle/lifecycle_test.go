package lifecycle_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/mcpgw/aggregator/actors/lifecycle"
	"github.com/mcpgw/aggregator/persistence"
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
