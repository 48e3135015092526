package msglimit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
)

// readBuffer is the size of the readers' line buffers: a line longer than this arrives in fragments that are
// accumulated (up to the limit) or discarded, never buffered whole by bufio.
const readBuffer = 64 << 10

// output is the part every guarded reader shares: the message being handed to the go-sdk and the reservation that
// covers it until the go-sdk has read all of it.
type output struct {
	g     *Guard
	out   []byte
	whole []byte // out as taken, recycled once drained
	held  int64
	err   error // returned once out is drained
}

// serve copies out into p; when out is drained it releases the reservation and asks next for another message.
func (o *output) serve(p []byte, next func()) (int, error) {
	for len(o.out) == 0 {
		o.g.account().release(o.held)
		o.held = 0
		if o.whole != nil {
			o.g.account().recycle(o.whole)
			o.whole = nil
		}
		if o.err != nil {
			return 0, o.err
		}
		next()
	}
	n := copy(p, o.out)
	o.out = o.out[n:]
	return n, nil
}

// take hands the collector's buffer and reservation over to the output.
func (o *output) take(c *collector, out []byte) {
	o.out, o.whole = out, out
	o.held, c.held = c.held, 0
	c.reset()
}

// Lines guards a stream of newline-delimited JSON-RPC messages (a stdio server's stdout). Each line up to the limit
// passes unchanged; a longer one is replaced by an error response for its id, dropped when it is a request or
// notification, or ends the stream with an error naming the limit when it has no id.
func (g *Guard) Lines(r io.Reader) io.Reader {
	return &lineReader{output: output{g: g}, c: collector{g: g}, src: bufio.NewReaderSize(r, readBuffer)}
}

// LineMessages is Lines one message at a time, for a transport that decodes each line itself: the line is handed
// over without a copy and its buffer goes back to the pool as soon as the caller has decoded it. Through an
// io.Reader the go-sdk's json.Decoder kept a buffer as large as the largest message it had read (the tools/list
// answer, megabytes for a large catalogue) for the whole session, beside this reader's own.
type LineMessages struct{ r *lineReader }

// LineMessages guards r like Lines.
func (g *Guard) LineMessages(r io.Reader) *LineMessages {
	return &LineMessages{r: g.Lines(r).(*lineReader)}
}

// Next returns the next line with its newline, or the error that ended the stream. The line is valid until Release
// or the next call of Next, which releases it. It is not safe for concurrent use.
func (m *LineMessages) Next() ([]byte, error) {
	r := m.r
	r.out = nil
	for len(r.out) == 0 {
		m.Release()
		if r.err != nil {
			return nil, r.err
		}
		r.next()
	}
	line := r.out
	r.out = nil
	return line, nil
}

// Release gives back the buffer and the reservation of the line Next returned last.
func (m *LineMessages) Release() {
	r := m.r
	r.g.account().release(r.held)
	r.held = 0
	if r.whole != nil {
		r.g.account().recycle(r.whole)
		r.whole = nil
	}
}

type lineReader struct {
	output
	c    collector
	src  *bufio.Reader
	skip bool // the rest of the current line was already answered: discard it
}

func (r *lineReader) Read(p []byte) (int, error) { return r.serve(p, r.next) }

