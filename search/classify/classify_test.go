package classify

import (
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode"
)

func TestDefaultTaxonomy(t *testing.T) {
	tax := DefaultTaxonomy()
	if n := len(tax.Skills); n < 15 || n > 30 {
		t.Fatalf("%d skills, want 15-30", n)
	}
	for _, id := range []string{"code_management", "issue_tracking", "communication", "file_operations", "web_search",
		"browser_automation", "database", "data_analysis", "documents", "calendar_scheduling", "memory_knowledge",
		"devops_cloud", "finance", "media", "maps_location"} {
		if _, ok := tax.Skill(id); !ok {
			t.Errorf("skill %s missing", id)
		}
	}
}

func TestParseTaxonomyRejects(t *testing.T) {
	cases := map[string]string{
		"empty":         `{"version":1,"skills":[]}`,
		"bad id":        `{"version":1,"skills":[{"id":"Bad-Id","name":"n","description":"d"}]}`,
		"duplicate":     `{"version":1,"skills":[{"id":"a","name":"n","description":"d"},{"id":"a","name":"n","description":"d"}]}`,
		"no name":       `{"version":1,"skills":[{"id":"a","name":"","description":"d"}]}`,
		"unknown field": `{"version":1,"skills":[{"id":"a","name":"n","description":"d","extra":1}]}`,
		"not json":      `skills: [a]`,
	}
	for name, body := range cases {
		if _, err := ParseTaxonomy([]byte(body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestApplyRules(t *testing.T) {
	tax := DefaultTaxonomy()
	cases := []struct {
		name    string
		in      []Assignment
		want    []string
		wantErr bool
	}{
		{"keeps >= 0.5, highest first", []Assignment{{"web_search", 0.6}, {"finance", 0.4}, {"database", 0.9}}, []string{"database", "web_search"}, false},
		{"at most three", []Assignment{{"web_search", 0.6}, {"finance", 0.7}, {"database", 0.9}, {"media", 0.8}}, []string{"database", "media", "finance"}, false},
		{"exactly 0.5 kept", []Assignment{{"media", 0.5}}, []string{"media"}, false},
		{"none good enough", []Assignment{{"media", 0.49}}, nil, false},
		{"duplicates once", []Assignment{{"media", 0.9}, {"media", 0.8}}, []string{"media"}, false},
		{"unknown skill", []Assignment{{"astrology", 0.9}}, nil, true},
		{"confidence above 1", []Assignment{{"media", 1.5}}, nil, true},
		{"NaN confidence", []Assignment{{"media", math.NaN()}}, nil, true},
	}
	for _, c := range cases {
		r, err := tax.apply(c.in)
		if c.wantErr {
			if !errors.Is(err, ErrInvalidAnswer) {
				t.Errorf("%s: want ErrInvalidAnswer, got %v", c.name, err)
			}
			continue
		}
		if err != nil || strings.Join(r.SkillIDs(), ",") != strings.Join(c.want, ",") {
			t.Errorf("%s: got %v %v, want %v", c.name, r.SkillIDs(), err, c.want)
		}
		if len(c.want) > 0 && r.Primary != c.want[0] {
			t.Errorf("%s: primary %s, want %s", c.name, r.Primary, c.want[0])
		}
	}
}

// wordEmbedder is a small deterministic bag-of-words embedder for the tests (the product's embedder lives in
// search/embed): words hashed into 256 buckets, L2-normalised.
type wordEmbedder struct{}

func (wordEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, s := range texts {
		v := make([]float32, 256)
		for _, w := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) }) {
			if len(w) < 3 {
				continue
			}
			h := fnv.New32a()
			h.Write([]byte(strings.TrimSuffix(w, "s")))
			v[h.Sum32()%256]++
		}
		var n float64
		for _, x := range v {
			n += float64(x * x)
		}
		for j := range v {
			if n > 0 {
				v[j] /= float32(math.Sqrt(n))
			}
		}
		out[i] = v
	}
	return out, nil
}

func TestBuiltinClassifier(t *testing.T) {
	tax := DefaultTaxonomy()
	b, err := NewBuiltin(context.Background(), wordEmbedder{}, tax, nil)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		tool    Tool
		primary string
	}{
		{Tool{Name: "create_issue", Description: "Create a new issue with a bug report in the tracker and assign it"}, "issue_tracking"},
		{Tool{Name: "get_forecast", Description: "Get the weather forecast, temperature and precipitation for a city"}, "weather"},
		{Tool{Name: "query", Description: "Run a SQL query against the PostgreSQL database tables"}, "database"},
		{Tool{Name: "send_message", Description: "Send a message to a Slack channel or an email"}, "communication"},
	}
	for _, c := range cases {
		r, err := b.Classify(context.Background(), c.tool)
		if err != nil {
			t.Fatal(err)
		}
		if r.Primary != c.primary {
			t.Errorf("%s: primary %q (%v), want %s", c.tool.Name, r.Primary, r.Assignments, c.primary)
		}
		if len(r.Assignments) > MaxSkills {
			t.Errorf("%s: %d skills", c.tool.Name, len(r.Assignments))
		}
		for _, a := range r.Assignments {
			if a.Confidence < MinConfidence || a.Confidence > 1 {
				t.Errorf("%s: confidence %v", c.tool.Name, a.Confidence)
			}
		}
	}
	// A tool that says nothing stands out for no skill.
	if r, _ := b.Classify(context.Background(), Tool{Name: "x"}); len(r.Assignments) != 0 {
		t.Errorf("an empty tool got skills %v", r.Assignments)
	}
	// Skill vectors move to their tools' centroid and fall back to the description when emptied.
	desc, _ := b.SkillVector("weather")
	tv, _ := wordEmbedder{}.Embed(context.Background(), []string{"rain snow wind"})
	sum := make([]float64, len(desc))
	for i := range sum {
		sum[i] = float64(desc[i]) + float64(tv[0][i])
	}
	if err := b.SetSkillVector("weather", UnitVector(sum)); err != nil {
		t.Fatal(err)
	}
	moved, _ := b.SkillVector("weather")
	if cosine(moved, desc) > 0.999 {
		t.Errorf("centroid did not move the skill vector")
	}
	_ = b.SetSkillVector("weather", nil)
	if back, _ := b.SkillVector("weather"); cosine(back, desc) < 0.999 {
		t.Errorf("an emptied skill must fall back to its description's embedding")
	}
	if err := b.SetSkillVector("nope", desc); err == nil {
		t.Errorf("unknown skill accepted")
	}
}

