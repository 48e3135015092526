package main

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/mcpgw/aggregator/internal/loadgen"
)

// pathResult is what one path measured, merged over the rounds.
type pathResult struct {
	key     string          // pathDirect, pathREST, ...: stable, for lookups
	label   string          // the table's row label
	skipped string          // why the path was not measured; empty when it was
	one     loadgen.Result  // one caller, back to back
	oneP50  []time.Duration // per round
	many    loadgen.Result  // the concurrent callers for a fixed duration
	manyPS  []float64       // calls/s per round
}

// formatTable renders the one table of the comparison: p50/p99 at one caller, calls/s and errors at callers
// concurrent callers, and each path's ratio to the direct path (the first row with key pathDirect). A path that
// was not measured keeps its row with the reason. Below the table: each path's p50 per round, to read the noise.
func formatTable(paths []pathResult, callers int) string {
	var direct *pathResult
	for i := range paths {
		if paths[i].key == pathDirect && paths[i].skipped == "" && len(paths[i].one.Lat) > 0 {
			direct = &paths[i]
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| path | p50, 1 caller | p99, 1 caller | p50 ÷ direct | calls/s, %d callers | errors, %d callers | calls/s ÷ direct |\n", callers, callers)
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range paths {
		if p.skipped != "" {
			fmt.Fprintf(&b, "| %s | skipped: %s | | | | | |\n", p.label, cell(p.skipped))
			continue
		}
		p50, p99 := loadgen.Percentile(p.one.Lat, 0.50), loadgen.Percentile(p.one.Lat, 0.99)
		latRatio, rateRatio := "—", "—"
		if direct != nil && len(p.one.Lat) > 0 {
			latRatio = fmt.Sprintf("%.2f×", float64(p50)/float64(loadgen.Percentile(direct.one.Lat, 0.50)))
		}
		if direct != nil && direct.many.Rate() > 0 {
			rateRatio = fmt.Sprintf("%.2f×", p.many.Rate()/direct.many.Rate())
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", p.label, msCell(p50, len(p.one.Lat)), msCell(p99, len(p.one.Lat)),
			latRatio, thousands(p.many.Rate()), errCell(p.many), rateRatio)
	}
	b.WriteString("\n")
	perRound(&b, "p50 per round, 1 caller (ms):", paths, func(p pathResult) []string {
		vals := make([]string, len(p.oneP50))
		for i, d := range p.oneP50 {
			vals[i] = fmt.Sprintf("%.2f", ms(d))
		}
		return vals
	})
	perRound(&b, fmt.Sprintf("calls/s per round, %d callers:", callers), paths, func(p pathResult) []string {
		vals := make([]string, len(p.manyPS))
		for i, v := range p.manyPS {
			vals[i] = thousands(v)
		}
		return vals
	})
	for _, p := range paths {
		if p.skipped == "" && p.one.Errs > 0 {
			fmt.Fprintf(&b, "%s: %d of %d one-caller calls failed, last: %v\n", p.key, p.one.Errs, p.one.Errs+len(p.one.Lat), p.one.LastErr)
		}
		if p.skipped == "" && p.many.Errs > 0 {
			fmt.Fprintf(&b, "%s: last error at %d callers: %v\n", p.key, callers, p.many.LastErr)
		}
	}
	return b.String()
}

// perRound writes one line of a figure per round for every measured path, to read the noise.
func perRound(b *strings.Builder, title string, paths []pathResult, vals func(pathResult) []string) {
	b.WriteString(title)
	sep := " "
	for _, p := range paths {
		if v := vals(p); p.skipped == "" && len(v) > 0 {
			fmt.Fprintf(b, "%s%s %s", sep, p.key, strings.Join(v, " / "))
			sep = "; "
		}
	}
	b.WriteString("\n")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// msCell is a latency in milliseconds with two decimals, or "—" when no call succeeded.
func msCell(d time.Duration, n int) string {
	if n == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f ms", ms(d))
}

// errCell is the failed calls and their share of the calls made.
func errCell(r loadgen.Result) string {
	if r.Errs == 0 {
		return "0"
	}
	total := r.Errs + len(r.Lat)
	return fmt.Sprintf("%s (%.0f %%)", thousands(float64(r.Errs)), 100*float64(r.Errs)/float64(total))
}

// thousands rounds v to an integer and groups its digits by three with commas.
func thousands(v float64) string {
	s := fmt.Sprintf("%d", int64(math.Round(v)))
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []string
	for len(s) > 3 {
		out = append([]string{s[len(s)-3:]}, out...)
		s = s[:len(s)-3]
	}
	out = append([]string{s}, out...)
	if neg {
		return "-" + strings.Join(out, ",")
	}
	return strings.Join(out, ",")
}

// cell keeps a free-text reason on one table row.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}
