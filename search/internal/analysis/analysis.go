// Package analysis turns text into the terms that search ranks on. It is shared by the lexical index (package
// search) and the built-in embedder (package embed), so that a query, a tool and a skill are cut into words the
// same way whichever side scores them. It is internal because its output is an implementation detail of ranking.
package analysis

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxWordLen bounds one word; longer runs (base64 blobs, hashes) are cut so that a hostile description cannot
// make the index or the embedder spend time on it.
const maxWordLen = 64

// Word is one word of a text, lower-cased. CJK is true for a CJK ideograph, kana or hangul syllable unigram or
// bigram: such text has no spaces, so it is cut into characters and character pairs instead of words. Compound is
// true for the concatenation of the parts of an identifier (getUserName -> getusername), emitted after the parts so
// that an exact identifier in a query still matches as one rare term; Part is true for each of those parts.
type Word struct {
	Text     string
	CJK      bool
	Compound bool
	Part     bool
}

// Words splits s into lower-cased words. Identifiers are split on snake_case, camelCase, dots and dashes
// ("github-mcp.create_issue" -> github, mcp, create, issue plus the compound), digits stay attached to their
// letters (mp3, base64), CJK runs become unigrams and bigrams, and everything else that is not a letter or a digit
// (including invalid UTF-8) separates words. It never fails and never panics.
func Words(s string) []Word { return words(s, nil) }

// words is Words, taking each identifier's words from m when it has seen the identifier (m may be nil).
func words(s string, m *Memo) []Word { return appendWords(nil, s, m) }

// appendWords appends the words of s to out.
func appendWords(out []Word, s string, m *Memo) []Word {
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case isCJK(r):
			j := i
			for j < len(s) {
				r2, n := utf8.DecodeRuneInString(s[j:])
				if !isCJK(r2) {
					break
				}
				j += n
			}
			out = appendCJK(out, s[i:j])
			i = j
		case isWordRune(r):
			j := i
			for j < len(s) {
				r2, n := utf8.DecodeRuneInString(s[j:])
				if r2 == utf8.RuneError && n <= 1 {
					break
				}
				if isWordRune(r2) || (isConnector(r2) && j+n < len(s) && nextIsWord(s[j+n:])) {
					j += n
					continue
				}
				break
			}
			out = m.appendIdentifier(out, s[i:j])
			i = j
		default:
			i += size
		}
	}
	return out
}

func nextIsWord(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && n <= 1 {
		return false
	}
	return isWordRune(r)
}

// isWordRune reports whether r belongs to a (non-CJK) word.
func isWordRune(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
	}
	return (unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r)) && !isCJK(r) && r != utf8.RuneError
}

// isConnector reports whether r joins the parts of an identifier.
func isConnector(r rune) bool { return r == '_' || r == '-' || r == '.' }

// isCJK reports whether r is written without spaces between words.
func isCJK(r rune) bool {
	if r < 0x1100 { // below the first Hangul Jamo: no CJK
		return false
	}
	return unicode.Is(unicode.Han, r) || unicode.Is(unicode.Hiragana, r) || unicode.Is(unicode.Katakana, r) ||
		unicode.Is(unicode.Hangul, r)
}

func appendCJK(out []Word, run string) []Word {
	var prev string
	for _, r := range run {
		c := string(r)
		out = append(out, Word{Text: c, CJK: true})
		if prev != "" {
			out = append(out, Word{Text: prev + c, CJK: true})
		}
		prev = c
	}
	return out
}

// appendIdentifier splits one identifier-like run (letters, digits and inner connectors) into its parts. Dots
// separate segments (server.tool, www.example.com); each segment split further by '_', '-' or camelCase also
// yields its compound, so "github-mcp.create_issue" gives github, mcp, githubmcp, create, issue, createissue.
func appendIdentifier(out []Word, id string) []Word {
	for seg := range strings.SplitSeq(id, ".") {
		out = appendSegment(out, seg)
	}
	return out
}

