package msglimit

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// msg builds a JSON-RPC response whose text result pads it to exactly size bytes. order "head" puts jsonrpc and id
// first (go serializers), "tail" puts id last (the TypeScript SDK), "none" has no id.
func msg(t testing.TB, order, id string, size int) string {
	t.Helper()
	var pre, post string
	switch order {
	case "head":
		pre, post = `{"jsonrpc":"2.0","id":`+id+`,"result":{"text":"`, `"}}`
	case "tail":
		pre, post = `{"result":{"text":"`, `"},"jsonrpc":"2.0","id":`+id+`}`
	case "request":
		pre, post = `{"method":"sampling/createMessage","params":{"text":"`, `"},"jsonrpc":"2.0","id":`+id+`}`
	default:
		pre, post = `{"jsonrpc":"2.0","result":{"text":"`, `"}}`
	}
	n := size - len(pre) - len(post)
	if n < 0 {
		t.Fatalf("size %d too small", size)
	}
	return pre + strings.Repeat("x", n) + post
}

func tooLargeLine(id string, limit int) string {
	g := &Guard{Limit: limit}
	return string(errorResponse(json.RawMessage(id), g.tooLargeText()))
}

func TestLines(t *testing.T) {
	const limit = 1000
	ok := `{"jsonrpc":"2.0","id":9,"result":{}}`
	cases := []struct {
		name    string
		in      string
		want    []string
		wantErr bool
	}{
		{"exact limit passes", msg(t, "head", "1", limit) + "\n", []string{msg(t, "head", "1", limit)}, false},
		{"limit+1, id at head", msg(t, "head", "1", limit+1) + "\n" + ok + "\n", []string{tooLargeLine("1", limit), ok}, false},
		{"limit+1, id at tail", msg(t, "tail", "7", limit+1) + "\n", []string{tooLargeLine("7", limit)}, false},
		{"string id at head", msg(t, "head", `"a\"b"`, 5000) + "\n", []string{tooLargeLine(`"a\"b"`, limit)}, false},
		{"string id at tail", msg(t, "tail", `"x-1"`, 5000) + "\n", []string{tooLargeLine(`"x-1"`, limit)}, false},
		{"far over the limit", msg(t, "head", "3", 300_000) + "\n" + ok + "\n", []string{tooLargeLine("3", limit), ok}, false},
		{"request dropped", msg(t, "request", "0", 5000) + "\n" + ok + "\n", []string{ok}, false},
		{"no id fails the stream", ok + "\n" + msg(t, "none", "", 5000) + "\n" + ok + "\n", []string{ok}, true},
		{"CRLF", ok + "\r\n" + msg(t, "head", "2", limit) + "\r\n", []string{ok, msg(t, "head", "2", limit)}, false},
		{"CRLF over", msg(t, "tail", "4", limit+1) + "\r\n", []string{tooLargeLine("4", limit)}, false},
		{"last line without newline", ok, []string{ok}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBudget(0, 0)
			g := &Guard{Limit: limit, Account: b.Account()}
			out, err := io.ReadAll(g.Lines(strings.NewReader(tc.in)))
			if tc.wantErr != (err != nil) {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err != nil && (!errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), LimitVar)) {
				t.Fatalf("stream error %q does not name %s", err, LimitVar)
			}
			got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
			if len(tc.want) == 0 && string(out) == "" {
				got = nil
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("got %d lines %.200q, want %d %.200q", len(got), got, len(tc.want), tc.want)
			}
			if b.Used() != 0 {
				t.Fatalf("budget still holds %d bytes", b.Used())
			}
		})
	}
}

func sse(data string) string { return "event: message\ndata: " + data + "\n\n" }

