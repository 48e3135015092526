package actors

import (
	"github.com/mcpgw/aggregator/actors/internal/msg"
	"github.com/mcpgw/aggregator/actors/lifecycle"
	"github.com/mcpgw/aggregator/actors/routing"
)

// CanTransition reports whether the lifecycle state machine allows from -> to (lifecycle.CanTransition).
func CanTransition(from, to string) bool { return lifecycle.CanTransition(from, to) }

// ErrInvalidTransition is returned for a transition the state machine refuses.
type ErrInvalidTransition = lifecycle.ErrInvalidTransition

// checkTransition returns ErrInvalidTransition when from -> to is not allowed.
func checkTransition(from, to string) error { return lifecycle.Check(from, to) }

// callable reports whether a server in this state executes tool calls (DEGRADED does, with a warning).
func callable(status string) bool { return routing.CallableStatus(status) }

// callGate counts the node's tool calls in flight so that a shutdown can wait for them (lifecycle.Gate).
type callGate struct{ g lifecycle.Gate }

func (c *callGate) enter() bool                   { return c.g.Enter() }
func (c *callGate) leave()                        { c.g.Leave() }
func (c *callGate) close() (<-chan struct{}, int) { return c.g.Close() }

// The local messages shared with the server actor (package msg).
type (
	askReply               = msg.Reply
	firstDiscovery         = msg.FirstDiscovery
	panicForTest           = msg.PanicForTest
	cancelCallsForShutdown = msg.CancelCallsForShutdown
)
