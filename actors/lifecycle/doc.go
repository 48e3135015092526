// Package lifecycle holds the rules a server actor lives by that need no actor to state: the lifecycle state
// machine (CanTransition), the ordered queue of its store writes (Writer), what a health URL's answer means
// (HTTPHealth), and the gate that counts the node's tool calls in flight so that a shutdown can drain them (Gate).
//
// It exists so that package actors keeps the server actor's message handling while these rules, each small and
// testable alone, live apart from it. It imports nothing of package actors nor protoactor.
package lifecycle
