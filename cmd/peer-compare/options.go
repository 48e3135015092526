package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Pinned peer versions: a rerun measures the same peers until someone moves the pins (make variables
// MCP_HUB_VERSION and VMCP_VERSION, or the flags).
const (
	defaultHubVersion  = "4.2.1"   // npm mcp-hub, `npm view mcp-hub version` on 2026-11-27
	defaultVMCPVersion = "v0.47.0" // github.com/stacklok/toolhive/cmd/vmcp; v0.63.0 needs Go 1.27
)

// options are the command-line flags; every knob is bounded so a mistyped value fails fast.
type options struct {
	scratch     string        // where peers are installed and binaries built; reused between runs
	rounds      int           // interleaved rounds over every path
	calls       int           // one-caller calls measured per path and round
	warmup      int           // one-caller calls discarded per path and round before measuring
	callers     int           // concurrent callers of the throughput phase
	duration    time.Duration // length of the throughput phase per path and round
	callTimeout time.Duration // one call; a slower call counts as an error
	hubVersion  string
	vmcpVersion string
	skip        string // comma-separated peers not to install or run: mcp-hub, vmcp
	split       bool   // load generator and backend on half the CPUs, daemon and peers on the other half
}

func defaultScratch() string { return filepath.Join(os.TempDir(), "mcp-aggregator-compare") }

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("peer-compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.scratch, "scratch", defaultScratch(), "folder for the peers, the built binaries and run files (kept as a cache)")
	fs.IntVar(&o.rounds, "rounds", 3, "interleaved rounds over every path")
	fs.IntVar(&o.calls, "calls", 1000, "one-caller calls measured per path and round (p50/p99)")
	fs.IntVar(&o.warmup, "warmup", 200, "calls discarded per path and round before each phase")
	fs.IntVar(&o.callers, "callers", 32, "concurrent callers of the throughput phase")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "length of the throughput phase per path and round")
	fs.DurationVar(&o.callTimeout, "call-timeout", 10*time.Second, "timeout of one call (a slower call is an error)")
	fs.StringVar(&o.hubVersion, "mcp-hub-version", defaultHubVersion, "npm version of mcp-hub")
	fs.StringVar(&o.vmcpVersion, "vmcp-version", defaultVMCPVersion, "module version of github.com/stacklok/toolhive/cmd/vmcp")
	fs.StringVar(&o.skip, "skip", "", "comma-separated peers to leave out: mcp-hub, vmcp, haproxy, go-proxy, fasthttp-proxy (the floors)")
	fs.BoolVar(&o.split, "split", false, "run the load generator and the backend on the first half of this program's CPUs and the daemon and every peer on the other half (Linux); default: every process on every CPU")
	if err := fs.Parse(args); err != nil {
		return o, fmt.Errorf("parse flags: %w", err)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var errs []error
	check := func(ok bool, format string, a ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, a...))
		}
	}
	check(o.scratch != "", "-scratch must not be empty")
	check(o.rounds >= 1 && o.rounds <= 100, "-rounds %d: want 1 to 100", o.rounds)
	check(o.calls >= 10 && o.calls <= 1000000, "-calls %d: want 10 to 1000000", o.calls)
	check(o.warmup >= 0 && o.warmup <= 1000000, "-warmup %d: want 0 to 1000000", o.warmup)
	check(o.callers >= 1 && o.callers <= 1024, "-callers %d: want 1 to 1024", o.callers)
	check(o.duration >= 100*time.Millisecond && o.duration <= time.Hour, "-duration %v: want 100ms to 1h", o.duration)
	check(o.callTimeout >= time.Millisecond && o.callTimeout <= 10*time.Minute, "-call-timeout %v: want 1ms to 10m", o.callTimeout)
	check(versionRe.MatchString(o.hubVersion), "-mcp-hub-version %q: want a version like 4.2.1", o.hubVersion)
	check(versionRe.MatchString(o.vmcpVersion), "-vmcp-version %q: want a version like v0.47.0", o.vmcpVersion)
	for _, p := range splitList(o.skip) {
		check(p == peerHub || p == peerVMCP || p == floorHAProxy || p == floorGoProxy || p == floorFastProxy,
			"-skip %q: known peers are %s, %s, %s, %s and %s", p, peerHub, peerVMCP, floorHAProxy, floorGoProxy, floorFastProxy)
	}
	return o, errors.Join(errs...)
}

// skipped says whether the peer was left out with -skip.
func (o options) skipped(peer string) bool {
	for _, p := range splitList(o.skip) {
		if p == peer {
			return true
		}
	}
	return false
}

// splitList splits a comma-separated list, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// versionRe is what a pinned version may look like: it becomes part of a folder name and a package argument.
var versionRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$`)
