package embed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/mcpgw/aggregator/internal/retry"
	"github.com/mcpgw/aggregator/internal/retryafter"
)

// Defaults of Config.
const (
	DefaultBatchSize  = 32 // the smallest common server limit (TEI's default max client batch)
	DefaultMaxRetries = 4
	DefaultTimeout    = 30 * time.Second
)

// Retry pacing: exponential backoff from retryBase with jitter, capped (retryBackoff); a server's Retry-After is honoured up
// to maxRetryAfter.
const (
	retryBase     = 500 * time.Millisecond
	retryCap      = 20 * time.Second
	maxRetryAfter = 60 * time.Second
	maxBodyBytes  = 64 << 20
	maxErrorBody  = 512
)

// Config configures an OpenAI-compatible embeddings client (OpenAI, Azure-style proxies, Ollama, TEI, vLLM...).
type Config struct {
	// BaseURL of the service, with or without the /v1 suffix: https://api.openai.com, http://localhost:11434/v1.
	BaseURL string
	// Model is sent with every request and is the client's Model identity.
	Model string
	// Dimensions is the size of the vectors: every returned vector must have it. It is sent as "dimensions"
	// (models that can shorten their vectors, e.g. text-embedding-3-*) unless OmitDimensions is set.
	Dimensions int
	// OmitDimensions leaves "dimensions" out of requests, for models with a fixed size that reject the field.
	OmitDimensions bool
	// APIKey, if set, is sent as a bearer token. It never appears in errors or logs.
	APIKey string
	// BatchSize is the most texts per request (DefaultBatchSize if 0).
	BatchSize int
	// MaxRetries is how many times a request is retried after a 429, a 5xx, a timeout or a connection error
	// (DefaultMaxRetries if 0, none if negative).
	MaxRetries int
	// Timeout bounds one attempt (DefaultTimeout if 0).
	Timeout time.Duration
	// HTTPClient is used for requests (a new http.Client if nil).
	HTTPClient *http.Client
}

// OpenAI is an Embedder backed by an OpenAI-compatible POST /v1/embeddings endpoint. It batches texts, retries
// transient failures with backoff (honouring Retry-After), validates every returned vector (count, index, size,
// finite, non-zero) and L2-normalises it. It is safe for concurrent use.
type OpenAI struct {
	cfg      Config
	endpoint string
	client   *http.Client
	// sleep waits between attempts; tests replace it to record delays without waiting.
	sleep func(ctx context.Context, d time.Duration) error
}

// NewOpenAI checks cfg and returns a client. It does not contact the service.
func NewOpenAI(cfg Config) (*OpenAI, error) {
	if cfg.Model == "" {
		return nil, errors.New("embed: openai: model is required")
	}
	if cfg.Dimensions <= 0 {
		return nil, fmt.Errorf("embed: openai: dimensions must be positive, got %d", cfg.Dimensions)
	}
	endpoint, err := embeddingsURL(cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = DefaultMaxRetries
	} else if cfg.MaxRetries < 0 {
		cfg.MaxRetries = 0
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{}
	}
	return &OpenAI{cfg: cfg, endpoint: endpoint, client: client, sleep: sleepCtx}, nil
}

// embeddingsURL turns a base URL (with or without /v1, or already ending in /embeddings) into the endpoint.
func embeddingsURL(base string) (string, error) {
	base = strings.TrimRight(strings.TrimSpace(base), "/")
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return "", fmt.Errorf("embed: openai: base URL %q must start with http:// or https://", base)
	}
	switch {
	case strings.HasSuffix(base, "/embeddings"):
		return base, nil
	case strings.HasSuffix(base, "/v1"):
		return base + "/embeddings", nil
	}
	return base + "/v1/embeddings", nil
}

// Model implements Embedder.
func (o *OpenAI) Model() string { return o.cfg.Model }

// Dimension implements Embedder.
func (o *OpenAI) Dimension() int { return o.cfg.Dimensions }

// Embed implements Embedder: one request per BatchSize texts, in order.
func (o *OpenAI) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for start := 0; start < len(texts); start += o.cfg.BatchSize {
		end := min(start+o.cfg.BatchSize, len(texts))
		vecs, err := o.embedBatch(ctx, texts[start:end])
		if err != nil {
			return nil, fmt.Errorf("embed: %s: texts %d..%d: %w", o.cfg.Model, start, end-1, err)
		}
		out = append(out, vecs...)
	}
	return out, nil
}