func TestEvents(t *testing.T) {
	const limit = 1000
	ok := `{"jsonrpc":"2.0","id":9,"result":{}}`
	cases := []struct {
		name     string
		in       string
		fallback string
		want     string
		wantErr  bool
	}{
		{"exact limit passes", sse(msg(t, "head", "1", limit)), "", sse(msg(t, "head", "1", limit)), false},
		{"limit+1, id at head", sse(msg(t, "head", "1", limit+1)) + sse(ok), "", sse(tooLargeLine("1", limit)) + sse(ok), false},
		{"id at tail, TypeScript order", sse(msg(t, "tail", `"s"`, 50_000)), "", sse(tooLargeLine(`"s"`, limit)), false},
		{"no id, fallback", sse(msg(t, "none", "", 5000)), "12", sse(tooLargeLine("12", limit)), false},
		{"no id, no fallback fails", sse(ok) + sse(msg(t, "none", "", 5000)), "", sse(ok), true},
		{"multiple events and ids", "id: e1\ndata: " + ok + "\n\nid: e2\nevent: message\ndata: " + msg(t, "head", "5", 2000) + "\n\n",
			"", "id: e1\ndata: " + ok + "\n\nevent: message\nid: e2\ndata: " + tooLargeLine("5", limit) + "\n\n", false},
		{"multi-line data joined", "data: {\"jsonrpc\":\"2.0\",\ndata: \"id\":3,\"result\":{}}\n\n", "",
			"data: {\"jsonrpc\":\"2.0\",\ndata: \"id\":3,\"result\":{}}\n\n", false},
		{"split data over the limit", "data: {\"jsonrpc\":\"2.0\",\"id\":3,\ndata: \"result\":\"" + strings.Repeat("y", 2000) + "\"}\n\n", "",
			"data: " + tooLargeLine("3", limit) + "\n\n", false},
		{"CRLF", "event: message\r\ndata: " + ok + "\r\n\r\n", "", sse(ok), false},
		{"comments and priming event", ": ping\n\nid: p\ndata:\n\n", "", "id: p\ndata: \n\n", false},
		{"oversized request dropped, id kept", "id: r\ndata: " + msg(t, "request", "0", 5000) + "\n\n" + sse(ok), "7", "id: r\n\n" + sse(ok), false},
		{"endpoint too large fails", "event: endpoint\ndata: /" + strings.Repeat("p", 2000) + "\n\n", "", "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBudget(0, 0)
			g := &Guard{Limit: limit, Account: b.Account()}
			var fb json.RawMessage
			if tc.fallback != "" {
				fb = json.RawMessage(tc.fallback)
			}
			r := g.Events(io.NopCloser(strings.NewReader(tc.in)), fb)
			out, err := io.ReadAll(r)
			if tc.wantErr != (err != nil) {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), LimitVar) {
				t.Fatalf("stream error %q does not name %s", err, LimitVar)
			}
			if string(out) != tc.want {
				t.Fatalf("got %.300q\nwant %.300q", out, tc.want)
			}
			if b.Used() != 0 {
				t.Fatalf("budget still holds %d bytes", b.Used())
			}
		})
	}
}

