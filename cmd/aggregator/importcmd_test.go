package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/mcpgw/aggregator/http/api"
)

func TestDialable(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:8081": "127.0.0.1:8081",
		"0.0.0.0:8081":   "127.0.0.1:8081",
		":8081":          "127.0.0.1:8081",
		"[::]:8081":      "127.0.0.1:8081",
		"[::1]:8081":     "[::1]:8081",
		"host.lan:9":     "host.lan:9",
		"garbage":        "garbage",
	} {
		if got := dialable(in); got != want {
			t.Errorf("dialable(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPrintImportReport(t *testing.T) {
	var b bytes.Buffer
	printImportReport(&b, api.ImportReport{DryRun: true, Results: []api.ImportResult{
		{SourceName: "My Server", Name: "my-server", Renamed: true, Status: api.ImportCreated, TransportType: "STDIO"},
		{SourceName: "x", Name: "x", Status: api.ImportInvalid, Reason: "type: Unknown transport"},
	}, Counts: map[string]int{api.ImportCreated: 1, api.ImportInvalid: 1}})
	out := b.String()
	for _, want := range []string{"created  my-server  My Server  STDIO", "invalid  x", "Unknown transport",
		"dry run: 1 created, 0 skipped, 1 invalid, 0 failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestImportCommandUsage: wrong arguments are a usage error (2) before anything is read or sent.
func TestImportCommandUsage(t *testing.T) {
	lookup := func(string) (string, bool) { return "", false }
	for _, args := range [][]string{{}, {"a", "b"}, {"-nope", "f"}} {
		var out, errOut bytes.Buffer
		if code := importCommand(t.Context(), args, lookup, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "usage: aggregator import") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut.String())
		}
	}
}
