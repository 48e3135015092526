package embed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeOpenAI is an httptest server speaking the OpenAI embeddings wire format. Each text "tN" embeds to a vector
// of dim components with N+1 in the first one, so answers can be checked for order. respond may override the
// answer of a given call (1-based).
type fakeOpenAI struct {
	t       *testing.T
	dim     int
	calls   atomic.Int32
	mu      sync.Mutex
	reqs    []map[string]any
	auth    []string
	paths   []string
	respond func(call int, w http.ResponseWriter, inputs []string) bool // true: handled
	reverse bool                                                        // answer data in reverse index order
}

func newFake(t *testing.T, dim int) (*fakeOpenAI, *httptest.Server) {
	f := &fakeOpenAI{t: t, dim: dim}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeOpenAI) serve(w http.ResponseWriter, r *http.Request) {
	call := int(f.calls.Add(1))
	body, _ := io.ReadAll(r.Body)
	var req map[string]any
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	f.paths = append(f.paths, r.URL.Path)
	f.mu.Unlock()
	var inputs []string
	for _, in := range req["input"].([]any) {
		inputs = append(inputs, in.(string))
	}
	if f.respond != nil && f.respond(call, w, inputs) {
		return
	}
	writeEmbeddings(w, inputs, f.dim, f.reverse)
}

func embeddingOf(text string, dim int) []float64 {
	v := make([]float64, dim)
	var n int
	fmt.Sscanf(text, "t%d", &n)
	v[0] = float64(n + 1)
	v[dim-1] = 1
	return v
}

func writeEmbeddings(w http.ResponseWriter, inputs []string, dim int, reverse bool) {
	type item struct {
		Object    string    `json:"object"`
		Index     int       `json:"index"`
		Embedding []float64 `json:"embedding"`
	}
	data := make([]item, len(inputs))
	for i, in := range inputs {
		data[i] = item{"embedding", i, embeddingOf(in, dim)}
	}
	if reverse {
		for i, j := 0, len(data)-1; i < j; i, j = i+1, j-1 {
			data[i], data[j] = data[j], data[i]
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"object": "list", "data": data, "model": "fake-embed",
		"usage": map[string]int{"prompt_tokens": len(inputs), "total_tokens": len(inputs)},
	})
}

// newTestClient returns a client whose waits are recorded instead of slept.
func newTestClient(t *testing.T, cfg Config) (*OpenAI, *[]time.Duration) {
	t.Helper()
	c, err := NewOpenAI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var waits []time.Duration
	c.sleep = func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		waits = append(waits, d)
		mu.Unlock()
		return ctx.Err()
	}
	return c, &waits
}

func texts(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("t%d", i)
	}
	return out
}

// checkOrder verifies that vecs[i] is the (normalised) embedding of "ti".
func checkOrder(t *testing.T, vecs [][]float32, n int) {
	t.Helper()
	if len(vecs) != n {
		t.Fatalf("%d vectors, want %d", len(vecs), n)
	}
	for i, v := range vecs {
		// v = (i+1, 0..., 1)/norm: the ratio of first to last component is i+1.
		if r := v[0] / v[len(v)-1]; r < float32(i+1)-1e-3 || r > float32(i+1)+1e-3 {
			t.Fatalf("vector %d is the embedding of t%.0f", i, r-1)
		}
	}
}

func TestOpenAIWireFormat(t *testing.T) {
	f, srv := newFake(t, 8)
	c, _ := newTestClient(t, Config{BaseURL: srv.URL, Model: "text-embedding-3-small", Dimensions: 8, APIKey: "sk-secret"})
	vecs, err := c.Embed(context.Background(), texts(3))
	if err != nil {
		t.Fatal(err)
	}
	checkOrder(t, vecs, 3)
	for _, v := range vecs {
		if err := Validate(v, 8); err != nil {
			t.Fatal(err)
		}
		var n float64
		for _, x := range v {
			n += float64(x) * float64(x)
		}
		if n < 0.999 || n > 1.001 {
			t.Errorf("vector not normalised: norm² %v", n)
		}
	}
	req := f.reqs[0]
	if req["model"] != "text-embedding-3-small" || req["dimensions"] != float64(8) || len(req["input"].([]any)) != 3 {
		t.Errorf("request = %v", req)
	}
	if f.auth[0] != "Bearer sk-secret" || f.paths[0] != "/v1/embeddings" {
		t.Errorf("auth %q path %q", f.auth[0], f.paths[0])
	}
	if c.Model() != "text-embedding-3-small" || c.Dimension() != 8 {
		t.Errorf("identity %s/%d", c.Model(), c.Dimension())
	}
}