func appendSegment(out []Word, seg string) []Word {
	start := len(out)
	var part strings.Builder
	flush := func() {
		if part.Len() > 0 {
			w := part.String()
			if len(w) > maxWordLen {
				w = truncate(w, maxWordLen)
			}
			out = append(out, Word{Text: w})
			part.Reset()
		}
	}
	var prev rune
	runes := []rune(seg)
	for k, r := range runes {
		if isConnector(r) {
			flush()
			prev = r
			continue
		}
		if part.Len() > 0 && unicode.IsUpper(r) {
			// lower|Upper (getUser) or UPPER|Upper+lower (HTTPResponse -> HTTP, Response).
			if unicode.IsLower(prev) || (unicode.IsUpper(prev) && k+1 < len(runes) && unicode.IsLower(runes[k+1])) {
				flush()
			}
		}
		part.WriteRune(unicode.ToLower(r))
		prev = r
	}
	flush()
	if n := len(out) - start; n > 1 {
		var b strings.Builder
		for i := range out[start:] {
			out[start+i].Part = true
			b.WriteString(out[start+i].Text)
		}
		if b.Len() <= maxWordLen {
			out = append(out, Word{Text: b.String(), Compound: true})
		}
	}
	return out
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Terms returns the index terms of s: its words without English stop words, stemmed (Porter), compounds and CJK
// n-grams kept as they are. Lexical search and the built-in embedder both use it.
func Terms(s string) []string { return (*Memo)(nil).Terms(s) }

// Terms is the package's Terms, through the memo.
func (m *Memo) Terms(s string) []string {
	words := m.scratchWords(s)
	out := make([]string, 0, len(words))
	for _, w := range words {
		if t, ok := m.Term(w); ok {
			out = append(out, t)
		}
	}
	return out
}

// QueryTerms is Terms for a query: the words of asking (IsRequestWord) are dropped too, unless they are part of an
// identifier (like_post).
func QueryTerms(s string) []string {
	words := Words(s)
	out := make([]string, 0, len(words))
	for _, w := range words {
		if !w.CJK && !w.Compound && !w.Part && IsRequestWord(w.Text) {
			continue
		}
		if t, ok := Term(w); ok {
			out = append(out, t)
		}
	}
	return out
}

// Term normalises one word into an index term; ok is false for a stop word.
func Term(w Word) (string, bool) {
	if w.CJK || w.Compound {
		return w.Text, true
	}
	if IsStopWord(w.Text) {
		return "", false
	}
	return Stem(w.Text), true
}

// Memo remembers the analysis of the identifiers and words it has seen, for a batch of texts that share their
// vocabulary (a server's catalogue, where the same few thousand words recur in every tool): each distinct
// identifier is cut and lower-cased once and each distinct word stemmed once. It gives exactly what Words, Terms
// and Term give. A nil *Memo remembers nothing. Not safe for concurrent use; it lives as long as its batch, so it
// holds no more than the batch's own distinct words.
type Memo struct {
	runs  map[string][]Word   // identifier -> its words, as appendIdentifier gives them
	terms map[string]memoTerm // word -> Term
	words []Word              // the slice Words last returned (and Terms used), reused by the next call
}

type memoTerm struct {
	term string
	ok   bool
}

// NewMemo returns an empty Memo.
func NewMemo() *Memo {
	return &Memo{runs: make(map[string][]Word), terms: make(map[string]memoTerm)}
}

// Words is the package's Words, through the memo. The slice is the memo's own: it is valid until the memo's next
// Words or Terms (a nil memo returns a new one).
func (m *Memo) Words(s string) []Word { return m.scratchWords(s) }

// scratchWords is Words into the memo's reused slice (one too long to keep is not kept).
func (m *Memo) scratchWords(s string) []Word {
	if m == nil {
		return words(s, nil)
	}
	out := appendWords(m.words[:0], s, m)
	if cap(out) <= keepWordsMost {
		m.words = out[:0]
	}
	return out
}

// keepWordsMost is the most words of one text whose slice a Memo keeps for the next.
const keepWordsMost = 4 << 10

// Term is the package's Term, through the memo.
func (m *Memo) Term(w Word) (string, bool) {
	if m == nil || w.CJK || w.Compound {
		return Term(w)
	}
	if t, ok := m.terms[w.Text]; ok {
		return t.term, t.ok
	}
	t, ok := Term(w)
	m.terms[w.Text] = memoTerm{t, ok}
	return t, ok
}

// appendIdentifier is the package's appendIdentifier, through the memo.
func (m *Memo) appendIdentifier(out []Word, id string) []Word {
	if m == nil {
		return appendIdentifier(out, id)
	}
	if ws, ok := m.runs[id]; ok {
		return append(out, ws...)
	}
	start := len(out)
	out = appendIdentifier(out, id)
	m.runs[id] = slices.Clone(out[start:])
	return out
}