// Wire format of the OpenAI embeddings API.
type (
	embeddingsRequest struct {
		Model      string   `json:"model"`
		Input      []string `json:"input"`
		Dimensions int      `json:"dimensions,omitempty"`
	}
	embeddingsResponse struct {
		Object string `json:"object"`
		Data   []struct {
			Object    string    `json:"object"`
			Index     int       `json:"index"`
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
		Model string `json:"model"`
	}
)

// embedBatch sends one request, retrying transient failures.
func (o *OpenAI) embedBatch(ctx context.Context, texts []string) ([][]float32, error) {
	req := embeddingsRequest{Model: o.cfg.Model, Input: texts}
	if !o.cfg.OmitDimensions {
		req.Dimensions = o.cfg.Dimensions
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	var serverWait time.Duration // the last failure's Retry-After, 0 for none
	return retry.Do(ctx, retryBackoff().Schedule(), retry.Options{
		MaxTries: o.cfg.MaxRetries + 1,
		Sleep:    o.sleep,
		Wait: func(scheduled time.Duration, _ error) time.Duration {
			if serverWait > 0 {
				return min(serverWait, maxRetryAfter)
			}
			return scheduled
		},
	}, func() ([][]float32, error) {
		vecs, ra, err := o.attempt(ctx, body, len(texts))
		serverWait = ra
		var re *retryableError
		if err != nil && !errors.As(err, &re) {
			return nil, backoff.Permanent(err)
		}
		return vecs, err
	})
}

// retryableError marks a failure worth another attempt.
type retryableError struct{ err error }

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

// attempt makes one HTTP request and decodes and validates its answer.
func (o *OpenAI) attempt(ctx context.Context, body []byte, n int) ([][]float32, time.Duration, error) {
	actx, cancel := context.WithTimeout(ctx, o.cfg.Timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(actx, http.MethodPost, o.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, 0, fmt.Errorf("build request: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	if o.cfg.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+o.cfg.APIKey)
	}
	resp, err := o.client.Do(hreq)
	if err != nil {
		err = o.redactErr(err)
		if ctx.Err() == nil && isTransient(err) {
			return nil, 0, &retryableError{fmt.Errorf("post %s: %w", o.endpoint, err)}
		}
		return nil, 0, fmt.Errorf("post %s: %w", o.endpoint, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes))
	if err != nil {
		err = fmt.Errorf("read answer: %w", o.redactErr(err))
		if ctx.Err() == nil {
			return nil, 0, &retryableError{err}
		}
		return nil, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("status %d: %s", resp.StatusCode, o.redact(snippet(data)))
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
			return nil, retryAfter(resp.Header.Get("Retry-After")), &retryableError{err}
		}
		return nil, 0, err
	}
	vecs, err := o.decode(data, n)
	if err != nil {
		return nil, 0, err
	}
	return vecs, 0, nil
}

// decode parses an answer, puts the vectors in input order and validates and normalises them.
func (o *OpenAI) decode(data []byte, n int) ([][]float32, error) {
	var resp embeddingsResponse
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, fmt.Errorf("decode answer: %w", err)
	}
	if len(resp.Data) != n {
		return nil, fmt.Errorf("%w: %d embeddings for %d inputs", ErrInvalidVector, len(resp.Data), n)
	}
	sort.SliceStable(resp.Data, func(i, j int) bool { return resp.Data[i].Index < resp.Data[j].Index })
	out := make([][]float32, n)
	for i, d := range resp.Data {
		if d.Index != i {
			return nil, fmt.Errorf("%w: embedding indexes are not 0..%d (index %d)", ErrInvalidVector, n-1, d.Index)
		}
		v := make([]float32, len(d.Embedding))
		for k, x := range d.Embedding {
			v[k] = float32(x)
		}
		if err := Validate(v, o.cfg.Dimensions); err != nil {
			return nil, fmt.Errorf("embedding %d: %w", i, err)
		}
		out[i] = Normalize(v)
		if err := Validate(out[i], o.cfg.Dimensions); err != nil { // underflow of tiny components
			return nil, fmt.Errorf("embedding %d: %w", i, err)
		}
	}
	return out, nil
}

// isTransient reports whether a transport error may go away: a timeout or a refused, reset or dropped connection.
func isTransient(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe)
}

// retryBackoff is the wait before each retry: exponential from retryBase, capped at retryCap, with the upper half
// jittered (the n-th wait is in [d/2, d) for d = retryBase*2^(n-1) up to retryCap).
func retryBackoff() retry.Backoff {
	return retry.Backoff{Initial: retryBase * 3 / 4, Max: retryCap * 3 / 4, Multiplier: 2, Jitter: 1.0 / 3}
}

// retryAfter parses a Retry-After header (seconds or an HTTP date); 0 when absent or unparsable. It is not capped
// here: Embed cuts a longer wait to maxRetryAfter.
func retryAfter(h string) time.Duration {
	d, _ := retryafter.Parse(h, time.Now(), 0)
	return d
}

// snippet is the start of an error body, on one line.
func snippet(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > maxErrorBody {
		s = strings.ToValidUTF8(s[:maxErrorBody], "") + "..."
	}
	return s
}

// redact removes the API key from text that came from outside (an error body that echoes the request).
func (o *OpenAI) redact(s string) string {
	if o.cfg.APIKey == "" {
		return s
	}
	return strings.ReplaceAll(s, o.cfg.APIKey, "[redacted]")
}

// redactErr returns err, or an error with the same message minus the key if the message contains it.
func (o *OpenAI) redactErr(err error) error {
	if o.cfg.APIKey == "" || !strings.Contains(err.Error(), o.cfg.APIKey) {
		return err
	}
	return redactedError{msg: o.redact(err.Error()), err: err}
}

// redactedError shows a redacted message but keeps the chain for errors.Is/As (timeouts, cancellation).
type redactedError struct {
	msg string
	err error
}

func (e redactedError) Error() string { return e.msg }
func (e redactedError) Unwrap() error { return e.err }

// sleepCtx waits for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
