package embed

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/mcpgw/aggregator/search/internal/analysis"
)

// HashedModel is the Model of the built-in embedder. The version changes whenever its features change, so that
// stored vectors of an older version are rebuilt rather than compared with new ones.
const HashedModel = "builtin-hashed-v1"

// DefaultHashedDimension is the size of the built-in embedder's vectors when none is given. Feature hashing loses
// quality to collisions below it (measured on the LiveMCPBench fixture: nDCG@10 vector-only 0.27 at 512, 0.31 at
// 1024, 0.32 at 2048), and an exact scan over 10,000 tools stays within a few milliseconds at it.
const DefaultHashedDimension = 1024

// Feature weights of the built-in embedder, chosen on the LiveMCPBench fixture (see BENCHMARKS.md) among a few
// round values; they are properties of tool text in general (names say most, parameters least), not of its queries.
const (
	hashWordWeight  = 1.0 // a stemmed word
	hashCharWeight  = 3.0 // all character n-grams of one word together
	hashMinGram     = 3
	hashMaxGram     = 4
	hashNameWeight  = 2.0 // ToolText "name:" line
	hashDescWeight  = 1.0 // ToolText "description:" line, and any unlabelled text
	hashParamWeight = 0.5 // ToolText "parameters:" line
)

// Hashed is the built-in embedder: deterministic, no model, no network, safe for concurrent use. It hashes
// features of the text into a fixed number of signed buckets (the "hashing trick"): the stemmed words that lexical
// search uses, and character 3- and 4-grams of each word, which let spelling variants, inflections and unsplit
// compounds ("geocoding", "geocode"; "wordcloud", "word cloud") meet. Feature weights grow sublinearly with
// repetition, lines of ToolText are weighted by field, and the vector is L2-normalised. It knows no synonyms: a
// model served through NewOpenAI does better where the words differ.
type Hashed struct {
	dim int
}

// NewHashed returns the built-in embedder with vectors of dim components (DefaultHashedDimension if dim <= 0).
func NewHashed(dim int) *Hashed {
	if dim <= 0 {
		dim = DefaultHashedDimension
	}
	return &Hashed{dim: dim}
}

// Model implements Embedder.
func (h *Hashed) Model() string { return HashedModel }

// Dimension implements Embedder.
func (h *Hashed) Dimension() int { return h.dim }

// Embed implements Embedder. It fails only when ctx is done.
func (h *Hashed) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		if i%64 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("embed: %w", err)
			}
		}
		out[i] = h.Vector(t)
	}
	return out, nil
}

// Vector embeds one text. A text without any word gets a fixed unit vector rather than a zero vector, so every
// text has a valid embedding.
func (h *Hashed) Vector(text string) []float32 {
	feats := make([]feature, 0, 2*len(text)+1)
	for line := range strings.SplitSeq(text, "\n") {
		weight := hashDescWeight
		switch {
		case strings.HasPrefix(line, labelName):
			weight, line = hashNameWeight, line[len(labelName):]
		case strings.HasPrefix(line, labelDescription):
			line = line[len(labelDescription):]
		case strings.HasPrefix(line, labelParameters):
			weight, line = hashParamWeight, line[len(labelParameters):]
		}
		feats = addFeatures(feats, line, weight)
	}
	if len(feats) == 0 {
		feats = append(feats, feature{hashFeature('e', ""), 1})
	}
	// Sum the weights of each distinct feature (sorted, equal hashes are adjacent), then add them sublinearly.
	slices.SortFunc(feats, func(a, b feature) int { return cmp.Or(cmp.Compare(a.hash, b.hash), cmp.Compare(a.weight, b.weight)) })
	vec := make([]float32, h.dim)
	for i := 0; i < len(feats); {
		f, w := feats[i].hash, 0.0
		for ; i < len(feats) && feats[i].hash == f; i++ {
			w += feats[i].weight
		}
		v := math.Log1p(w)
		if f>>63 == 1 {
			v = -v
		}
		vec[(f&(1<<63-1))%uint64(h.dim)] += float32(v)
	}
	Normalize(vec)
	if Validate(vec, h.dim) != nil { // every bucket cancelled out exactly: not seen in practice, but never zero
		clear(vec)
		vec[0] = 1
	}
	return vec
}

// feature is one occurrence of a hashed feature with its weight.
type feature struct {
	hash   uint64
	weight float64
}

// addFeatures appends the features of one field of text with the field's weight.
func addFeatures(feats []feature, text string, weight float64) []feature {
	for _, w := range analysis.Words(text) {
		term, ok := analysis.Term(w)
		if !ok {
			continue
		}
		feats = append(feats, feature{hashFeature('w', term), weight * hashWordWeight})
		if !w.CJK && !w.Compound {
			feats = addGrams(feats, w.Text, weight*hashCharWeight)
		}
	}
	return feats
}

// addGrams appends the character n-grams of word (with boundary marks), sharing weight between them so that a
// long word does not outweigh a short one.
func addGrams(feats []feature, word string, weight float64) []feature {
	r := []rune("<" + word + ">")
	n := 0
	for g := hashMinGram; g <= hashMaxGram; g++ {
		n += max(0, len(r)-g+1)
	}
	if n == 0 {
		return feats
	}
	each := weight / float64(n)
	for g := hashMinGram; g <= hashMaxGram; g++ {
		for i := 0; i+g <= len(r); i++ {
			feats = append(feats, feature{hashRunes('c', r[i:i+g]), each})
		}
	}
	return feats
}

// hashRunes is hashFeature of string(r), without building the string.
func hashRunes(kind byte, r []rune) uint64 {
	h := uint64(fnvOffset)
	h = (h ^ uint64(kind)) * fnvPrime
	var buf [utf8.UTFMax]byte
	for _, c := range r {
		n := utf8.EncodeRune(buf[:], c)
		for _, b := range buf[:n] {
			h = (h ^ uint64(b)) * fnvPrime
		}
	}
	return finalize(h)
}

// FNV-1a constants.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// hashFeature hashes a feature of a kind ('w' word, 'c' character n-gram) with FNV-1a and a murmur3 finaliser: a
// fixed, well-spread hash, so vectors are the same on every run and machine. The top bit gives the sign.
func hashFeature(kind byte, s string) uint64 {
	h := uint64(fnvOffset)
	h = (h ^ uint64(kind)) * fnvPrime
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime
	}
	return finalize(h)
}

// finalize is murmur3's 64-bit finaliser: FNV's high bits, which give the sign, are poorly mixed on their own.
func finalize(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