// next reads one line into out (or sets err).
func (r *lineReader) next() {
	if r.skip {
		r.skip = false
		for {
			_, err := r.src.ReadSlice('\n')
			if err == nil {
				break
			}
			if !errors.Is(err, bufio.ErrBufferFull) {
				r.err = err
				return
			}
		}
	}
	for {
		var err error
		for {
			var frag []byte
			frag, err = r.src.ReadSlice('\n')
			if err == nil {
				frag = bytes.TrimSuffix(frag[:len(frag)-1], []byte{'\r'})
			}
			r.c.add(frag)
			if !errors.Is(err, bufio.ErrBufferFull) {
				break
			}
			if id := r.c.early(nil); id != nil {
				// Answer now and discard the rest on the next read: the line may never end.
				r.out = append(errorResponse(id, r.c.over.Error()), '\n')
				r.c.reset()
				r.skip = true
				return
			}
		}
		if err != nil {
			r.err = err
		}
		if r.c.over == nil {
			if len(r.c.buf) == 0 && err != nil {
				r.c.free()
				r.c.reset()
				return
			}
			r.take(&r.c, append(r.c.buf, '\n'))
			return
		}
		why := r.c.over
		id, k := identify(r.c.head, r.c.tail)
		r.c.reset()
		switch {
		case k == kindRequest:
			// Nobody waits for a response to it: drop it and read on.
		case id != nil:
			r.out = append(errorResponse(id, why.Error()), '\n')
			return
		default:
			r.err = streamError(why.Error())
			return
		}
		if r.err != nil {
			return
		}
	}
}

// Events guards a text/event-stream body (the legacy SSE stream, or the stream of a streamable HTTP POST).
// fallback is the id to fail when an oversized message shows none (the POST's request id; nil on the SSE stream).
func (g *Guard) Events(body io.ReadCloser, fallback json.RawMessage) io.ReadCloser {
	return &eventReader{output: output{g: g}, c: collector{g: g}, src: g.reader(body), body: body, fallback: fallback}
}

type eventReader struct {
	output
	c        collector
	src      *bufio.Reader
	body     io.Closer
	fallback json.RawMessage

	name, id, retry string
	hasData         bool
	hasFields       bool
	skip            bool // the rest of the current event was already answered: discard it

	// raw: read by NextEvent, which takes each event as its fields and data instead of re-encoded as text; ev is
	// the event next() completed (ready).
	raw   bool
	ready bool
	ev    Event
}

// Event is one event of a guarded event stream as NextEvent hands it over: what Read would have encoded, as the
// fields an event-stream parser reads back from that encoding (the data lines joined by newlines, as the stream
// sent them or replaced by an error response when over the limit).
type Event struct {
	Name, ID, Retry string
	// Data is valid until the next call of NextEvent or Read.
	Data    []byte
	HasData bool
}

// EventSource is a guarded event stream read event by event: the body Events returns. A reader that parses the
// events itself (the server actor's fast hop) takes them as they are instead of re-encoded as text by the guard
// and parsed again (issue 26). NextEvent and Read must not be mixed on one stream, except that Read may drain what
// is left after NextEvent.
type EventSource interface {
	NextEvent() (Event, error)
}

// NextEvent returns the next event of the stream, or the error that ended it: the events, replacements and bounds
// of Read, without their encoding.
func (r *eventReader) NextEvent() (Event, error) {
	r.raw = true
	r.ready, r.out = false, nil
	for !r.ready {
		// The previous event's buffer and reservation are given back, as Read's serve does once it is drained.
		r.g.account().release(r.held)
		r.held = 0
		if r.whole != nil {
			r.g.account().recycle(r.whole)
			r.whole = nil
		}
		if r.err != nil {
			if r.src != nil {
				r.g.recycle(r.src)
				r.src = nil
			}
			return Event{}, r.err
		}
		r.next()
	}
	ev := r.ev
	r.ready, r.ev = false, Event{}
	return ev, nil
}

// put completes an event read by NextEvent.
func (r *eventReader) put(ev Event) {
	r.ev, r.ready = ev, true
}

// Read hands the go-sdk the next message; once the stream has ended, the line buffer goes back to the guard.
func (r *eventReader) Read(p []byte) (int, error) {
	n, err := r.serve(p, r.next)
	if err != nil && r.src != nil {
		r.g.recycle(r.src)
		r.src = nil
	}
	return n, err
}

// Close closes the body. It may run while a Read waits on the body, so it leaves the reservation alone: the Read
// that fails next releases it, and Account.Close releases whatever a session still holds.
func (r *eventReader) Close() error { return r.body.Close() }

