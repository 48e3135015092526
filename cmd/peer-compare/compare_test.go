package main

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/internal/loadgen"
)

func TestParseOptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string // empty: valid
		check   func(t *testing.T, o options)
	}{
		{name: "defaults", check: func(t *testing.T, o options) {
			if o.rounds != 3 || o.calls != 1000 || o.callers != 32 || o.duration != 5*time.Second ||
				o.hubVersion != defaultHubVersion || o.vmcpVersion != defaultVMCPVersion || o.scratch != defaultScratch() {
				t.Fatalf("defaults: %+v", o)
			}
			if o.skipped(peerHub) || o.skipped(peerVMCP) {
				t.Fatal("no peer is skipped by default")
			}
		}},
		{name: "knobs", args: []string{"-rounds", "1", "-duration", "2s", "-calls", "50", "-scratch", "/tmp/x", "-skip", " vmcp ,"},
			check: func(t *testing.T, o options) {
				if o.rounds != 1 || o.duration != 2*time.Second || o.calls != 50 || o.scratch != "/tmp/x" {
					t.Fatalf("knobs not applied: %+v", o)
				}
				if !o.skipped(peerVMCP) || o.skipped(peerHub) {
					t.Fatalf("-skip vmcp: skipped(vmcp)=%v skipped(mcp-hub)=%v", o.skipped(peerVMCP), o.skipped(peerHub))
				}
			}},
		{name: "zero rounds", args: []string{"-rounds", "0"}, wantErr: "-rounds 0"},
		{name: "tiny duration", args: []string{"-duration", "1ms"}, wantErr: "-duration 1ms"},
		{name: "unknown peer", args: []string{"-skip", "mcphub"}, wantErr: `-skip "mcphub"`},
		{name: "version with a slash", args: []string{"-vmcp-version", "../v1"}, wantErr: "-vmcp-version"},
		{name: "every error at once", args: []string{"-rounds", "0", "-callers", "0"}, wantErr: "-callers 0"},
		{name: "stray argument", args: []string{"now"}, wantErr: "unexpected arguments"},
		{name: "unknown flag", args: []string{"-fast"}, wantErr: "parse flags"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseOptions(tc.args, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, o)
		})
	}
}

func TestIsEchoAlias(t *testing.T) {
	for name, want := range map[string]bool{
		"echo": true, "echo__echo": true, "echo_echo": true, "echo.echo": true,
		"echoecho": false, "tool_0000": false, "echo__tool_0000": false, "other__echo": false, "echo__echo2": false,
	} {
		if got := isEchoAlias(name); got != want {
			t.Errorf("isEchoAlias(%q) = %v, want %v", name, got, want)
		}
	}
}

// lat is n successful calls of d each.
func lat(n int, d time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

func TestFormatTable(t *testing.T) {
	paths := []pathResult{
		{key: pathDirect, label: "direct", one: loadgen.Result{Lat: lat(100, time.Millisecond)}, oneP50: []time.Duration{time.Millisecond, 1100 * time.Microsecond},
			many: loadgen.Result{Lat: lat(2000, time.Millisecond), Elapsed: 2 * time.Second}, manyPS: []float64{1100, 900.4}},
		{key: pathREST, label: "REST", one: loadgen.Result{Lat: lat(100, 2*time.Millisecond)}, oneP50: []time.Duration{2 * time.Millisecond},
			many: loadgen.Result{Lat: lat(1000, time.Millisecond), Elapsed: 2 * time.Second}},
		{key: peerVMCP, label: "vmcp", one: loadgen.Result{Lat: lat(100, 7500*time.Microsecond)}, oneP50: []time.Duration{7500 * time.Microsecond},
			many: loadgen.Result{Lat: lat(2600, time.Millisecond), Errs: 1400, Elapsed: 2 * time.Second, LastErr: errors.New("EOF")}},
		{key: peerHub, label: "mcp-hub", skipped: "npm not found | really\n(see log)"},
	}
	got := formatTable(paths, 32)
	want := `| path | p50, 1 caller | p99, 1 caller | p50 ÷ direct | calls/s, 32 callers | errors, 32 callers | calls/s ÷ direct |
|---|---:|---:|---:|---:|---:|---:|
| direct | 1.00 ms | 1.00 ms | 1.00× | 1,000 | 0 | 1.00× |
| REST | 2.00 ms | 2.00 ms | 2.00× | 500 | 0 | 0.50× |
| vmcp | 7.50 ms | 7.50 ms | 7.50× | 1,300 | 1,400 (35 %) | 1.30× |
| mcp-hub | skipped: npm not found / really (see log) | | | | | |

p50 per round, 1 caller (ms): direct 1.00 / 1.10; rest 2.00; vmcp 7.50
calls/s per round, 32 callers: direct 1,100 / 900
vmcp: last error at 32 callers: EOF
`
	if got != want {
		t.Fatalf("table:\n%s\nwant:\n%s", got, want)
	}
}

// TestFormatTableWithoutDirect: with no direct measurement the ratios are dashes, not a division by zero.
func TestFormatTableWithoutDirect(t *testing.T) {
	got := formatTable([]pathResult{
		{key: pathDirect, label: "direct", skipped: "interrupted"},
		{key: pathREST, label: "REST", one: loadgen.Result{Lat: lat(10, time.Millisecond)}, many: loadgen.Result{Lat: lat(10, time.Millisecond), Elapsed: time.Second}},
	}, 4)
	if !strings.Contains(got, "| REST | 1.00 ms | 1.00 ms | — | 10 | 0 | — |") {
		t.Fatalf("table:\n%s", got)
	}
}

func TestThousands(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999.4: "999", 999.6: "1,000", 1234567: "1,234,567", -4321: "-4,321"} {
		if got := thousands(v); got != want {
			t.Errorf("thousands(%v) = %q, want %q", v, got, want)
		}
	}
}
