// Package internal is the root of the module's shared building blocks that are not an API: Go refuses an import
// of anything below internal/ from outside github.com/mcpgw/aggregator, so their names can follow the daemon's
// contract and change with it, and other programs cannot come to depend on them. It holds no code itself.
//
//   - connconfig: a server's connection_config, every rule about it in one place (validate, parse, resolve
//     ${VAR} references, mask in answers, the plain-http rule, the daemon's own settings).
//   - strictjson: strict reading of JSON request bodies with field errors in the contract's 422 shape.
//   - loadgen: the benchmarks' load generator (closed and open loops, REST and MCP callers) and the starters of
//     the echo backend and daemon processes they measure, shared by cmd/aggregator's benchmarks and
//     cmd/peer-compare.
//   - retry: the one exponential backoff with jitter and the one retry loop (Do), over cenkalti/backoff.
//   - gopool: goroutines kept between the call path's functions, so that each call does not grow a new stack, and
//     functions run after a fixed delay on one timer (Later) rather than a timer and a goroutine per call.
//   - canonjson: the canonical form of a JSON value that definition and pin hashes are taken over (encoding/json's
//     bytes for what it decodes), written from the tokens without decoding into maps.
//   - toolresult: a text-only tools/call result encoded as json.Marshal writes it, without reflection (the call
//     path's answer on /mcp and REST).
//   - telemetry: OpenTelemetry tracing (setup from the OTEL_* variables, trace-context carriers, the MCP server
//     and client spans, relayed and forwarded requests, trace ids on log lines); telemetrytest records a test's
//     spans.
//
// Code shared only inside one subtree stays in that subtree's internal/ (http/internal, persistence/internal,
// search/internal).
package internal
