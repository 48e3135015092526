package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/search/classify"
	"github.com/mcpgw/aggregator/search/embed"
	"github.com/mcpgw/aggregator/search/vector"
)

// searchConfig is the tool-search part of the configuration: the embedder, the vector index, the skills and the
// classifier; every part has an embedded default.
type searchConfig struct {
	SearchFirst bool
	// TokenBudget bounds /mcp's tools/list (mcpserver.Options.TokenBudget: negative when disabled).
	TokenBudget int
	SkillsFile  string
	Embedding   embed.Config // BaseURL empty: the built-in embedder
	Classifier  classify.LLMConfig
	Qdrant      vector.Config // URL empty: the in-process index
}

func loadSearchConfig(get func(string) string, errs []string) (searchConfig, []string) {
	var c searchConfig
	c.SearchFirst, errs = boolSetting(get, "MCP_AGGREGATOR_SEARCH_FIRST", errs)
	if n, err := strconv.Atoi(get("MCP_AGGREGATOR_MCP_TOKEN_BUDGET")); err != nil || n < 0 || n > 10_000_000 {
		errs = append(errs, fmt.Sprintf("MCP_AGGREGATOR_MCP_TOKEN_BUDGET=%q: want tokens, 0..10000000 (0 disables)", get("MCP_AGGREGATOR_MCP_TOKEN_BUDGET")))
	} else if c.TokenBudget = n; n == 0 {
		c.TokenBudget = -1
	}
	c.SkillsFile = get("MCP_AGGREGATOR_SKILLS_FILE")
	if url := get("MCP_AGGREGATOR_EMBEDDING_URL"); url != "" {
		c.Embedding = embed.Config{BaseURL: url, Model: get("MCP_AGGREGATOR_EMBEDDING_MODEL"), APIKey: get("MCP_AGGREGATOR_EMBEDDING_API_KEY")}
		if err := checkHTTPURL(url); err != nil {
			errs = append(errs, fmt.Sprintf("MCP_AGGREGATOR_EMBEDDING_URL=%q: %v", redactURL(url), err))
		}
		if c.Embedding.Model == "" {
			errs = append(errs, "MCP_AGGREGATOR_EMBEDDING_MODEL is required with MCP_AGGREGATOR_EMBEDDING_URL")
		}
		if d := get("MCP_AGGREGATOR_EMBEDDING_DIMENSIONS"); d != "" {
			n, err := strconv.Atoi(d)
			if err != nil || n <= 0 || n > vector.MaxDimension {
				errs = append(errs, fmt.Sprintf("MCP_AGGREGATOR_EMBEDDING_DIMENSIONS=%q: want 1..%d", d, vector.MaxDimension))
			}
			c.Embedding.Dimensions = n
		}
	} else {
		for _, name := range []string{"MCP_AGGREGATOR_EMBEDDING_MODEL", "MCP_AGGREGATOR_EMBEDDING_DIMENSIONS"} {
			if get(name) != "" {
				errs = append(errs, name+" is set but MCP_AGGREGATOR_EMBEDDING_URL is not (the built-in embedder takes no model)")
			}
		}
	}
	if url := get("MCP_AGGREGATOR_CLASSIFIER_URL"); url != "" {
		c.Classifier = classify.LLMConfig{BaseURL: url, Model: get("MCP_AGGREGATOR_CLASSIFIER_MODEL"), APIKey: get("MCP_AGGREGATOR_CLASSIFIER_API_KEY")}
		if err := checkHTTPURL(url); err != nil {
			errs = append(errs, fmt.Sprintf("MCP_AGGREGATOR_CLASSIFIER_URL=%q: %v", redactURL(url), err))
		}
		if c.Classifier.Model == "" {
			errs = append(errs, "MCP_AGGREGATOR_CLASSIFIER_MODEL is required with MCP_AGGREGATOR_CLASSIFIER_URL")
		}
	} else if get("MCP_AGGREGATOR_CLASSIFIER_MODEL") != "" {
		errs = append(errs, "MCP_AGGREGATOR_CLASSIFIER_MODEL is set but MCP_AGGREGATOR_CLASSIFIER_URL is not (the built-in classifier takes no model)")
	}
	if url := get("QDRANT_URL"); url != "" {
		c.Qdrant = vector.Config{URL: url, APIKey: get("QDRANT_API_KEY"), Collection: get("QDRANT_COLLECTION")}
		if err := checkQdrantURL(url); err != nil {
			errs = append(errs, fmt.Sprintf("QDRANT_URL=%q: %v", redactURL(url), err))
		}
		if !collectionRE.MatchString(c.Qdrant.Collection) {
			errs = append(errs, fmt.Sprintf("QDRANT_COLLECTION=%q: want 1-255 characters from [a-zA-Z0-9_-]", c.Qdrant.Collection))
		}
	}
	return c, errs
}

// redactURL shows a configured URL in an error without the password of its userinfo.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	if i := strings.LastIndex(raw, "@"); i >= 0 {
		return "***" + raw[i:]
	}
	return raw
}

// collectionRE is the Qdrant collection names we accept.
var collectionRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)

