// Package msglimit bounds what the daemon reads from an MCP backend. Without it, one backend that streams an endless
// SSE event or returns a 100 MB result makes the go-sdk buffer all of it, growing the daemon by gigabytes and
// starving every healthy server. A Guard buffers one message at a time up to a configured limit before handing it to
// the go-sdk; a message over the limit is discarded and replaced by a JSON-RPC error response for the same request
// id, so the waiting call fails cleanly with a message naming the limit and the session survives. A Budget shared by
// all servers bounds the bytes of large messages being read at once, with a per-server share so one server cannot
// take all of it.
package msglimit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
)

// Defaults of the configuration (README: MCP_AGGREGATOR_MAX_MESSAGE_BYTES and the budget variables).
const (
	// DefaultMaxMessageBytes is the largest message accepted from a backend (16 MiB, the go-sdk's own frame cap).
	DefaultMaxMessageBytes = 16 << 20
	// SmallMessage is the size under which a message does not touch the Budget: the everyday small messages cost
	// no accounting.
	SmallMessage = 64 << 10
	// ErrorCode is the JSON-RPC code of the synthesized error response (a server error in -32000..-32099).
	ErrorCode = -32000
	// MessagePrefix starts the message of every synthesized error response; TooLarge recognizes it.
	MessagePrefix = "backend message exceeds "
	// LimitVar is the environment variable that sets the limit, named in the error so the operator knows what to
	// change.
	LimitVar = "MCP_AGGREGATOR_MAX_MESSAGE_BYTES"
	// BudgetVar and ServerBudgetVar set the Budget, named in the error when it refuses a message.
	BudgetVar       = "MCP_AGGREGATOR_MESSAGE_BUDGET_BYTES"
	ServerBudgetVar = "MCP_AGGREGATOR_MESSAGE_BUDGET_PER_SERVER_BYTES"
	// headTailBytes is how much of a discarded message is kept at each end to find its id.
	headTailBytes = 4096
)

// TooLarge reports whether a JSON-RPC error (code and message) is one a Guard synthesized, so that the caller can
// classify the failed call as RESPONSE_TOO_LARGE.
func TooLarge(code int64, message string) bool {
	return code == ErrorCode && strings.HasPrefix(message, MessagePrefix)
}

// Budget bounds the bytes of large backend messages (SmallMessage and over) being read at once, across all servers,
// with a per-server share. It refuses rather than waits: a refused message fails its call like an oversized one, so a
// flood from one server never blocks the others. A nil *Budget is unlimited.
type Budget struct {
	mu        sync.Mutex
	total     int64
	perServer int64
	used      int64

	// bufs recycles the buffers of large messages by size class (SmallMessage<<k bytes): an oversized answer fills
	// up to the limit before it is refused, and allocating that afresh for every such call made garbage at the rate
	// a hostile backend sends, which the collector let the heap grow into.
	bufs [bufClasses]sync.Pool // of *[]byte
}

// bufClasses is the number of buffer size classes: SmallMessage (64 KiB) up to 2 GiB.
const bufClasses = 16

// class is the smallest size class that holds n bytes, or -1 past the largest.
func class(n int) int {
	for k := 0; k < bufClasses; k++ {
		if n <= SmallMessage<<k {
			return k
		}
	}
	return -1
}

// grow returns buf's bytes in a recycled buffer that holds need bytes, handing buf back when it was one.
func (a *Account) grow(buf []byte, need int) []byte {
	k := class(need)
	if a == nil || a.b == nil || k < 0 {
		return append(make([]byte, 0, max(need, 2*cap(buf))), buf...)
	}
	var next []byte
	if p, ok := a.b.bufs[k].Get().(*[]byte); ok {
		next = (*p)[:0]
	} else {
		next = make([]byte, 0, SmallMessage<<k)
	}
	next = append(next, buf...)
	a.recycle(buf)
	return next
}

// recycle hands back a buffer that grow made (its capacity is a size class); others are left to the collector.
func (a *Account) recycle(buf []byte) {
	if a == nil || a.b == nil || cap(buf) < SmallMessage {
		return
	}
	if k := class(cap(buf)); k >= 0 && cap(buf) == SmallMessage<<k {
		buf = buf[:0]
		a.b.bufs[k].Put(&buf)
	}
}

// NewBudget makes a Budget of total bytes with at most perServer bytes for one server; 0 or less means no bound.
func NewBudget(total, perServer int64) *Budget {
	return &Budget{total: total, perServer: perServer}
}

// Used reports the bytes reserved now (for tests and metrics).
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Account is one server's share of a Budget. A nil *Account is unlimited.
type Account struct {
	b      *Budget
	used   int64 // guarded by b.mu
	closed bool  // guarded by b.mu
}