// field is the largest value of an event, id or retry field that is kept; longer ones are ignored.
const field = 4096

// next reads lines until an event is complete and puts its encoding into out.
func (r *eventReader) next() {
	if r.skip {
		r.skip = false
		if !r.skipEvent() {
			return
		}
	}
	for {
		line, first := []byte(nil), true
		var err error
		var key string
		var small []byte // value of a non-data field
		ignore := false
		for {
			var frag []byte
			frag, err = r.src.ReadSlice('\n')
			last := !errors.Is(err, bufio.ErrBufferFull)
			if last {
				frag = bytes.TrimRight(frag, "\r\n")
			}
			if first {
				first = false
				if len(frag) == 0 && last {
					line = []byte{} // blank line: end of event
					break
				}
				before, after, found := bytes.Cut(frag, []byte{':'})
				if !found {
					ignore = true // malformed or an over-long field name
				} else {
					key = string(before)
					frag = bytes.TrimLeft(after, " ")
				}
				if key == "data" && !ignore {
					if r.hasData {
						r.c.add([]byte{'\n'})
					}
					r.hasData = true
				}
			}
			switch {
			case ignore:
			case key == "data":
				r.c.add(frag)
				if r.name == "" || r.name == "message" {
					if id := r.c.early(r.fallback); id != nil {
						// Answer now and discard the rest of the event: it may never end.
						r.out = r.answer(id)
						r.skip = true
						r.endPOST()
						return
					}
				}
			case key == "event" || key == "id" || key == "retry":
				if len(small)+len(frag) <= field {
					small = append(small, frag...)
				} else {
					ignore = true
				}
			}
			if last {
				break
			}
		}
		if !ignore {
			v := strings.TrimSpace(string(small))
			switch key {
			case "event":
				r.name, r.hasFields = v, true
			case "id":
				r.id, r.hasFields = v, true
			case "retry":
				r.retry, r.hasFields = v, true
			}
		}
		eof := err != nil
		if line != nil || eof {
			if r.emit() || r.err != nil {
				if eof && r.err == nil {
					r.err = err
				}
				return
			}
		}
		if eof {
			r.err = err
			return
		}
	}
}

// endPOST ends a POST's stream once its oversized answer is replaced: the response to the POST's request is what
// the stream was for, so the rest of it (up to gigabytes from a hostile backend) is not read, and the connection is
// dropped instead of drained. The legacy SSE stream (no fallback id) carries the whole session and is kept.
func (r *eventReader) endPOST() {
	if r.fallback == nil {
		return
	}
	r.skip = false
	r.err = io.EOF
	_ = r.body.Close()
}

// answer encodes the replacement of the current, oversized event and resets the event.
func (r *eventReader) answer(id json.RawMessage) []byte {
	if r.raw {
		r.put(Event{Name: r.name, ID: r.id, Data: errorResponse(id, r.c.over.Error()), HasData: true})
		r.c.reset()
		r.name, r.id, r.retry, r.hasData, r.hasFields = "", "", "", false, false
		return nil
	}
	var b bytes.Buffer
	if r.name != "" {
		b.WriteString("event: " + r.name + "\n")
	}
	if r.id != "" {
		b.WriteString("id: " + r.id + "\n")
	}
	b.WriteString("data: ")
	b.Write(errorResponse(id, r.c.over.Error()))
	b.WriteString("\n\n")
	r.c.reset()
	r.name, r.id, r.retry, r.hasData, r.hasFields = "", "", "", false, false
	return b.Bytes()
}

// skipEvent reads up to the blank line that ends the current event; false when the stream ended first.
func (r *eventReader) skipEvent() bool {
	first := true
	for {
		frag, err := r.src.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			first = false
			continue
		}
		if err != nil {
			r.err = err
			return false
		}
		if first && len(bytes.TrimRight(frag, "\r\n")) == 0 {
			return true
		}
		first = true
	}
}