// openAIChat is an httptest server speaking the OpenAI chat completions protocol; answer decides each reply.
type openAIChat struct {
	mu       sync.Mutex
	requests []map[string]any
	auth     []string
	answer   func(n int) (status int, content string)
	calls    atomic.Int32
}

func (o *openAIChat) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	b, _ := io.ReadAll(r.Body)
	var req map[string]any
	_ = json.Unmarshal(b, &req)
	o.mu.Lock()
	o.requests = append(o.requests, req)
	o.auth = append(o.auth, r.Header.Get("Authorization"))
	o.mu.Unlock()
	n := int(o.calls.Add(1))
	status, content := o.answer(n)
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	if status != http.StatusOK {
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"error":{"message":"busy","type":"server_error"}}`))
		return
	}
	resp := map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "created": time.Now().Unix(), "model": req["model"],
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": content}}},
		"usage": map[string]any{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

const goodAnswer = `{"skills":[{"id":"issue_tracking","confidence":0.92},{"id":"code_management","confidence":0.75},{"id":"finance","confidence":0.1}]}`

func newLLM(t *testing.T, o *openAIChat, base string) *LLM {
	hs := httptest.NewServer(o)
	t.Cleanup(hs.Close)
	l, err := NewLLM(LLMConfig{BaseURL: hs.URL + base, Model: "test-model", APIKey: "sk-secret", Backoff: 10 * time.Millisecond, MaxAttempts: 3}, DefaultTaxonomy())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLLMClassifier(t *testing.T) {
	tool := Tool{Name: "github.create_issue", Description: "Create a GitHub issue", InputSchema: json.RawMessage(`{"type":"object"}`)}
	cases := []struct {
		name      string
		answer    func(n int) (int, string)
		wantSkill []string
		wantErr   error
		wantCalls int32
	}{
		{"valid answer", func(int) (int, string) { return 200, goodAnswer }, []string{"issue_tracking", "code_management"}, nil, 1},
		{"unknown skill then valid", func(n int) (int, string) {
			if n == 1 {
				return 200, `{"skills":[{"id":"astrology","confidence":0.9}]}`
			}
			return 200, goodAnswer
		}, []string{"issue_tracking", "code_management"}, nil, 2},
		{"bad JSON every time", func(int) (int, string) { return 200, `I think it is issue tracking` }, nil, ErrInvalidAnswer, 3},
		{"extra field", func(int) (int, string) {
			return 200, `{"skills":[{"id":"media","confidence":0.9}],"why":"x"}`
		}, nil, ErrInvalidAnswer, 3},
		{"too many skills", func(int) (int, string) {
			return 200, `{"skills":[{"id":"media","confidence":0.9},{"id":"finance","confidence":0.9},{"id":"weather","confidence":0.9},{"id":"health","confidence":0.9}]}`
		}, nil, ErrInvalidAnswer, 3},
		{"500 then valid", func(n int) (int, string) {
			if n == 1 {
				return 500, ""
			}
			return 200, goodAnswer
		}, []string{"issue_tracking", "code_management"}, nil, 2},
		{"server down", func(int) (int, string) { return 503, "" }, nil, nil, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := &openAIChat{answer: c.answer}
			l := newLLM(t, o, "")
			r, err := l.Classify(context.Background(), tool)
			if got := o.calls.Load(); got != c.wantCalls {
				t.Errorf("%d requests, want %d", got, c.wantCalls)
			}
			if c.wantSkill == nil {
				if err == nil {
					t.Fatalf("want an error, got %v", r)
				}
				if c.wantErr != nil && !errors.Is(err, c.wantErr) {
					t.Fatalf("want %v, got %v", c.wantErr, err)
				}
				return
			}
			if err != nil || strings.Join(r.SkillIDs(), ",") != strings.Join(c.wantSkill, ",") || r.Primary != c.wantSkill[0] {
				t.Fatalf("got %v %v", r, err)
			}
			o.mu.Lock()
			defer o.mu.Unlock()
			req := o.requests[0]
			rf, _ := req["response_format"].(map[string]any)
			if req["model"] != "test-model" || rf["type"] != "json_schema" || o.auth[0] != "Bearer sk-secret" {
				t.Errorf("request %v auth %q", req, o.auth[0])
			}
			if msgs, _ := req["messages"].([]any); len(msgs) != 2 || !strings.Contains(msgs[1].(map[string]any)["content"].(string), "github.create_issue") {
				t.Errorf("messages %v", req["messages"])
			}
		})
	}
}

func TestLLMHonoursRetryAfterAndContext(t *testing.T) {
	o := &openAIChat{answer: func(n int) (int, string) {
		if n == 1 {
			return http.StatusTooManyRequests, ""
		}
		return 200, goodAnswer
	}}
	l := newLLM(t, o, "/v1/")
	start := time.Now()
	if _, err := l.Classify(context.Background(), Tool{Name: "t"}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Fatalf("retried after %v, Retry-After said 1s", took)
	}
	o2 := &openAIChat{answer: func(int) (int, string) { return 503, "" }}
	l2 := newLLM(t, o2, "")
	l2.cfg.Backoff = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := l2.Classify(ctx, Tool{Name: "t"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want the context's error, got %v", err)
	}
}