// Account opens the share of one server.
func (b *Budget) Account() *Account {
	if b == nil {
		return nil
	}
	return &Account{b: b}
}

// reserve takes n more bytes, or reports which bound refused them.
func (a *Account) reserve(n int64) error {
	if a == nil || n <= 0 {
		return nil
	}
	b := a.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if a.closed {
		return &budgetError{varName: ServerBudgetVar, limit: 0}
	}
	if b.perServer > 0 && a.used+n > b.perServer {
		return &budgetError{varName: ServerBudgetVar, limit: b.perServer}
	}
	if b.total > 0 && b.used+n > b.total {
		return &budgetError{varName: BudgetVar, limit: b.total}
	}
	a.used += n
	b.used += n
	return nil
}

func (a *Account) release(n int64) {
	if a == nil || n <= 0 {
		return
	}
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	if a.closed {
		return
	}
	a.used -= n
	a.b.used -= n
}

// Close gives back everything the account still holds (a session that ended in the middle of a message) and
// refuses any later reservation. The session's readers may still be running; their releases become no-ops.
func (a *Account) Close() {
	if a == nil {
		return
	}
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	a.b.used -= a.used
	a.used = 0
	a.closed = true
}

type budgetError struct {
	varName string
	limit   int64
}

func (e *budgetError) Error() string {
	return fmt.Sprintf("%sthe memory budget of messages in flight (%s, %d bytes)", MessagePrefix, e.varName, e.limit)
}

// Guard is the limit of one session: the largest message and the server's share of the Budget.
type Guard struct {
	// Limit is the largest message in bytes (0: DefaultMaxMessageBytes).
	Limit int
	// Account is the server's share of the shared Budget (nil: unbounded).
	Account *Account
	// Pace, when set, is called before each notification of an event stream is handed to the go-sdk; it may block,
	// and the stream is not read meanwhile, so a backend that floods notifications waits on its own writes
	// (floodguard.Pacer). Safe for concurrent use: a session's streams share it.
	Pace func()

	// readers recycles the line buffers of the session's guarded readers: a routed call reads one small message
	// per POST response, and a fresh 64 KiB buffer per call was most of the guard's cost on the call path.
	readers sync.Pool // of *bufio.Reader, readBuffer bytes each
}

// reader is a buffered reader of r, recycled when the guard has one.
func (g *Guard) reader(r io.Reader) *bufio.Reader {
	if g != nil {
		if br, ok := g.readers.Get().(*bufio.Reader); ok {
			br.Reset(r)
			return br
		}
	}
	return bufio.NewReaderSize(r, readBuffer)
}

// recycle hands br back for the next reader; the caller must not use it again.
func (g *Guard) recycle(br *bufio.Reader) {
	if g != nil && br != nil {
		br.Reset(nil)
		g.readers.Put(br)
	}
}

// Max is the largest message the guard lets through, in bytes.
func (g *Guard) Max() int { return g.limit() }

func (g *Guard) limit() int {
	if g == nil || g.Limit <= 0 {
		return DefaultMaxMessageBytes
	}
	return g.Limit
}

func (g *Guard) account() *Account {
	if g == nil {
		return nil
	}
	return g.Account
}

// tooLargeText is the message of the synthesized error and of a stream failure.
func (g *Guard) tooLargeText() string {
	return fmt.Sprintf("%s%s (%d bytes)", MessagePrefix, LimitVar, g.limit())
}

// ErrTooLarge is wrapped by the error that ends a stream when an oversized message carries no id to answer.
var ErrTooLarge = errors.New("backend message too large")

// streamError ends a stream whose oversized message had no id: the session is lost, with a reason naming the limit.
func streamError(reason string) error {
	return fmt.Errorf("%w: %s and has no id to fail; closing the stream", ErrTooLarge, reason)
}

// errorResponse is the JSON-RPC error response that replaces an oversized message.
func errorResponse(id json.RawMessage, message string) []byte {
	msg, _ := json.Marshal(message)
	var b bytes.Buffer
	b.WriteString(`{"jsonrpc":"2.0","id":`)
	b.Write(id)
	b.WriteString(`,"error":{"code":`)
	b.WriteString(strconv.Itoa(ErrorCode))
	b.WriteString(`,"message":`)
	b.Write(msg)
	b.WriteString(`}}`)
	return b.Bytes()
}

// isNotification reports whether a small message is a notification: a method and no id.
func isNotification(data []byte) bool {
	if len(data) >= SmallMessage || !bytes.Contains(data, []byte(`"method"`)) {
		return false // large messages are bounded by the Budget, and answers have no method: no second parse
	}
	var probe struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	return json.Unmarshal(data, &probe) == nil && probe.Method != "" && probe.ID == nil
}

