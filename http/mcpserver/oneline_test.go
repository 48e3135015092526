package mcpserver

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestOneLine(t *testing.T) {
	long := strings.Repeat("word ", 60)
	sentences := "First sentence is here and it says what the tool does in some detail. " + strings.Repeat("More words follow. ", 20)
	for _, tc := range []struct{ name, in, want string }{
		{"short", "Reads a file.", "Reads a file."},
		{"first line only", "Reads a file.\nArgs:\n  path: the file", "Reads a file."},
		{"carriage return", "  Lists things\r\nmore", "Lists things"},
		{"cut at a sentence", sentences, sentences[:strings.LastIndex(string([]rune(sentences)[:200]), ". ")+1]},
		{"cut with an ellipsis", long, strings.TrimSpace(long[:200]) + "…"},
		{"empty", "", ""},
	} {
		got := oneLine(tc.in)
		if got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
		if utf8.RuneCountInString(got) > 201 || strings.ContainsAny(got, "\r\n") {
			t.Errorf("%s: %q is not one short line", tc.name, got)
		}
	}
}