func TestJSONBody(t *testing.T) {
	const limit = 1000
	cases := []struct {
		name, in, id, want string
		wantErr            bool
	}{
		{"exact limit", msg(t, "head", "1", limit), "1", msg(t, "head", "1", limit), false},
		{"limit+1 answers for the request id", msg(t, "tail", "1", limit+1), "1", tooLargeLine("1", limit), false},
		{"unknown request id, id at head", msg(t, "head", `"q"`, 100_000), "", tooLargeLine(`"q"`, limit), false},
		{"no id anywhere", msg(t, "none", "", 100_000), "", "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := &Guard{Limit: limit}
			var id json.RawMessage
			if tc.id != "" {
				id = json.RawMessage(tc.id)
			}
			out, err := io.ReadAll(g.JSONBody(io.NopCloser(strings.NewReader(tc.in)), id))
			if tc.wantErr != (err != nil) || string(out) != tc.want {
				t.Fatalf("got %.200q, %v; want %.200q (error %v)", out, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestBudget: large messages reserve from the server's share and the total, small ones never, and everything is
// given back once read or when the session's account closes.
func TestBudget(t *testing.T) {
	b := NewBudget(300_000, 200_000)
	a1, a2 := b.Account(), b.Account()
	big := msg(t, "head", "1", 150_000) + "\n"
	// One server holding a read-but-unconsumed 150 kB message: a second one of its own does not fit its share.
	r1 := (&Guard{Limit: 1 << 20, Account: a1}).Lines(strings.NewReader(big + big))
	first := make([]byte, 10)
	if _, err := r1.Read(first); err != nil {
		t.Fatal(err)
	}
	if b.Used() < 150_000 {
		t.Fatalf("used %d, want the first message reserved", b.Used())
	}
	rest, err := io.ReadAll(r1)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(rest), "\n"); n != 2 {
		t.Fatalf("want both lines, got %d", n)
	}
	if b.Used() != 0 {
		t.Fatalf("used %d after reading everything", b.Used())
	}
	// Hold 150 kB in a1, then a second server gets only the 150 kB left of the total.
	r1 = (&Guard{Limit: 1 << 20, Account: a1}).Lines(strings.NewReader(big))
	if _, err := r1.Read(first); err != nil {
		t.Fatal(err)
	}
	r2 := (&Guard{Limit: 1 << 20, Account: a2}).Lines(strings.NewReader(msg(t, "head", "8", 200_000) + "\n"))
	out, err := io.ReadAll(r2)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), BudgetVar) || !TooLarge(ErrorCode, gjson(t, out)) {
		t.Fatalf("want a budget refusal, got %.200q", out)
	}
	// Small messages never touch it.
	small := (&Guard{Limit: 1 << 20, Account: a2}).Lines(strings.NewReader(`{"jsonrpc":"2.0","id":1,"result":{}}` + "\n"))
	if _, err := small.Read(make([]byte, 1)); err != nil || b.Used() != 150_000 {
		t.Fatalf("small message: err %v, used %d", err, b.Used())
	}
	a1.Close()
	if b.Used() != 0 {
		t.Fatalf("used %d after the account closed", b.Used())
	}
	if _, err := io.ReadAll(r1); err != nil || b.Used() != 0 {
		t.Fatalf("reading on after close: %v, used %d", err, b.Used())
	}
}

func gjson(t *testing.T, line []byte) string {
	var m struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(line), &m); err != nil {
		t.Fatalf("not JSON: %.200q", line)
	}
	return m.Error.Message
}

// TestRoundTripper: a POST's JSON and event-stream answers are guarded with the request's id, error pages truncated.
func TestRoundTripper(t *testing.T) {
	huge := strings.Repeat("z", 50_000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/json":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"result":{"t":"`+huge+`"},"jsonrpc":"2.0","id":41}`)
		case "/sse":
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"result\":\""+huge+"\"}\n\n")
		default:
			w.WriteHeader(500)
			io.WriteString(w, huge)
		}
	}))
	defer srv.Close()
	client := &http.Client{Transport: (&Guard{Limit: 1000}).RoundTripper(http.DefaultTransport)}
	body := `{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{}}`
	for path, want := range map[string]string{
		"/json": tooLargeLine("41", 1000),
		"/sse":  "data: " + tooLargeLine("41", 1000) + "\n\n",
		"/err":  strings.Repeat("z", 1000),
	} {
		resp, err := client.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(got) != want {
			t.Errorf("%s: got %.200q, want %.200q", path, got, want)
		}
	}
}

// idBody is a POST body that names its request's id (RequestIDer), and whose GetBody must not be needed.
type idBody struct {
	*strings.Reader
	id string
}

func (b idBody) Close() error                      { return nil }
func (b idBody) JSONRPCRequestID() json.RawMessage { return json.RawMessage(b.id) }

// TestRoundTripperTakesTheBodysID: a body that names its request's id (the fast hop's) gives the guard the id that
// answers an oversized message showing none, without the body being read again; a body that names none (a
// notification's) gets the stream's error, as one whose head shows no request.
func TestRoundTripperTakesTheBodysID(t *testing.T) {
	huge := strings.Repeat("z", 50_000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"result\":\""+huge+"\"}\n\n")
	}))
	defer srv.Close()
	client := &http.Client{Transport: (&Guard{Limit: 1000}).RoundTripper(http.DefaultTransport)}
	for _, tc := range []struct{ id, want string }{
		{`"hop-7"`, "data: " + tooLargeLine(`"hop-7"`, 1000) + "\n\n"},
		{"", ""},
	} {
		body := `{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{}}` // the body's own id is not read
		req, err := http.NewRequest(http.MethodPost, srv.URL, idBody{strings.NewReader(body), tc.id})
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = int64(len(body))
		req.GetBody = func() (io.ReadCloser, error) {
			t.Error("the guard read the body again for its id")
			return io.NopCloser(strings.NewReader(body)), nil
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(got) != tc.want || (tc.want == "") != (err != nil) {
			t.Errorf("id %s: got %.200q (%v), want %.200q", tc.id, got, err, tc.want)
		}
	}
}