// kind says what a message is, as far as its head tells.
type kind int

const (
	kindUnknown  kind = iota
	kindRequest       // has "method": a request or notification, never answered with a synthesized response
	kindResponse      // has "result" or "error"
)

// identify finds the top-level id of a JSON-RPC message of which only head (its first bytes) and tail (its last
// bytes) are known. Go serializers put "jsonrpc","id" first; the TypeScript SDK puts "id" last. The id is returned as
// raw JSON (a number or a string), nil when neither end shows it.
func identify(head, tail []byte) (json.RawMessage, kind) {
	id, k := headID(head)
	if id == nil && k != kindRequest {
		id = tailID(tail)
	}
	return id, k
}

// headID reads the top-level keys of a truncated JSON object until the input ends. It runs on every POST to a
// backend (requestID), so it scans the bytes in place: no decoder, no tokens; the id it returns is a copy.
func headID(head []byte) (json.RawMessage, kind) {
	s := scanner{b: head}
	if !s.next('{') {
		return nil, kindUnknown
	}
	var id json.RawMessage
	k := kindUnknown
	for first := true; ; first = false {
		s.space()
		if s.at('}') {
			return id, k
		}
		if !first && !s.next(',') {
			return id, k
		}
		s.space()
		key, ok := s.str()
		if !ok {
			return id, k
		}
		switch keyIs(key) { // a key tells the kind as soon as it is whole
		case "method":
			k = kindRequest
		case "result", "error":
			if k == kindUnknown {
				k = kindResponse
			}
		}
		if !s.next(':') {
			return id, k
		}
		s.space()
		val, ok := s.value()
		if !ok {
			return id, k
		}
		if keyIs(key) == "id" && (val[0] == '"' || val[0] == '-' || val[0] >= '0' && val[0] <= '9') && json.Valid(val) {
			id = append(json.RawMessage(nil), val...)
		}
	}
}

// keyIs is a raw key (with its quotes) as one of the keys headID looks for, or "" (an escaped key is decoded).
func keyIs(raw []byte) string {
	in := raw[1 : len(raw)-1]
	if bytes.IndexByte(in, '\\') >= 0 {
		var k string
		if json.Unmarshal(raw, &k) != nil {
			return ""
		}
		in = []byte(k)
	}
	for _, k := range [...]string{"id", "method", "result", "error"} {
		if string(in) == k {
			return k
		}
	}
	return ""
}

// scanner walks a JSON text that may end anywhere: every step reports false when the input ends before its token.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\r' || s.b[s.i] == '\n') {
		s.i++
	}
}

func (s *scanner) at(c byte) bool { return s.i < len(s.b) && s.b[s.i] == c }

func (s *scanner) next(c byte) bool {
	s.space()
	if !s.at(c) {
		return false
	}
	s.i++
	return true
}

