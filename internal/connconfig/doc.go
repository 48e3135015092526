// Package connconfig is a server's connection_config (BR-001): the JSON shape the REST API and the meta-tools
// accept, the store keeps (sealed, as opaque bytes) and the actors connect with. Every rule about it lives here
// once: which keys each transport takes (Keys), how a body is checked (CheckInto, in the 422 shape of
// system-contract.md), how the stored bytes are read (Parse) and resolved at connect time (Resolve, ${VAR}
// references), which parts are secret and how answers show them (Mask, and the Rewrite functions the actors use to
// scrub error texts), when plain http is allowed (PlainHTTPProblem), and which environment variables are the
// daemon's own and may never be referenced or inherited (IsDaemonSetting).
//
// The front ends (http/internal/validate for REST and the meta-tools, http/internal/view for answers) and the
// actors (transport, scrubbing of error texts, the stdio child's environment) each import this package rather than
// each other, so a rule cannot drift between the place that accepts a config and the place that uses it. What
// needs the running daemon (its outbound policy, a live session's secrets) stays with its owner and is handed in
// (Checks).
//
// The package is internal (the top-level internal/ of the module) because its names are this daemon's contract,
// not an API: nothing outside github.com/mcpgw/aggregator may import it, so it can change with the contract.
package connconfig
