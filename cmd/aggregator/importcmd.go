package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mcpgw/aggregator/http/api"
)

// importTimeout bounds the whole import request: the daemon registers entries one after another, each within its
// own ask deadline.
const importTimeout = 2 * time.Minute

// maxImportAnswer bounds what the command reads of the daemon's answer.
const maxImportAnswer = 16 << 20

// importCommand is `aggregator import [-dry-run] [-url URL] [-json] FILE`: it sends an mcpServers file to the
// running daemon's POST /api/v1/aggregator/import and prints one line per server. It goes through the REST API
// rather than the store so that each server is registered by the daemon's actors (validated, connected, audited)
// exactly as a POST /servers would be; the daemon must be running. The URL defaults to MCP_AGGREGATOR_LISTEN and
// the token to the first admin token of the daemon's own settings (as the stdio relay picks it). Exit status: 0
// when every entry was created or skipped, 1 when one was invalid or failed (or the request failed), 2 on usage.
func importCommand(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("import", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dryRun := fs.Bool("dry-run", false, "report what would be registered without registering anything")
	base := fs.String("url", "", "base URL of the daemon's REST API (default: http:// + MCP_AGGREGATOR_LISTEN)")
	asJSON := fs.Bool("json", false, "print the daemon's JSON report instead of a table")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: aggregator import [-dry-run] [-url URL] [-json] FILE")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	body, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	cfg, err := loadConfig(lookup)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if *base == "" {
		*base = "http://" + dialable(cfg.Listen)
	}
	tok, err := relayToken(lookup)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}

	ctx, cancel := context.WithTimeout(ctx, importTimeout)
	defer cancel()
	endpoint := strings.TrimRight(*base, "/") + "/api/v1/aggregator/import"
	if *dryRun {
		endpoint += "?dry_run=true"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	req.Header.Set("Content-Type", "application/json")
	if tok.token != "" {
		req.Header.Set("Authorization", "Bearer "+tok.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "import: is the daemon running at %s? %v\n", *base, err)
		return 1
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxImportAnswer))
	if err != nil {
		fmt.Fprintln(stderr, "import: reading the answer:", err)
		return 1
	}
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "import: the daemon answered %d: %s\n", resp.StatusCode, bytes.TrimSpace(raw))
		return 1
	}
	var rep api.ImportReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		fmt.Fprintln(stderr, "import: the answer is not an import report:", err)
		return 1
	}
	if *asJSON {
		_, _ = stdout.Write(append(raw, '\n'))
	} else {
		printImportReport(stdout, rep)
	}
	if rep.Counts[api.ImportInvalid]+rep.Counts[api.ImportFailed] > 0 {
		return 1
	}
	return 0
}

// printImportReport writes one line per server and a summary.
func printImportReport(w io.Writer, rep api.ImportReport) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STATUS\tNAME\tFROM\tTRANSPORT\tREASON")
	for _, r := range rep.Results {
		from := ""
		if r.Renamed {
			from = r.SourceName
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Status, r.Name, from, r.TransportType, r.Reason)
	}
	_ = tw.Flush()
	prefix := ""
	if rep.DryRun {
		prefix = "dry run: "
	}
	fmt.Fprintf(w, "%s%d created, %d skipped, %d invalid, %d failed\n", prefix, rep.Counts[api.ImportCreated],
		rep.Counts[api.ImportSkipped], rep.Counts[api.ImportInvalid], rep.Counts[api.ImportFailed])
}

// dialable turns a listen address into one to dial: an unspecified host (":8081", "0.0.0.0:8081", "[::]:8081")
// becomes loopback.
func dialable(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
