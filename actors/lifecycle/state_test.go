package lifecycle

import (
	"errors"
	"testing"

	p "github.com/mcpgw/aggregator/persistence"
)

func TestTransitionTable(t *testing.T) {
	all := []string{p.StatusDisconnected, p.StatusConnecting, p.StatusConnected, p.StatusDegraded, p.StatusError, p.StatusDisconnecting}
	allowed := map[[2]string]bool{
		{p.StatusDisconnected, p.StatusConnecting}:    true,
		{p.StatusConnecting, p.StatusConnected}:       true,
		{p.StatusConnecting, p.StatusError}:           true,
		{p.StatusConnecting, p.StatusDisconnected}:    true,
		{p.StatusConnected, p.StatusDisconnected}:     true,
		{p.StatusConnected, p.StatusDisconnecting}:    true,
		{p.StatusConnected, p.StatusDegraded}:         true,
		{p.StatusConnected, p.StatusError}:            true,
		{p.StatusDegraded, p.StatusConnected}:         true,
		{p.StatusDegraded, p.StatusError}:             true,
		{p.StatusDegraded, p.StatusDisconnected}:      true,
		{p.StatusDegraded, p.StatusDisconnecting}:     true,
		{p.StatusDisconnecting, p.StatusDisconnected}: true,
		{p.StatusError, p.StatusConnecting}:           true,
		{p.StatusError, p.StatusDisconnected}:         true,
	}
	for _, from := range all {
		for _, to := range all {
			want := allowed[[2]string{from, to}]
			if got := CanTransition(from, to); got != want {
				t.Errorf("CanTransition(%s, %s) = %v, want %v", from, to, got, want)
			}
			err := Check(from, to)
			var inv ErrInvalidTransition
			if want && err != nil {
				t.Errorf("Check(%s, %s) = %v, want nil", from, to, err)
			}
			if !want && !errors.As(err, &inv) {
				t.Errorf("Check(%s, %s) = %v, want ErrInvalidTransition", from, to, err)
			}
		}
	}
	// Spot checks of refusals the contract cares about.
	for _, c := range [][2]string{
		{p.StatusDisconnected, p.StatusConnected}, // must pass through CONNECTING
		{p.StatusError, p.StatusConnected},        // reconnect() goes through CONNECTING
		{p.StatusDisconnected, p.StatusDegraded},
		{p.StatusDisconnecting, p.StatusConnected},
	} {
		if CanTransition(c[0], c[1]) {
			t.Errorf("%s -> %s must be refused", c[0], c[1])
		}
	}
}