// emit ends the current event: it puts its encoding (or its replacement) into out, or sets err, and reports
// whether there is something to hand over.
func (r *eventReader) emit() bool {
	name, id, retry, hasData := r.name, r.id, r.retry, r.hasData
	r.name, r.id, r.retry, r.hasData, r.hasFields = "", "", "", false, false
	header := func(b *bytes.Buffer) {
		if name != "" {
			b.WriteString("event: " + name + "\n")
		}
		if id != "" {
			b.WriteString("id: " + id + "\n")
		}
		if retry != "" {
			b.WriteString("retry: " + retry + "\n")
		}
	}
	var b bytes.Buffer
	if r.c.over == nil {
		if !hasData && name == "" && id == "" && retry == "" {
			r.c.free()
			r.c.reset()
			return false
		}
		if r.raw {
			// The event as it is: its data stays in the collector's buffer, which moves with its reservation.
			if hasData && r.g != nil && r.g.Pace != nil && isNotification(r.c.buf) {
				r.g.Pace()
			}
			data := r.c.buf
			r.take(&r.c, data)
			r.out = nil
			r.put(Event{Name: name, ID: id, Retry: retry, Data: data, HasData: hasData})
			return true
		}
		// Exactly what the encoding takes, from the recycled buffers when it is large.
		size := len(r.c.buf) + 7*(bytes.Count(r.c.buf, []byte{'\n'})+1) + len(name) + len(id) + len(retry) + 32
		if size >= SmallMessage {
			b = *bytes.NewBuffer(r.g.account().grow(nil, size))
		}
		b.Grow(size)
		header(&b)
		if hasData {
			for _, l := range bytes.Split(r.c.buf, []byte{'\n'}) {
				b.WriteString("data: ")
				b.Write(l)
				b.WriteByte('\n')
			}
		}
		b.WriteByte('\n')
		if hasData && r.g != nil && r.g.Pace != nil && isNotification(r.c.buf) {
			r.g.Pace()
		}
		r.g.account().recycle(r.c.buf)
		r.c.buf = nil // the encoding replaces it; the reservation moves with it
		r.take(&r.c, b.Bytes())
		return true
	}
	why := r.c.over
	msgID, k := identify(r.c.head, r.c.tail)
	r.c.reset()
	switch {
	case name == "endpoint":
		r.err = streamError(why.Error())
		return false
	case name != "" && name != "message", k == kindRequest:
		// Not a message anyone waits for: drop it, keeping its event id for resumption.
		if id == "" {
			return false
		}
		if r.raw {
			r.put(Event{ID: id})
			return true
		}
		name, retry = "", ""
		header(&b)
		b.WriteByte('\n')
		r.out = b.Bytes()
		return true
	}
	if msgID == nil {
		msgID = r.fallback
	}
	if msgID == nil {
		r.err = streamError(why.Error())
		return false
	}
	if r.raw {
		r.put(Event{Name: name, ID: id, Retry: retry, Data: errorResponse(msgID, why.Error()), HasData: true})
		r.endPOST()
		return true
	}
	header(&b)
	b.WriteString("data: ")
	b.Write(errorResponse(msgID, why.Error()))
	b.WriteString("\n\n")
	r.out = b.Bytes()
	r.endPOST()
	return true
}

// JSONBody guards an application/json response body (the answer to a streamable HTTP POST) whose request had id
// (nil: the id is looked for in the head of the body). The body is read on the first Read, up to the limit; a longer
// one is closed unread and replaced by an error response for id.
func (g *Guard) JSONBody(body io.ReadCloser, id json.RawMessage) io.ReadCloser {
	return &bodyReader{output: output{g: g}, c: collector{g: g}, body: body, id: id}
}

type bodyReader struct {
	output
	c      collector
	body   io.ReadCloser
	id     json.RawMessage
	loaded bool
}