func TestTooLarge(t *testing.T) {
	g := &Guard{Limit: 5}
	if !TooLarge(ErrorCode, g.tooLargeText()) || TooLarge(-32603, g.tooLargeText()) || TooLarge(ErrorCode, "other") {
		t.Fatal("TooLarge misclassifies")
	}
}

// FuzzGuard feeds arbitrary streams to the line and event readers and arbitrary message ends to the id finders:
// nothing panics, every message handed on fits the limit or is a synthesized error, and the budget is given back.
func FuzzGuard(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"result":{}}`+"\n"), 40)
	f.Add([]byte("data: {\"result\":1,\"id\":\"a\\\"\"}\r\n\r\nid: 3\n\n: c\nevent: endpoint\ndata: x\n\n"), 8)
	f.Add([]byte(`{"method":"x","id":2}`+"\n"+`{"id":-1.5e3}`), 4)
	f.Fuzz(func(t *testing.T, in []byte, limit int) {
		if limit < 1 || limit > 1<<16 {
			return
		}
		b := NewBudget(1<<20, 1<<19)
		g := &Guard{Limit: limit, Account: b.Account()}
		out, _ := io.ReadAll(g.Lines(bytes.NewReader(in)))
		for _, line := range bytes.Split(out, []byte{'\n'}) {
			if len(line) > limit && !bytes.Contains(line, []byte(MessagePrefix)) {
				t.Fatalf("line of %d bytes passed a limit of %d", len(line), limit)
			}
		}
		_, _ = io.ReadAll(g.Events(io.NopCloser(bytes.NewReader(in)), nil))
		_, _ = io.ReadAll(g.JSONBody(io.NopCloser(bytes.NewReader(in)), json.RawMessage("1")))
		if b.Used() != 0 {
			t.Fatalf("budget holds %d bytes after reading everything", b.Used())
		}
		h := in[:len(in)/2]
		if id, _ := identify(h, in[len(h):]); id != nil && !json.Valid(id) {
			t.Fatalf("invalid id %q", id)
		}
	})
}

// endless yields 'x' forever.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

// TestEndlessMessageAnsweredAtOnce: a message that never ends is answered as soon as it passes the limit when its
// head shows the id (or, on a POST stream, shows a response), instead of after an end that never comes.
func TestEndlessMessageAnsweredAtOnce(t *testing.T) {
	const limit = 100_000
	g := &Guard{Limit: limit}
	ev := g.Events(io.NopCloser(io.MultiReader(strings.NewReader(`data: {"jsonrpc":"2.0","id":5,"result":"`), endless{})), nil)
	if got := readUntil(t, ev, "\n\n"); got != "data: "+tooLargeLine("5", limit)+"\n\n" {
		t.Fatalf("event: got %.200q", got)
	}
	post := g.Events(io.NopCloser(io.MultiReader(strings.NewReader(`data: {"result":{"text":"`), endless{})), json.RawMessage("8"))
	if got := readUntil(t, post, "\n\n"); got != "data: "+tooLargeLine("8", limit)+"\n\n" {
		t.Fatalf("POST stream: got %.200q", got)
	}
	lines := g.Lines(io.MultiReader(strings.NewReader(`{"jsonrpc":"2.0","id":"a","result":"`), endless{}))
	if got := readUntil(t, lines, "\n"); got != tooLargeLine(`"a"`, limit)+"\n" {
		t.Fatalf("line: got %.200q", got)
	}
}

