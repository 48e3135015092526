// Package backend opens the guarded transport of one MCP client session for a server registration: the stdio
// child (its minimal environment, its own process group, recorded so that a later daemon can reap what a killed
// one left behind, and newline-delimited JSON-RPC read through the message limit), or the SSE/streamable HTTP
// client (the outbound policy on every dial, configured headers for the endpoint's origin only, the hop header
// for loop detection, every connection closed with the session), with notification pacing and ordering, and the
// secret values to scrub from error texts.
//
// It exists so that the actors of package actors only drive sessions: Dial is the one entry point the server and
// proxy actors use, and the front ends use the outbound policy (Outbound) and the loop-detection names
// (HopHeader, InstanceMetaKey, ViaMetaKey) from here. It imports nothing of package actors.
package backend