func TestOpenAIBaseURL(t *testing.T) {
	tests := []struct{ base, want string }{
		{"http://h:1", "http://h:1/v1/embeddings"},
		{"http://h:1/", "http://h:1/v1/embeddings"},
		{"http://h:1/v1", "http://h:1/v1/embeddings"},
		{"https://h/v1/", "https://h/v1/embeddings"},
		{"http://h/openai/v1", "http://h/openai/v1/embeddings"},
		{"http://h/v1/embeddings", "http://h/v1/embeddings"},
	}
	for _, tt := range tests {
		got, err := embeddingsURL(tt.base)
		if err != nil || got != tt.want {
			t.Errorf("embeddingsURL(%q) = %q, %v; want %q", tt.base, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "localhost:11434", "ftp://h"} {
		if _, err := embeddingsURL(bad); err == nil {
			t.Errorf("embeddingsURL(%q) accepted", bad)
		}
	}
	// And against a server: a base with /v1 reaches the same path.
	f, srv := newFake(t, 4)
	c, _ := newTestClient(t, Config{BaseURL: srv.URL + "/v1/", Model: "m", Dimensions: 4})
	if _, err := c.Embed(context.Background(), texts(1)); err != nil {
		t.Fatal(err)
	}
	if f.paths[0] != "/v1/embeddings" {
		t.Errorf("path %q", f.paths[0])
	}
}

func TestOpenAIConfig(t *testing.T) {
	for _, cfg := range []Config{
		{BaseURL: "http://h", Dimensions: 4},
		{BaseURL: "http://h", Model: "m"},
		{BaseURL: "http://h", Model: "m", Dimensions: -1},
		{BaseURL: "h", Model: "m", Dimensions: 4},
	} {
		if _, err := NewOpenAI(cfg); err == nil {
			t.Errorf("NewOpenAI(%+v) accepted", cfg)
		}
	}
	c, err := NewOpenAI(Config{BaseURL: "http://h", Model: "m", Dimensions: 4, MaxRetries: -1})
	if err != nil || c.cfg.MaxRetries != 0 || c.cfg.BatchSize != DefaultBatchSize || c.cfg.Timeout != DefaultTimeout {
		t.Errorf("defaults: %+v, %v", c.cfg, err)
	}
}

func TestOpenAIOutOfOrderIndexes(t *testing.T) {
	f, srv := newFake(t, 4)
	f.reverse = true
	c, _ := newTestClient(t, Config{BaseURL: srv.URL, Model: "m", Dimensions: 4})
	vecs, err := c.Embed(context.Background(), texts(5))
	if err != nil {
		t.Fatal(err)
	}
	checkOrder(t, vecs, 5)
}

func TestOpenAIBatching(t *testing.T) {
	f, srv := newFake(t, 4)
	c, _ := newTestClient(t, Config{BaseURL: srv.URL, Model: "m", Dimensions: 4, BatchSize: 4})
	vecs, err := c.Embed(context.Background(), texts(10))
	if err != nil {
		t.Fatal(err)
	}
	checkOrder(t, vecs, 10)
	var sizes []int
	for _, r := range f.reqs {
		sizes = append(sizes, len(r["input"].([]any)))
	}
	if fmt.Sprint(sizes) != "[4 4 2]" {
		t.Errorf("batch sizes %v, want [4 4 2]", sizes)
	}
	if vecs, err := c.Embed(context.Background(), nil); err != nil || len(vecs) != 0 || f.calls.Load() != 3 {
		t.Errorf("no texts: %v %v, %d calls", vecs, err, f.calls.Load())
	}
}

func TestOpenAIRetries(t *testing.T) {
	tests := []struct {
		name      string
		fail      func(w http.ResponseWriter)
		failures  int
		wantWaits []time.Duration // exact waits; nil: any backoff
	}{
		{"429 with Retry-After seconds", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "2")
			http.Error(w, `{"error":{"message":"rate limited"}}`, http.StatusTooManyRequests)
		}, 1, []time.Duration{2 * time.Second}},
		{"429 with a huge Retry-After is capped", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "3600")
			http.Error(w, "slow down", http.StatusTooManyRequests)
		}, 1, []time.Duration{maxRetryAfter}},
		{"503 twice", func(w http.ResponseWriter) { http.Error(w, "unavailable", http.StatusServiceUnavailable) }, 2, nil},
		{"500", func(w http.ResponseWriter) { http.Error(w, "boom", http.StatusInternalServerError) }, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, srv := newFake(t, 4)
			f.respond = func(call int, w http.ResponseWriter, _ []string) bool {
				if call <= tt.failures {
					tt.fail(w)
					return true
				}
				return false
			}
			c, waits := newTestClient(t, Config{BaseURL: srv.URL, Model: "m", Dimensions: 4})
			vecs, err := c.Embed(context.Background(), texts(2))
			if err != nil {
				t.Fatal(err)
			}
			checkOrder(t, vecs, 2)
			if int(f.calls.Load()) != tt.failures+1 || len(*waits) != tt.failures {
				t.Fatalf("%d calls, %d waits; want %d and %d", f.calls.Load(), len(*waits), tt.failures+1, tt.failures)
			}
			for i, w := range *waits {
				if tt.wantWaits != nil && w != tt.wantWaits[i] {
					t.Errorf("wait %d = %v, want %v", i, w, tt.wantWaits[i])
				}
				if tt.wantWaits == nil && (w <= 0 || w > retryCap) {
					t.Errorf("wait %d = %v out of range", i, w)
				}
			}
		})
	}
}

