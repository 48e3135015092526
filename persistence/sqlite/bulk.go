package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// maxBulkVariables bounds the parameters of one multi-row statement: SQLite's historical limit (999), well under
// the 32766 of current builds, so a statement's text and argument slice stay small.
const maxBulkVariables = 999

// bulkExec runs an INSERT whose text holds one `VALUES (?, ...)` row group for every row i < n, several rows per
// statement. modernc's driver parses a statement's text again on every execution (it does not keep the prepared
// statement between Execs), so statement count, not row count, is what a bulk write costs: a thousand-row write is
// ten statements here instead of a thousand.
func bulkExec(ctx context.Context, tx *sql.Tx, query string, n int, row func(i int) []any) error {
	if n == 0 {
		return nil
	}
	head, group, tail, err := splitValues(query)
	if err != nil {
		return err
	}
	cols := strings.Count(group, "?")
	if cols == 0 {
		return fmt.Errorf("bulk statement without parameters: %q", query)
	}
	per := max(1, maxBulkVariables/cols)
	var text strings.Builder
	args := make([]any, 0, min(n, per)*cols)
	for start := 0; start < n; start += per {
		end := min(n, start+per)
		text.Reset()
		text.WriteString(head)
		args = args[:0]
		for i := start; i < end; i++ {
			if i > start {
				text.WriteString(", ")
			}
			text.WriteString(group)
			r := row(i)
			if len(r) != cols {
				return fmt.Errorf("bulk row %d has %d arguments, the statement takes %d", i, len(r), cols)
			}
			args = append(args, r...)
		}
		text.WriteString(tail)
		if _, err := tx.ExecContext(ctx, text.String(), args...); err != nil {
			return err
		}
	}
	return nil
}

// splitValues cuts an INSERT's text around its one row group: head ends with "VALUES ", group is the parenthesised
// row of plain `?` parameters, tail is the rest (an ON CONFLICT clause, say). Numbered parameters (?1) cannot be
// repeated per row and are refused.
func splitValues(query string) (head, group, tail string, err error) {
	i := strings.Index(strings.ToUpper(query), "VALUES")
	if i < 0 {
		return "", "", "", fmt.Errorf("bulk statement without VALUES: %q", query)
	}
	open := strings.IndexByte(query[i:], '(')
	if open < 0 {
		return "", "", "", fmt.Errorf("bulk statement without a row group: %q", query)
	}
	open += i
	depth := 0
	for j := open; j < len(query); j++ {
		switch query[j] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				group = query[open : j+1]
				for k := 0; k < len(group); k++ {
					if group[k] == '?' && k+1 < len(group) && group[k+1] >= '0' && group[k+1] <= '9' {
						return "", "", "", fmt.Errorf("bulk row group with a numbered parameter: %q", group)
					}
				}
				return query[:open], group, query[j+1:], nil
			}
		}
	}
	return "", "", "", fmt.Errorf("bulk statement with an unclosed row group: %q", query)
}
