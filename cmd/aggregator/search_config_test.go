package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestSearchConfigReportsEveryError: every bad sub-configuration (embedding, classifier, Qdrant) is reported at
// load, all at once, not later when serve builds the clients.
func TestSearchConfigReportsEveryError(t *testing.T) {
	env := map[string]string{
		"MCP_AGGREGATOR_EMBEDDING_URL":        "ftp://models.example",
		"MCP_AGGREGATOR_EMBEDDING_DIMENSIONS": "-3",
		"MCP_AGGREGATOR_CLASSIFIER_URL":       "http://user:pw@llm.example",
		"QDRANT_URL":                          "qdrant.example", // no port
		"QDRANT_COLLECTION":                   "bad name",
	}
	_, err := loadConfig(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err == nil {
		t.Fatal("bad search configuration accepted")
	}
	for _, want := range []string{"MCP_AGGREGATOR_EMBEDDING_URL=", "MCP_AGGREGATOR_EMBEDDING_MODEL is required",
		"MCP_AGGREGATOR_EMBEDDING_DIMENSIONS=", "MCP_AGGREGATOR_CLASSIFIER_URL=", "MCP_AGGREGATOR_CLASSIFIER_MODEL is required",
		"QDRANT_URL=", "QDRANT_COLLECTION="} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "pw") {
		t.Errorf("error shows the URL password: %v", err)
	}

	_, err = loadConfig(func(k string) (string, bool) {
		v, ok := map[string]string{"MCP_AGGREGATOR_EMBEDDING_MODEL": "m", "MCP_AGGREGATOR_CLASSIFIER_MODEL": "c"}[k]
		return v, ok
	})
	if err == nil || !strings.Contains(err.Error(), "MCP_AGGREGATOR_EMBEDDING_MODEL is set but") ||
		!strings.Contains(err.Error(), "MCP_AGGREGATOR_CLASSIFIER_MODEL is set but") {
		t.Fatalf("a model without its URL was not reported: %v", err)
	}
}

// TestEmbeddingDimensionsUnsetUsesTheModelsOwn: URL and model without dimensions pass configuration AND start
// (they used to stop serve with "dimensions must be positive"); the size is the model's own, learned from its
// first embedding, and "dimensions" is never sent.
func TestEmbeddingDimensionsUnsetUsesTheModelsOwn(t *testing.T) {
	const size = 7
	var mu sync.Mutex
	var sawDimensions bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req map[string]any
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		if _, ok := req["dimensions"]; ok {
			sawDimensions = true
		}
		mu.Unlock()
		inputs, _ := req["input"].([]any)
		type item struct {
			Index     int       `json:"index"`
			Embedding []float64 `json:"embedding"`
		}
		out := struct {
			Data []item `json:"data"`
		}{}
		for i := range inputs {
			v := make([]float64, size)
			for j := range v {
				v[j] = float64((i+j)%size + 1)
			}
			out.Data = append(out.Data, item{Index: i, Embedding: v})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	}))
	defer srv.Close()

	env := map[string]string{"MCP_AGGREGATOR_EMBEDDING_URL": srv.URL, "MCP_AGGREGATOR_EMBEDDING_MODEL": "fixed-size-model"}
	cfg, err := loadConfig(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	sd, _, err := buildSearch(context.Background(), cfg.Search, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("buildSearch with dimensions unset: %v", err)
	}
	if got := sd.Embedder.Dimension(); got != size {
		t.Fatalf("dimension = %d, want the model's own %d", got, size)
	}
	vecs, err := sd.Embedder.Embed(context.Background(), []string{"a", "b"})
	if err != nil || len(vecs) != 2 || len(vecs[0]) != size {
		t.Fatalf("embed: %v %v", vecs, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if sawDimensions {
		t.Fatal(`"dimensions" was sent although unset`)
	}
}