func readUntil(t *testing.T, r io.Reader, end string) string {
	t.Helper()
	var out []byte
	buf := make([]byte, 1)
	for !strings.HasSuffix(string(out), end) {
		if _, err := r.Read(buf); err != nil {
			t.Fatalf("read: %v after %.200q", err, out)
		}
		out = append(out, buf[0])
	}
	return string(out)
}

// TestLineMessages: lines come one at a time as Lines passes them (an oversized one as its error response), and a
// large line's reservation is held until Release or the next Next, not for the rest of the session.
func TestLineMessages(t *testing.T) {
	big := msg(t, "head", "1", 150_000)
	tests := []struct {
		name    string
		in      string
		want    []string // each line, checked by prefix and suffix
		tooBig  []bool   // the line is a synthesized error response
		wantErr error
	}{
		{"two small lines and EOF", "{\"id\":1}\n{\"id\":2}\n", []string{"{\"id\":1}\n", "{\"id\":2}\n"}, []bool{false, false}, io.EOF},
		{"last line without newline", "{\"id\":1}", []string{"{\"id\":1}\n"}, []bool{false}, io.EOF},
		{"a large line passes", big + "\n", []string{big + "\n"}, []bool{false}, io.EOF},
		{"an oversized line becomes its error", msg(t, "head", "9", 2<<20) + "\n", []string{""}, []bool{true}, io.EOF},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBudget(1<<30, 1<<30)
			m := (&Guard{Limit: 1 << 20, Account: b.Account()}).LineMessages(strings.NewReader(tc.in))
			for i, want := range tc.want {
				line, err := m.Next()
				if err != nil {
					t.Fatalf("line %d: %v", i, err)
				}
				switch {
				case tc.tooBig[i]:
					if !TooLarge(ErrorCode, gjson(t, line)) {
						t.Fatalf("line %d: want an error response, got %.200q", i, line)
					}
				case string(line) != want:
					t.Fatalf("line %d: got %.100q, want %.100q", i, line, want)
				}
				if len(line) >= SmallMessage && !tc.tooBig[i] && b.Used() < int64(len(line)-1) {
					t.Fatalf("line %d: used %d while the line is held", i, b.Used())
				}
				m.Release()
				if b.Used() != 0 {
					t.Fatalf("line %d: used %d after Release", i, b.Used())
				}
			}
			if _, err := m.Next(); !errors.Is(err, tc.wantErr) {
				t.Fatalf("at the end: %v, want %v", err, tc.wantErr)
			}
		})
	}
}

// TestEventsPaceNotifications: an event stream calls Pace before handing over each notification, and only then
// (responses, requests with an id and events without data pass unpaced), and hands every event over unchanged.
func TestEventsPaceNotifications(t *testing.T) {
	in := "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n" +
		"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"x\"}}\n\n" +
		"data: {\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"roots/list\"}\n\n" +
		"id: 9\n\n" +
		"data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n\n"
	paced := 0
	g := &Guard{Pace: func() { paced++ }}
	out, err := io.ReadAll(g.Events(io.NopCloser(strings.NewReader(in)), nil))
	if err != nil {
		t.Fatal(err)
	}
	if paced != 2 {
		t.Errorf("Pace called %d times; want 2 (the two notifications)", paced)
	}
	for _, want := range []string{"notifications/tools/list_changed", "notifications/message", "roots/list", `"id":7`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the stream lost %s:\n%s", want, out)
		}
	}
}

// parseEvents reads an event stream's text back into its events, as a parser of the guard's encoding does (the
// server actor's fast hop did before it read events with NextEvent): a blank line ends an event, data lines are
// joined by newlines.
func parseEvents(text string) []Event {
	var out []Event
	var ev Event
	fields := false
	for _, line := range strings.Split(text, "\n") {
		if line == "" {
			if fields {
				out = append(out, ev)
			}
			ev, fields = Event{}, false
			continue
		}
		fields = true
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimPrefix(v, " ")
		switch k {
		case "event":
			ev.Name = v
		case "id":
			ev.ID = v
		case "retry":
			ev.Retry = v
		case "data":
			if ev.HasData {
				ev.Data = append(ev.Data, '\n')
			}
			ev.Data, ev.HasData = append(ev.Data, v...), true
		}
	}
	return out
}

