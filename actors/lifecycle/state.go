package lifecycle

import (
	"fmt"

	"github.com/mcpgw/aggregator/persistence"
)

// transitions is the lifecycle state machine: logic-contract.md's table plus the transient DISCONNECTING of
// READING.md, and the disconnects an admin must be able to make from every live or failing state.
var transitions = map[string]map[string]string{
	persistence.StatusDisconnected: {
		persistence.StatusConnecting: "connect()",
	},
	persistence.StatusConnecting: {
		persistence.StatusConnected:    "connection success",
		persistence.StatusError:        "connection failure",
		persistence.StatusDisconnected: "disconnect() cancels the attempt",
	},
	persistence.StatusConnected: {
		persistence.StatusDisconnected:  "disconnect()",
		persistence.StatusDisconnecting: "disconnect() with calls in flight",
		persistence.StatusDegraded:      "2 health failures",
		persistence.StatusError:         "3 health failures or session lost",
	},
	persistence.StatusDegraded: {
		persistence.StatusConnected:     "health check success",
		persistence.StatusError:         "3 health failures or session lost",
		persistence.StatusDisconnected:  "disconnect()",
		persistence.StatusDisconnecting: "disconnect() with calls in flight",
	},
	persistence.StatusDisconnecting: {
		persistence.StatusDisconnected: "calls drained or drain timeout",
	},
	persistence.StatusError: {
		persistence.StatusConnecting:   "reconnect()",
		persistence.StatusDisconnected: "disconnect() stops the retries",
	},
}

// CanTransition reports whether the state machine allows from -> to.
func CanTransition(from, to string) bool {
	_, ok := transitions[from][to]
	return ok
}

// ErrInvalidTransition is returned for a transition the state machine refuses.
type ErrInvalidTransition struct{ From, To string }

func (e ErrInvalidTransition) Error() string {
	return fmt.Sprintf("invalid state transition %s -> %s", e.From, e.To)
}

// Check returns ErrInvalidTransition when from -> to is not allowed.
func Check(from, to string) error {
	if !CanTransition(from, to) {
		return ErrInvalidTransition{From: from, To: to}
	}
	return nil
}