func TestOpenAIGivesUp(t *testing.T) {
	f, srv := newFake(t, 4)
	f.respond = func(_ int, w http.ResponseWriter, _ []string) bool {
		http.Error(w, "down", http.StatusBadGateway)
		return true
	}
	c, waits := newTestClient(t, Config{BaseURL: srv.URL, Model: "m", Dimensions: 4, MaxRetries: 2})
	_, err := c.Embed(context.Background(), texts(1))
	if err == nil || !strings.Contains(err.Error(), "status 502") {
		t.Fatalf("err = %v", err)
	}
	if f.calls.Load() != 3 || len(*waits) != 2 {
		t.Errorf("%d calls, %d waits; want 3 and 2", f.calls.Load(), len(*waits))
	}
}

func TestOpenAITimeoutIsRetried(t *testing.T) {
	f, srv := newFake(t, 4)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	f.respond = func(call int, w http.ResponseWriter, _ []string) bool {
		if call == 1 {
			<-release // hang until the test ends; the client's attempt timeout fires first
			return true
		}
		return false
	}
	c, waits := newTestClient(t, Config{BaseURL: srv.URL, Model: "m", Dimensions: 4, Timeout: 100 * time.Millisecond})
	vecs, err := c.Embed(context.Background(), texts(2))
	if err != nil {
		t.Fatal(err)
	}
	checkOrder(t, vecs, 2)
	if len(*waits) != 1 {
		t.Errorf("%d waits, want 1", len(*waits))
	}
}

func TestOpenAIConnectionRefusedIsRetried(t *testing.T) {
	_, srv := newFake(t, 4)
	url := srv.URL
	srv.Close()
	c, waits := newTestClient(t, Config{BaseURL: url, Model: "m", Dimensions: 4, MaxRetries: 1})
	if _, err := c.Embed(context.Background(), texts(1)); err == nil {
		t.Fatal("no error from a closed server")
	}
	if len(*waits) != 1 {
		t.Errorf("%d waits, want 1", len(*waits))
	}
}