// checkHTTPURL accepts an http(s) URL with a host, no userinfo (credentials go in the API key variables).
func checkHTTPURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return errors.New("not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("want an http:// or https:// URL")
	case u.Host == "":
		return errors.New("the URL has no host")
	case u.User != nil:
		return errors.New("no credentials in the URL: use the API key variable")
	}
	return nil
}

// checkQdrantURL accepts host:port or (http|https|grpc|grpcs)://host[:port] without path, as vector.NewQdrant does.
func checkQdrantURL(raw string) error {
	if !strings.Contains(raw, "://") {
		if _, port, err := net.SplitHostPort(raw); err != nil || port == "" {
			return errors.New("want host:port (e.g. localhost:6334) or grpc://host:port")
		}
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL")
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https", "grpc", "grpcs":
	default:
		return fmt.Errorf("unsupported scheme %q (want grpc, grpcs, http or https)", u.Scheme)
	}
	if u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return errors.New("only scheme, host and port are allowed")
	}
	return nil
}

// embeddingProbeTimeout bounds the one request that learns the model's vector size at start.
const embeddingProbeTimeout = 30 * time.Second

// learnEmbeddingDimensions asks the embeddings API for one vector without the "dimensions" field and returns its
// size: the model's own, which MCP_AGGREGATOR_EMBEDDING_DIMENSIONS left unset means.
func learnEmbeddingDimensions(ctx context.Context, c embed.Config) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, embeddingProbeTimeout)
	defer cancel()
	endpoint := strings.TrimRight(c.BaseURL, "/")
	switch {
	case strings.HasSuffix(endpoint, "/embeddings"):
	case strings.HasSuffix(endpoint, "/v1"):
		endpoint += "/embeddings"
	default:
		endpoint += "/v1/embeddings"
	}
	body, _ := json.Marshal(map[string]any{"model": c.Model, "input": []string{"dimension probe"}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("embedding size probe: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("embedding size probe: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return 0, fmt.Errorf("embedding size probe: the API answered %s", resp.Status)
	}
	var out struct {
		Data []struct {
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&out); err != nil {
		return 0, fmt.Errorf("embedding size probe: decode the answer: %w", err)
	}
	if len(out.Data) == 0 || len(out.Data[0].Embedding) == 0 {
		return 0, errors.New("embedding size probe: the API answered no vector")
	}
	if n := len(out.Data[0].Embedding); n > vector.MaxDimension {
		return 0, fmt.Errorf("embedding size probe: the model's vectors have %d dimensions, more than %d", n, vector.MaxDimension)
	}
	return len(out.Data[0].Embedding), nil
}

// buildSearch makes the search dependencies and the skill classifier from the configuration.
func buildSearch(ctx context.Context, c searchConfig, logger *slog.Logger) (*actors.SearchDeps, classify.Classifier, error) {
	tax := classify.DefaultTaxonomy()
	if c.SkillsFile != "" {
		t, err := classify.LoadTaxonomy(c.SkillsFile)
		if err != nil {
			return nil, nil, err
		}
		tax = t
	}
	var emb embed.Embedder = embed.NewHashed(0)
	if c.Embedding.BaseURL != "" {
		if c.Embedding.Dimensions == 0 {
			// Unset: the model's own size. Ask once and never send "dimensions" (fixed-size models reject it).
			n, err := learnEmbeddingDimensions(ctx, c.Embedding)
			if err != nil {
				return nil, nil, fmt.Errorf("%w (set MCP_AGGREGATOR_EMBEDDING_DIMENSIONS to start without asking)", err)
			}
			c.Embedding.Dimensions, c.Embedding.OmitDimensions = n, true
			logger.Info("embedding size learned from the model", "model", c.Embedding.Model, "dimensions", n)
		}
		e, err := embed.NewOpenAI(c.Embedding)
		if err != nil {
			return nil, nil, fmt.Errorf("embedding client: %w", err)
		}
		emb = e
		logger.Info("embeddings from an OpenAI-compatible API", "model", c.Embedding.Model)
	}
	var idx vector.Index
	if c.Qdrant.URL != "" {
		q, err := vector.NewQdrant(ctx, c.Qdrant)
		if err != nil {
			return nil, nil, fmt.Errorf("qdrant: %w", err)
		}
		idx = q
		logger.Info("vectors in Qdrant", "collection", c.Qdrant.Collection)
	}
	sd := &actors.SearchDeps{Embedder: emb, Index: idx, Taxonomy: tax}
	if c.Classifier.BaseURL != "" {
		llm, err := classify.NewLLM(c.Classifier, tax)
		if err != nil {
			return nil, nil, err
		}
		logger.Info("skills classified by an LLM", "model", c.Classifier.Model)
		return sd, llm, nil
	}
	b, err := classify.NewBuiltin(ctx, emb, tax, func(t classify.Tool) string { return embed.ToolText(t.Name, t.Description, t.InputSchema) })
	if err != nil {
		return nil, nil, err
	}
	sd.Skills = b.SkillSpace // the indexer keeps the classifier's skill vectors current too
	return sd, b, nil
}
