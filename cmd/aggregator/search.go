package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/search/classify"
	"github.com/mcpgw/aggregator/search/embed"
	"github.com/mcpgw/aggregator/search/vector"
)

// searchConfig is the tool-search part of the configuration: the embedder, the vector index, the skills and the
// classifier; every part has an embedded default.
type searchConfig struct {
	SearchFirst bool
	SkillsFile  string
	Embedding   embed.Config // BaseURL empty: the built-in embedder
	Classifier  classify.LLMConfig
	Qdrant      vector.Config // URL empty: the in-process index
}

func loadSearchConfig(get func(string) string, errs []string) (searchConfig, []string) {
	var c searchConfig
	switch strings.ToLower(get("MCP_AGGREGATOR_SEARCH_FIRST")) {
	case "true", "1", "yes", "on":
		c.SearchFirst = true
	case "false", "0", "no", "off":
	default:
		errs = append(errs, fmt.Sprintf("MCP_AGGREGATOR_SEARCH_FIRST=%q: want true or false", get("MCP_AGGREGATOR_SEARCH_FIRST")))
	}
	c.SkillsFile = get("MCP_AGGREGATOR_SKILLS_FILE")
	if url := get("MCP_AGGREGATOR_EMBEDDING_URL"); url != "" {
		c.Embedding = embed.Config{BaseURL: url, Model: get("MCP_AGGREGATOR_EMBEDDING_MODEL"), APIKey: get("MCP_AGGREGATOR_EMBEDDING_API_KEY")}
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
	}
	if url := get("MCP_AGGREGATOR_CLASSIFIER_URL"); url != "" {
		c.Classifier = classify.LLMConfig{BaseURL: url, Model: get("MCP_AGGREGATOR_CLASSIFIER_MODEL"), APIKey: get("MCP_AGGREGATOR_CLASSIFIER_API_KEY")}
		if c.Classifier.Model == "" {
			errs = append(errs, "MCP_AGGREGATOR_CLASSIFIER_MODEL is required with MCP_AGGREGATOR_CLASSIFIER_URL")
		}
	}
	if url := get("QDRANT_URL"); url != "" {
		c.Qdrant = vector.Config{URL: url, APIKey: get("QDRANT_API_KEY"), Collection: get("QDRANT_COLLECTION")}
	}
	return c, errs
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
