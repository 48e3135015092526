package classify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/mcpgw/aggregator/internal/retry"
	"github.com/mcpgw/aggregator/internal/retryafter"
)

// LLMConfig configures the LLM classifier.
type LLMConfig struct {
	// BaseURL of an OpenAI-compatible API, with or without the trailing /v1 (OpenAI, Ollama, vLLM, ...).
	BaseURL string
	Model   string
	APIKey  string
	// Timeout bounds one HTTP request (default 30 s).
	Timeout time.Duration
	// MaxAttempts is how many times one tool is tried, over bad answers and transient HTTP failures (default 3).
	MaxAttempts int
	// Backoff is the first wait between attempts, doubled each time (default 500 ms).
	Backoff    time.Duration
	HTTPClient *http.Client
}

// LLM classifies with a chat completion that must answer JSON of a given schema; answers naming unknown skills or
// breaking the schema are retried, then reported as an error (the tool stays UNCLASSIFIED and is retried later).
type LLM struct {
	cfg    LLMConfig
	tax    *Taxonomy
	url    string
	prompt string
	schema json.RawMessage
}

// NewLLM builds an LLM classifier for a taxonomy.
func NewLLM(cfg LLMConfig, tax *Taxonomy) (*LLM, error) {
	if cfg.BaseURL == "" || cfg.Model == "" {
		return nil, errors.New("llm classifier: base URL and model are required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 3
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 500 * time.Millisecond
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	base := strings.TrimRight(cfg.BaseURL, "/")
	if !strings.HasSuffix(base, "/v1") {
		base += "/v1"
	}
	ids := make([]string, len(tax.Skills))
	var b strings.Builder
	b.WriteString("You classify tools of MCP servers into skills. Give each tool 1 to 3 skills from the list, ")
	b.WriteString("each with a confidence between 0 and 1 that the tool belongs to it. Use only these skill ids.\n\nSkills:\n")
	for i, s := range tax.Skills {
		ids[i] = s.ID
		fmt.Fprintf(&b, "- %s: %s. %s\n", s.ID, s.Name, s.Description)
	}
	enum, _ := json.Marshal(ids)
	schema := json.RawMessage(`{"type":"object","additionalProperties":false,"required":["skills"],"properties":{"skills":` +
		`{"type":"array","minItems":1,"maxItems":3,"items":{"type":"object","additionalProperties":false,` +
		`"required":["id","confidence"],"properties":{"id":{"type":"string","enum":` + string(enum) + `},` +
		`"confidence":{"type":"number","minimum":0,"maximum":1}}}}}}`)
	return &LLM{cfg: cfg, tax: tax, url: base + "/chat/completions", prompt: b.String(), schema: schema}, nil
}

// Name implements Classifier.
func (l *LLM) Name() string { return "llm" }

type chatRequest struct {
	Model          string          `json:"model"`
	Messages       []chatMessage   `json:"messages"`
	Temperature    float64         `json:"temperature"`
	ResponseFormat json.RawMessage `json:"response_format"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatResponse struct {
	Choices []struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
	} `json:"choices"`
}

// maxRetryAfter is the longest Retry-After the classifier waits for; a longer one (or one under a second) is
// ignored and the attempt backoff applies.
const maxRetryAfter = 60 * time.Second

// errTransient marks failures worth another attempt at once (429, 5xx, network).
type errTransient struct {
	err        error
	retryAfter time.Duration
}

func (e *errTransient) Error() string { return e.err.Error() }
func (e *errTransient) Unwrap() error { return e.err }

// Classify implements Classifier.
func (l *LLM) Classify(ctx context.Context, tool Tool) (Result, error) {
	user := "Tool name: " + tool.Name + "\nDescription: " + tool.Description
	if len(tool.InputSchema) > 0 && len(tool.InputSchema) < 4000 {
		user += "\nInput schema: " + string(tool.InputSchema)
	}
	body, _ := json.Marshal(chatRequest{
		Model:       l.cfg.Model,
		Messages:    []chatMessage{{Role: "system", Content: l.prompt}, {Role: "user", Content: user}},
		Temperature: 0,
		ResponseFormat: json.RawMessage(`{"type":"json_schema","json_schema":{"name":"skill_classification","strict":true,"schema":` +
			string(l.schema) + `}}`),
	})
	// The wait doubles from cfg.Backoff; a server's longer Retry-After replaces it, and the doubling goes on from
	// there.
	var wait time.Duration
	r, err := retry.Do(ctx, retry.Backoff{Initial: l.cfg.Backoff, Multiplier: 2}.Schedule(), retry.Options{
		MaxTries: l.cfg.MaxAttempts,
		Wait: func(scheduled time.Duration, err error) time.Duration {
			wait = max(scheduled, 2*wait)
			var te *errTransient
			if errors.As(err, &te) && te.retryAfter > wait {
				wait = te.retryAfter
			}
			return wait
		},
	}, func() (Result, error) {
		r, err := l.once(ctx, body)
		if err != nil && ctx.Err() != nil {
			return Result{}, backoff.Permanent(ctx.Err())
		}
		return r, err
	})
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		return Result{}, fmt.Errorf("llm classifier: %d attempts failed: %w", l.cfg.MaxAttempts, err)
	}
	return r, nil
}

func (l *LLM) once(ctx context.Context, body []byte) (Result, error) {
	rctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, l.url, bytes.NewReader(body))
	if err != nil {
		return Result{}, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if l.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+l.cfg.APIKey)
	}
	resp, err := l.cfg.HTTPClient.Do(req)
	if err != nil {
		return Result{}, &errTransient{err: fmt.Errorf("chat completions request: %w", err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Result{}, &errTransient{err: fmt.Errorf("read answer: %w", err)}
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
		te := &errTransient{err: fmt.Errorf("chat completions answered %d", resp.StatusCode)}
		// A server's wait is honoured from 1 s to maxRetryAfter; outside that the backoff decides.
		if d, ok := retryafter.Parse(resp.Header.Get("Retry-After"), time.Now(), maxRetryAfter); ok && d >= time.Second {
			te.retryAfter = d
		}
		return Result{}, te
	}
	if resp.StatusCode != http.StatusOK {
		return Result{}, fmt.Errorf("chat completions answered %d", resp.StatusCode)
	}
	var cr chatResponse
	if err := json.Unmarshal(raw, &cr); err != nil || len(cr.Choices) == 0 {
		return Result{}, fmt.Errorf("chat completions answer is not a completion: %w", ErrInvalidAnswer)
	}
	var answer struct {
		Skills []struct {
			ID         string   `json:"id"`
			Confidence *float64 `json:"confidence"`
		} `json:"skills"`
	}
	dec := json.NewDecoder(strings.NewReader(cr.Choices[0].Message.Content))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&answer); err != nil {
		return Result{}, fmt.Errorf("answer is not the schema's JSON (%v): %w", err, ErrInvalidAnswer)
	}
	if len(answer.Skills) == 0 || len(answer.Skills) > MaxSkills {
		return Result{}, fmt.Errorf("answer has %d skills, want 1 to %d: %w", len(answer.Skills), MaxSkills, ErrInvalidAnswer)
	}
	as := make([]Assignment, len(answer.Skills))
	for i, s := range answer.Skills {
		if s.Confidence == nil {
			return Result{}, fmt.Errorf("skill %s without confidence: %w", s.ID, ErrInvalidAnswer)
		}
		as[i] = Assignment{SkillID: s.ID, Confidence: *s.Confidence}
	}
	return l.tax.apply(as)
}