// str is the string literal at the cursor, with its quotes.
func (s *scanner) str() ([]byte, bool) {
	if !s.at('"') {
		return nil, false
	}
	for j := s.i + 1; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '\\':
			j++
		case c == '"':
			lit := s.b[s.i : j+1]
			s.i = j + 1
			return lit, true
		case c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// value is the value at the cursor, whole: a string, a number, a literal, or an object or array skipped to its end.
func (s *scanner) value() ([]byte, bool) {
	if s.i >= len(s.b) {
		return nil, false
	}
	start := s.i
	switch c := s.b[s.i]; {
	case c == '"':
		return s.str()
	case c == '{' || c == '[':
		for depth := 0; s.i < len(s.b); {
			switch s.b[s.i] {
			case '"':
				if _, ok := s.str(); !ok {
					return nil, false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			s.i++
			if depth == 0 {
				return s.b[start:s.i], true
			}
		}
		return nil, false
	default: // a number or true, false, null: up to the next delimiter (or the end, as encoding/json's decoder does)
		for s.i < len(s.b) && strings.IndexByte(",}] \t\r\n", s.b[s.i]) < 0 {
			s.i++
		}
		return s.b[start:s.i], s.i > start && json.Valid(s.b[start:s.i])
	}
}

// tailID reads `"id":<number or string>}` at the very end of a message.
func tailID(tail []byte) json.RawMessage {
	s := bytes.TrimRight(tail, " \t\r\n")
	if len(s) == 0 || s[len(s)-1] != '}' {
		return nil
	}
	s = bytes.TrimRight(s[:len(s)-1], " \t\r\n")
	if len(s) == 0 {
		return nil
	}
	var val []byte
	switch c := s[len(s)-1]; {
	case c == '"':
		// Find the opening quote: a quote preceded by an even number of backslashes.
		i := len(s) - 2
		for ; i >= 0; i-- {
			if s[i] != '"' {
				continue
			}
			n := 0
			for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
				n++
			}
			if n%2 == 0 {
				break
			}
		}
		if i < 0 {
			return nil
		}
		val, s = s[i:], s[:i]
		var str string
		if json.Unmarshal(val, &str) != nil {
			return nil
		}
	case c >= '0' && c <= '9':
		i := len(s) - 1
		for i >= 0 && strings.IndexByte("0123456789+-.eE", s[i]) >= 0 {
			i--
		}
		val, s = s[i+1:], s[:i+1]
		var n json.Number
		if json.Unmarshal(val, &n) != nil {
			return nil
		}
	default:
		return nil
	}
	s = bytes.TrimRight(s, " \t\r\n")
	if len(s) == 0 || s[len(s)-1] != ':' {
		return nil
	}
	s = bytes.TrimRight(s[:len(s)-1], " \t\r\n")
	if !bytes.HasSuffix(s, []byte(`"id"`)) {
		return nil
	}
	s = bytes.TrimRight(s[:len(s)-4], " \t\r\n")
	if len(s) == 0 || (s[len(s)-1] != ',' && s[len(s)-1] != '{') {
		return nil
	}
	return append(json.RawMessage(nil), val...)
}

// collector accumulates one message up to the limit. Past it, it keeps only the head (the first bytes, already
// buffered) and a rolling tail, so that the message's id can still be found.
type collector struct {
	g        *Guard
	buf      []byte
	held     int64 // bytes reserved from the account
	over     error // why the message is being discarded, nil while it fits
	head     []byte
	tail     []byte
	overSize int64
	tried    bool // the head was already searched for an id to answer at once
}

// add appends p to the message, or to the head/tail bookkeeping once it is over.
func (c *collector) add(p []byte) {
	if c.over != nil {
		c.overSize += int64(len(p))
		c.keepTail(p)
		return
	}
	if len(c.buf)+len(p) > c.g.limit() {
		c.discard(fmt.Errorf("%s", c.g.tooLargeText()), p)
		return
	}
	need := int64(len(c.buf) + len(p))
	if need >= SmallMessage && need > c.held {
		// Reserve ahead in doubling steps, so that a large message costs few reservations.
		want := max(need, 2*c.held, SmallMessage)
		want = min(want, int64(c.g.limit()))
		if err := c.g.account().reserve(want - c.held); err != nil {
			// The step ahead may not fit where the message itself still does.
			want = need
			if err := c.g.account().reserve(want - c.held); err != nil {
				c.discard(err, p)
				return
			}
		}
		c.held = want
	}
	if need > int64(cap(c.buf)) && need >= SmallMessage {
		c.buf = c.g.account().grow(c.buf, int(need))
	}
	c.buf = append(c.buf, p...)
}

func (c *collector) discard(why error, p []byte) {
	c.over = why
	c.head = append([]byte(nil), c.buf[:min(len(c.buf), headTailBytes)]...)
	if len(c.head) < headTailBytes {
		c.head = append(c.head, p[:min(len(p), headTailBytes-len(c.head))]...)
	}
	c.keepTail(c.buf)
	c.keepTail(p)
	c.overSize = int64(len(c.buf) + len(p))
	c.g.account().recycle(c.buf)
	c.buf = nil
	c.free()
}

func (c *collector) keepTail(p []byte) {
	if len(p) >= headTailBytes {
		c.tail = append(c.tail[:0], p[len(p)-headTailBytes:]...)
		return
	}
	c.tail = append(c.tail, p...)
	if len(c.tail) > headTailBytes {
		c.tail = append(c.tail[:0], c.tail[len(c.tail)-headTailBytes:]...)
	}
}

// free gives the reservation back.
func (c *collector) free() {
	c.g.account().release(c.held)
	c.held = 0
}

// reset prepares for the next message; the caller must have freed or handed over the buffer.
func (c *collector) reset() {
	c.buf, c.over, c.head, c.tail, c.overSize, c.tried = nil, nil, nil, nil, 0, false
}

// early is the id to answer as soon as a message is known to be over the limit, before the rest of it is read (an
// endless message never ends): the id in its head, or fallback when the head shows a response without one. It is
// tried once per message; nil means wait for the end of the message.
func (c *collector) early(fallback json.RawMessage) json.RawMessage {
	if c.over == nil || c.tried {
		return nil
	}
	c.tried = true
	id, k := headID(c.head)
	switch {
	case k == kindRequest:
		return nil
	case id != nil:
		return id
	case k == kindResponse:
		return fallback
	}
	return nil
}