// TestNextEventMatchesRead: a stream read event by event (NextEvent, the fast hop's way) gives the events that
// reading its guarded text (Read) and parsing it gives: the same bounds, replacements of oversized messages, event
// ids and errors, and the budget given back. An event-by-event reader that skipped a bound or a replacement fails.
func TestNextEventMatchesRead(t *testing.T) {
	const limit = 1000
	ok := `{"jsonrpc":"2.0","id":9,"result":{}}`
	cases := []struct {
		name, in, fallback string
	}{
		{"exact limit passes", sse(msg(t, "head", "1", limit)), ""},
		{"limit+1, id at head", sse(msg(t, "head", "1", limit+1)) + sse(ok), ""},
		{"id at tail, TypeScript order", sse(msg(t, "tail", `"s"`, 50_000)), ""},
		{"far over, budget buffers", sse(msg(t, "head", "8", 300_000)) + sse(ok), ""},
		{"no id, fallback", sse(msg(t, "none", "", 5000)) + sse(ok), "12"},
		{"no id, no fallback fails", sse(ok) + sse(msg(t, "none", "", 5000)), ""},
		{"multiple events and ids", "id: e1\ndata: " + ok + "\n\nid: e2\nevent: message\ndata: " + msg(t, "head", "5", 2000) + "\n\n", ""},
		{"retry and names", "retry: 10\nevent: other\ndata: x\n\nevent:  message \nid:  7 \ndata: " + ok + "\n\n", ""},
		{"multi-line data joined", "data: {\"jsonrpc\":\"2.0\",\ndata: \"id\":3,\"result\":{}}\n\n", ""},
		{"split data over the limit", "data: {\"jsonrpc\":\"2.0\",\"id\":3,\ndata: \"result\":\"" + strings.Repeat("y", 2000) + "\"}\n\n", ""},
		{"CRLF", "event: message\r\ndata: " + ok + "\r\n\r\n", ""},
		{"comments and priming event", ": ping\n\nid: p\ndata:\n\n", ""},
		{"oversized request dropped, id kept", "id: r\ndata: " + msg(t, "request", "0", 5000) + "\n\n" + sse(ok), "7"},
		{"endless event answered at once", "event: message\ndata: " + msg(t, "head", "4", 5000) + "\n\n", "4"},
		{"last event without blank line", "data: " + ok, ""},
		{"endpoint too large fails", "event: endpoint\ndata: /" + strings.Repeat("p", 2000) + "\n\n", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var fb json.RawMessage
			if tc.fallback != "" {
				fb = json.RawMessage(tc.fallback)
			}
			b := NewBudget(0, 0)
			g := &Guard{Limit: limit, Account: b.Account()}
			text, readErr := io.ReadAll(g.Events(io.NopCloser(strings.NewReader(tc.in)), fb))
			want := parseEvents(string(text))

			src, isSource := g.Events(io.NopCloser(strings.NewReader(tc.in)), fb).(EventSource)
			if !isSource {
				t.Fatal("the guarded event stream is not an EventSource")
			}
			var got []Event
			var err error
			for {
				var ev Event
				if ev, err = src.NextEvent(); err != nil {
					break
				}
				ev.Data = append([]byte(nil), ev.Data...) // valid until the next call
				if len(ev.Data) == 0 {
					ev.Data = nil
				}
				got = append(got, ev)
			}
			if (readErr == nil) != errors.Is(err, io.EOF) || readErr != nil && err.Error() != readErr.Error() {
				t.Fatalf("NextEvent ended with %v, Read with %v", err, readErr)
			}
			if len(got) != len(want) {
				t.Fatalf("NextEvent gave %d events %.300v, Read %d %.300v", len(got), got, len(want), want)
			}
			for i := range got {
				if got[i].Name != want[i].Name || got[i].ID != want[i].ID || got[i].Retry != want[i].Retry ||
					string(got[i].Data) != string(want[i].Data) {
					t.Errorf("event %d: NextEvent %+v, Read %+v", i, got[i], want[i])
				}
			}
			if b.Used() != 0 {
				t.Fatalf("budget still holds %d bytes", b.Used())
			}
		})
	}
}