func (r *bodyReader) Read(p []byte) (int, error) {
	if !r.loaded {
		r.loaded = true
		r.load()
	}
	return r.serve(p, func() { r.err = io.EOF })
}

func (r *bodyReader) load() {
	br := r.g.reader(r.body)
	_, err := br.WriteTo(collectorWriter{&r.c})
	r.g.recycle(br)
	switch {
	case r.c.over != nil:
		_ = r.body.Close() // unread: the connection is dropped rather than drained
	case err != nil:
		r.c.free()
		r.c.reset()
		r.err = err
		return
	}
	r.err = io.EOF
	if r.c.over == nil {
		r.take(&r.c, r.c.buf)
		return
	}
	why := r.c.over
	id := r.id
	if id == nil {
		id, _ = headID(r.c.head)
	}
	r.c.reset()
	if id == nil {
		r.err = streamError(why.Error())
		return
	}
	r.out = errorResponse(id, why.Error())
}

// collectorWriter feeds a collector from bufio.Reader.WriteTo, stopping the copy once the message is over the limit.
type collectorWriter struct{ c *collector }

func (w collectorWriter) Write(p []byte) (int, error) {
	w.c.add(p)
	if w.c.over != nil {
		return len(p), errStopCopy
	}
	return len(p), nil
}

// errStopCopy ends a body's copy into its collector once the body is known to be too large.
var errStopCopy = errors.New("message over the limit")

// Close closes the body (see eventReader.Close for the reservation).
func (r *bodyReader) Close() error { return r.body.Close() }

// RoundTripper guards every response of an SSE or streamable HTTP session: event streams and JSON bodies message
// by message, any other body (an error page) truncated at the limit.
func (g *Guard) RoundTripper(base http.RoundTripper) http.RoundTripper {
	return &roundTripper{g: g, base: base}
}

type roundTripper struct {
	g    *Guard
	base http.RoundTripper
	// heads recycles the buffers requestID reads a POST's head into (else one of 4 KiB per call to the backend).
	heads sync.Pool // of *[headTailBytes]byte
}

func (t *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	id := t.requestID(req)
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.Body == nil || resp.Body == http.NoBody {
		return resp, err
	}
	ct, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	switch strings.ToLower(strings.TrimSpace(ct)) {
	case "text/event-stream":
		resp.Body = t.g.Events(resp.Body, id)
	case "application/json":
		resp.Body = t.g.JSONBody(resp.Body, id)
	default:
		resp.Body = &limitedBody{Reader: io.LimitReader(resp.Body, int64(t.g.limit())), Closer: resp.Body}
	}
	resp.ContentLength = -1
	return resp, nil
}

type limitedBody struct {
	io.Reader
	io.Closer
}

// RequestIDer is a POST body that knows the id of the JSON-RPC request it carries (nil for a notification or a
// response): the guard takes the id from it instead of reading the body's head again (the server actor's fast hop,
// issue 26). The id must be what the body's "id" is.
type RequestIDer interface {
	JSONRPCRequestID() json.RawMessage
}

// requestID is the id of the JSON-RPC call a POST carries (nil for a notification, a response or no body).
func (t *roundTripper) requestID(req *http.Request) json.RawMessage {
	if req.Method != http.MethodPost {
		return nil
	}
	if b, ok := req.Body.(RequestIDer); ok {
		if id := b.JSONRPCRequestID(); len(id) > 0 {
			return id
		}
		return nil
	}
	if req.GetBody == nil {
		return nil
	}
	rc, err := req.GetBody()
	if err != nil {
		return nil
	}
	defer rc.Close()
	head, _ := t.heads.Get().(*[headTailBytes]byte)
	if head == nil {
		head = new([headTailBytes]byte)
	}
	defer t.heads.Put(head)
	n, _ := io.ReadFull(rc, head[:])
	id, k := headID(head[:n]) // a copy: head goes back to the pool
	if k != kindRequest {
		return nil
	}
	return id
}
