// Package canonjson writes the canonical form of a JSON value that the definition and pin hashes are taken over:
// the bytes encoding/json gives when it encodes what it decoded (with UseNumber) from the value: object keys sorted,
// the last of a repeated key kept, insignificant whitespace dropped, strings re-escaped (HTML characters too,
// invalid UTF-8 as U+FFFD), numbers as written. Stored hashes were computed that way, so the bytes must stay equal
// (the fuzz tests of persistence/internal/storeutil and actors/curation hold them to encoding/json's).
//
// It exists because the way there through encoding/json (or segmentio's, as fast as it gets) builds a map for every
// object and boxes every value: a discovery canonicalises each schema it lists twice (the definition hash and the
// pin hash), thousands per registration. This walks the tokens once and builds nothing but the output.
package canonjson

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"
	"unsafe"

	segjson "github.com/segmentio/encoding/json"
)

// Append appends the canonical form of raw (one JSON value, whitespace around it allowed) to dst.
func Append(dst, raw []byte) ([]byte, error) {
	w := start(dst, raw)
	if err := w.value(); err != nil {
		return dst, err
	}
	if err := w.end(); err != nil {
		return dst, err
	}
	return w.buf, nil
}

// AppendFields appends an object of the named members of the object raw, in the order of names, each value in
// canonical form; a member that is absent or null is left out, and of a repeated member the last counts (as when
// encoding/json decodes the object into a map). raw null gives the empty object. The names are written as given:
// they must need no escaping.
func AppendFields(dst, raw []byte, names []string) ([]byte, error) {
	w := start(nil, raw)
	if !w.t.Next() {
		return dst, w.fail()
	}
	switch {
	case w.t.Value.Null():
		if err := w.end(); err != nil {
			return dst, err
		}
		return append(dst, '{', '}'), nil
	case w.t.Delim != '{':
		if err := w.current(); err != nil { // the value's own error first, as a decoder gives it
			return dst, err
		}
		return dst, errors.New("json: not an object")
	}
	members, err := w.readMembers()
	if err != nil {
		return dst, err
	}
	if err := w.end(); err != nil {
		return dst, err
	}
	dst = append(dst, '{')
	first := true
	for _, name := range names {
		// the last of the members with this name
		i := -1
		for j, m := range members {
			if string(w.buf[m.key:m.val]) == name {
				i = j
			}
		}
		if i < 0 {
			continue
		}
		m := members[i]
		v := w.buf[m.val:m.end]
		if string(v) == "null" {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, '"')
		dst = append(dst, name...)
		dst = append(dst, '"', ':')
		dst = append(dst, v...)
	}
	return append(dst, '}'), nil
}

// maxDepth is the deepest nesting of objects and arrays encoding/json decodes.
const maxDepth = 10000

// member is one object member in the walker's buffer: the decoded key at buf[key:val], the value's canonical form
// at buf[val:end].
type member struct{ key, val, end int }

// walker writes canonical forms into buf as it reads tokens.
type walker struct {
	t       *segjson.Tokenizer
	buf     []byte
	members []member // the members of the objects being read, innermost last
}

// start returns a walker at the start of raw that appends to dst. The tokenizer checks each token (strings,
// numbers, literals) and the nesting of brackets; the walker checks the rest of the grammar (separators, keys, one
// value), so that it refuses what encoding/json refuses (FuzzAppend).
func start(dst, raw []byte) *walker {
	// An object's members are written once as read and once sorted: room for both.
	return &walker{t: segjson.NewTokenizer(raw), buf: slices.Grow(dst, 2*len(raw)+2), members: make([]member, 0, 16)}
}

// end checks that nothing but whitespace follows the value.
func (w *walker) end() error {
	if w.t.Next() || w.t.Err != nil {
		return errors.New("json: data after the top-level value")
	}
	return nil
}

// fail is the error of a token stream that ended early or went wrong (not expected after Valid).
func (w *walker) fail() error {
	if w.t.Err != nil {
		return fmt.Errorf("json: %w", w.t.Err)
	}
	return errors.New("json: unexpected end of input")
}

// expected is the error of a token where the grammar wants another.
func (w *walker) expected(what string) error {
	if w.t.Err != nil {
		return fmt.Errorf("json: %w", w.t.Err)
	}
	return fmt.Errorf("json: %s expected", what)
}

// value reads the next value and appends its canonical form to buf.
func (w *walker) value() error {
	if !w.t.Next() {
		return w.fail()
	}
	return w.current()
}

