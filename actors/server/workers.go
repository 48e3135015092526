package server

import "github.com/mcpgw/aggregator/internal/gopool"

// The server actor's calls run on goroutines kept between calls (issue 26, internal/gopool): a call's goroutine
// goes deep (the HTTP client and its layers), and a new one grew its stack two or three times on every call (5 % of
// a call's CPU in the daemon's profile).

// mailboxThroughput is how many messages a mailbox run handles before it lets other goroutines run: protoactor's
// default dispatcher's.
const mailboxThroughput = 300

// dispatcher runs the server actor's mailbox on goroutines kept between runs (issue 26): protoactor's default
// dispatcher starts a goroutine for each run, and on the call path nearly every call is a run of its own (the
// mailbox empties between calls), whose new small stack grew through Receive and callTool on every call (1.3 % of
// the process's CPU in BenchmarkCallPath's profile, runtime.newstack under the mailbox). Messages are handled as
// before: one run at a time, in order (the mailbox schedules a run only when none is under way).
type dispatcher struct{ p *gopool.Pool }

// Schedule implements actor.Dispatcher.
func (d dispatcher) Schedule(fn func()) { d.p.Go(fn) }

// Throughput implements actor.Dispatcher.
func (d dispatcher) Throughput() int { return mailboxThroughput }