func TestOpenAIBadAnswers(t *testing.T) {
	tests := []struct {
		name    string
		answer  func(w http.ResponseWriter, inputs []string)
		invalid bool // error wraps ErrInvalidVector
	}{
		{"wrong size", func(w http.ResponseWriter, in []string) { writeEmbeddings(w, in, 5, false) }, true},
		{"too few embeddings", func(w http.ResponseWriter, in []string) { writeEmbeddings(w, in[:1], 4, false) }, true},
		{"zero vector", func(w http.ResponseWriter, in []string) {
			fmt.Fprint(w, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0,0,0,0]},`+
				`{"object":"embedding","index":1,"embedding":[1,0,0,0]}],"model":"m"}`)
		}, true},
		{"overflow to infinity", func(w http.ResponseWriter, in []string) {
			fmt.Fprint(w, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[1e300,0,0,0]},`+
				`{"object":"embedding","index":1,"embedding":[1,0,0,0]}],"model":"m"}`)
		}, true},
		{"duplicate index", func(w http.ResponseWriter, in []string) {
			fmt.Fprint(w, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[1,0,0,0]},`+
				`{"object":"embedding","index":0,"embedding":[1,0,0,0]}],"model":"m"}`)
		}, true},
		{"index out of range", func(w http.ResponseWriter, in []string) {
			fmt.Fprint(w, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[1,0,0,0]},`+
				`{"object":"embedding","index":7,"embedding":[1,0,0,0]}],"model":"m"}`)
		}, true},
		{"NaN as a string", func(w http.ResponseWriter, in []string) {
			fmt.Fprint(w, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":["NaN",0,0,0]}],"model":"m"}`)
		}, false},
		{"not JSON", func(w http.ResponseWriter, in []string) { fmt.Fprint(w, "<html>proxy error</html>") }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, srv := newFake(t, 4)
			f.respond = func(_ int, w http.ResponseWriter, in []string) bool {
				tt.answer(w, in)
				return true
			}
			c, _ := newTestClient(t, Config{BaseURL: srv.URL, Model: "m", Dimensions: 4})
			vecs, err := c.Embed(context.Background(), texts(2))
			if err == nil {
				t.Fatalf("accepted %v", vecs)
			}
			if tt.invalid && !errors.Is(err, ErrInvalidVector) {
				t.Errorf("err = %v, want ErrInvalidVector", err)
			}
			if f.calls.Load() != 1 {
				t.Errorf("%d calls: a bad answer must not be retried", f.calls.Load())
			}
		})
	}
}

func TestOpenAIClientErrorNotRetriedAndKeyRedacted(t *testing.T) {
	f, srv := newFake(t, 4)
	f.respond = func(_ int, w http.ResponseWriter, _ []string) bool {
		// A server that echoes the credential it refused.
		http.Error(w, `{"error":{"message":"Incorrect API key provided: sk-very-secret"}}`, http.StatusUnauthorized)
		return true
	}
	c, waits := newTestClient(t, Config{BaseURL: srv.URL, Model: "m", Dimensions: 4, APIKey: "sk-very-secret"})
	_, err := c.Embed(context.Background(), texts(1))
	if err == nil || !strings.Contains(err.Error(), "status 401") {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(err.Error(), "sk-very-secret") {
		t.Errorf("the key leaked into the error: %v", err)
	}
	if f.calls.Load() != 1 || len(*waits) != 0 {
		t.Errorf("a 401 was retried: %d calls", f.calls.Load())
	}
}

func TestOpenAIOmitDimensions(t *testing.T) {
	f, srv := newFake(t, 4)
	c, _ := newTestClient(t, Config{BaseURL: srv.URL, Model: "m", Dimensions: 4, OmitDimensions: true})
	if _, err := c.Embed(context.Background(), texts(1)); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.reqs[0]["dimensions"]; ok {
		t.Errorf("dimensions sent: %v", f.reqs[0])
	}
}

func TestOpenAIContextCancelledDuringBackoff(t *testing.T) {
	f, srv := newFake(t, 4)
	f.respond = func(_ int, w http.ResponseWriter, _ []string) bool {
		w.Header().Set("Retry-After", "30")
		http.Error(w, "busy", http.StatusTooManyRequests)
		return true
	}
	c, err := NewOpenAI(Config{BaseURL: srv.URL, Model: "m", Dimensions: 4}) // real sleep
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Embed(ctx, texts(1))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the context's deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Embed took %v after its context ended", d)
	}
}

func TestRetryAfter(t *testing.T) {
	if d := retryAfter("1.5"); d != 1500*time.Millisecond {
		t.Errorf("1.5 -> %v", d)
	}
	for _, h := range []string{"", "0", "-3", "soon"} {
		if d := retryAfter(h); d != 0 {
			t.Errorf("%q -> %v", h, d)
		}
	}
	date := time.Now().Add(10 * time.Second).UTC().Format(http.TimeFormat)
	if d := retryAfter(date); d < 8*time.Second || d > 11*time.Second {
		t.Errorf("HTTP date -> %v", d)
	}
	s := retryBackoff().Schedule()
	for attempt := range 20 {
		d := s.NextBackOff()
		want := min(retryBase<<min(attempt, 10), retryCap) // the wait's upper bound; its lower is half of it
		if d < want/2 || d > want {
			t.Errorf("wait %d = %v, want [%v, %v]", attempt+1, d, want/2, want)
		}
	}
}