// current appends the canonical form of the value whose first token the tokenizer is on.
func (w *walker) current() error {
	t := w.t
	// encoding/json's limit, and a bound on the recursion here (Depth counts the brackets outside this one)
	if (t.Delim == '{' || t.Delim == '[') && t.Depth >= maxDepth {
		return errors.New("json: exceeded max depth")
	}
	switch {
	case t.Delim == '{':
		from := len(w.buf)
		members, err := w.readMembers()
		if err != nil {
			return err
		}
		// Sorted by key, the last of a repeated key kept: a stable sort keeps repeats in their order.
		slices.SortStableFunc(members, func(a, b member) int {
			return bytes.Compare(w.buf[a.key:a.val], w.buf[b.key:b.val])
		})
		out := len(w.buf)
		w.buf = append(w.buf, '{')
		first := true
		for i, m := range members {
			if i+1 < len(members) && bytes.Equal(w.buf[m.key:m.val], w.buf[members[i+1].key:members[i+1].val]) {
				continue // a later one of the same key follows
			}
			if !first {
				w.buf = append(w.buf, ',')
			}
			first = false
			w.buf = appendString(w.buf, w.buf[m.key:m.val])
			w.buf = append(w.buf, ':')
			w.buf = append(w.buf, w.buf[m.val:m.end]...)
		}
		w.buf = append(w.buf, '}')
		// The object's form replaces its members' parts.
		n := copy(w.buf[from:], w.buf[out:])
		w.buf = w.buf[:from+n]
		w.members = w.members[:len(w.members)-len(members)]
		return nil
	case t.Delim == '[':
		w.buf = append(w.buf, '[')
		for i := 0; ; i++ {
			if !t.Next() {
				return w.fail()
			}
			if t.Delim == ']' {
				break // after a ',' the element's own check refuses it
			}
			if i > 0 {
				if t.Delim != ',' || !t.Next() {
					return w.expected("',' or ']'")
				}
				w.buf = append(w.buf, ',')
			}
			if err := w.current(); err != nil {
				return err
			}
		}
		w.buf = append(w.buf, ']')
		return nil
	case t.Delim != 0:
		return fmt.Errorf("json: unexpected %q", rune(t.Delim))
	case t.Value.String():
		w.buf = appendString(w.buf, t.String())
		return nil
	default: // a number as written, true, false, null
		w.buf = append(w.buf, t.Value...)
		return nil
	}
}

// readMembers reads the members of the object whose '{' the tokenizer is on, appending each decoded key and its value's
// canonical form to buf; it returns them (they stay on w.members until the caller drops them).
func (w *walker) readMembers() ([]member, error) {
	t := w.t
	first := len(w.members)
	for i := 0; ; i++ {
		if !t.Next() {
			return nil, w.fail()
		}
		if t.Delim == '}' {
			break
		}
		if i > 0 {
			if t.Delim != ',' || !t.Next() {
				return nil, w.expected("',' or '}'")
			}
		}
		if !t.IsKey || !t.Value.String() {
			return nil, errors.New("json: object key expected")
		}
		m := member{key: len(w.buf)}
		w.buf = appendValidUTF8(w.buf, t.String())
		m.val = len(w.buf)
		if !t.Next() || t.Delim != ':' {
			return nil, errors.New("json: ':' expected")
		}
		if err := w.value(); err != nil {
			return nil, err
		}
		m.end = len(w.buf)
		w.members = append(w.members, m)
	}
	return w.members[first:], nil
}

// appendValidUTF8 appends s with each byte that is not part of valid UTF-8 replaced by U+FFFD, as encoding/json
// decodes a string: keys are sorted as decoded.
func appendValidUTF8(dst, s []byte) []byte {
	if utf8.Valid(s) {
		return append(dst, s...)
	}
	for len(s) > 0 {
		r, n := utf8.DecodeRune(s)
		if r == utf8.RuneError && n == 1 {
			dst = utf8.AppendRune(dst, utf8.RuneError)
		} else {
			dst = append(dst, s[:n]...)
		}
		s = s[n:]
	}
	return dst
}

// appendString appends s as encoding/json writes a string (HTML characters escaped).
func appendString(dst, s []byte) []byte {
	return segjson.AppendEscape(dst, unsafe.String(unsafe.SliceData(s), len(s)), segjson.EscapeHTML)
}
