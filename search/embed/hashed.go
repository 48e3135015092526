package embed

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/mcpgw/aggregator/search/internal/analysis"
)

// HashedModel is the Model of the built-in embedder. The version changes whenever its features change, so that
// stored vectors of an older version are rebuilt rather than compared with new ones.
const HashedModel = "builtin-hashed-glove-v2"

// DefaultHashedDimension is the size of the built-in embedder's vectors when none is given: 412 hashed components
// and the 100 of the static word vectors. With the word vectors the engine ranks as well at 512 as at 1024 (hashed
// collisions cost the vector-only ranking about 0.01 nDCG@10, the fused ranking nothing measurable; BENCHMARKS.md),
// and the in-process index holds half the bytes per tool.
const DefaultHashedDimension = 512

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

// Hashed is the built-in embedder: deterministic, no model, no network, safe for concurrent use. Its vector has
// two parts. The first hashes features of the text into a fixed number of signed buckets (the "hashing trick"):
// the stemmed words that lexical search uses, and character 3- and 4-grams of each word, which let spelling
// variants, inflections and unsplit compounds ("geocoding", "geocode"; "wordcloud", "word cloud") meet; feature
// weights grow sublinearly with repetition. The second is the smooth-inverse-frequency weighted mean of static
// GloVe word vectors shipped with the binary (wordvec.go), which brings words of related meaning closer ("weather",
// "forecast") where hashing knows only spelling. Lines of ToolText are weighted by field in both, each part is
// normalised and weighted so that it contributes its share of the cosine similarity. A model served through
// NewOpenAI still does better where the words differ.
type Hashed struct {
	dim       int          // the whole vector
	hashDim   int          // the hashed part, vec[:hashDim]
	wordShare float64      // the word-vector part's share of the cosine similarity
	wv        *wordVectors // nil when the vector has no word-vector part
}

// DefaultWordShare is the share of the built-in embedder's cosine similarity that comes from static word vectors
// (the rest from hashed features): 0.3 to 0.5 ranked best on both fixtures (vector only, nDCG@10: LiveMCPBench
// 0.30 hashed, 0.34 mixed, 0.23 word vectors only; BFCL 0.61, 0.63, 0.49); in the engine's blend 0.4 sits in the
// middle of the plateau on both (BENCHMARKS.md).
const DefaultWordShare = 0.4

// minWordDim is the least dimension that gets a word-vector part: below it the vector is hashed features only.
const minWordDim = 256

// NewHashed returns the built-in embedder with vectors of dim components (DefaultHashedDimension if dim <= 0).
func NewHashed(dim int) *Hashed { return NewHashedMix(dim, DefaultWordShare) }

// NewHashedMix is NewHashed with the share (0..1) of the similarity that comes from static word vectors: 0 gives
// hashed features only, 1 word vectors only (hashed features then only for text without any known word).
func NewHashedMix(dim int, wordShare float64) *Hashed {
	if dim <= 0 {
		dim = DefaultHashedDimension
	}
	h := &Hashed{dim: dim, hashDim: dim}
	if wordShare > 0 && dim >= minWordDim {
		h.wv = loadWordVectors()
		h.hashDim = dim - h.wv.dim
		h.wordShare = min(1, wordShare)
	}
	return h
}

// Model implements Embedder: HashedModel, with the share of the word vectors appended when it is not the default.
func (h *Hashed) Model() string {
	if h.wv != nil && h.wordShare == DefaultWordShare || h.wv == nil && h.dim < minWordDim {
		return HashedModel
	}
	return fmt.Sprintf("%s-words%.2f", HashedModel, h.wordShare)
}

// Dimension implements Embedder.
func (h *Hashed) Dimension() int { return h.dim }

// Embed implements Embedder. It fails only when ctx is done.
func (h *Hashed) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	// A server's catalogue arrives as one batch: its texts are embedded on every core (each vector on its own, so
	// the result does not depend on the split).
	workers := min(runtime.GOMAXPROCS(0), (len(texts)+embedChunk-1)/embedChunk)
	if workers <= 1 {
		return out, h.embedRange(ctx, texts, out)
	}
	var wg sync.WaitGroup
	errs := make([]error, workers)
	per := (len(texts) + workers - 1) / workers
	for w := range workers {
		lo, hi := w*per, min((w+1)*per, len(texts))
		wg.Go(func() { errs[w] = h.embedRange(ctx, texts[lo:hi], out[lo:hi]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// embedChunk is the fewest texts worth a goroutine of Embed.
const embedChunk = 64

// embedRange embeds texts into out, checking ctx every 64 texts. The texts of a batch share a memo of their words.
func (h *Hashed) embedRange(ctx context.Context, texts []string, out [][]float32) error {
	memo := newWordMemo()
	foldInto := func(vec []float32, feats []feature) { foldWith(vec, feats, &memo.fold) }
	for i, t := range texts {
		if i%64 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("embed: %w", err)
			}
		}
		out[i] = h.vectorWith(t, foldInto, memo)
	}
	return nil
}

// Vector embeds one text. A text without any word gets a fixed unit vector rather than a zero vector, so every
// text has a valid embedding. Each line is split into words once: the hashed features and the word vectors take
// the same words and terms.
func (h *Hashed) Vector(text string) []float32 { return h.vectorWith(text, fold, nil) }

// vectorWith is Vector with the hashed features folded by foldFeatures (tests compare folds on it) and the words'
// features taken from memo (nil: computed for each word).
func (h *Hashed) vectorWith(text string, foldFeatures func([]float32, []feature), memo *wordMemo) []float32 {
	vec := make([]float32, h.dim)
	var acc []float64
	if h.wv != nil {
		acc = make([]float64, h.wv.dim)
	}
	found := false
	var feats []feature
	if memo != nil {
		feats = memo.buf[:0]
		defer func() { memo.buf = feats[:0] }()
	} else {
		feats = make([]feature, 0, 2*len(text)+1)
	}
	for line, weight := range fieldLines(text) {
		for _, w := range memo.analysis().Words(line) {
			f := h.features(memo, w)
			if f.stop {
				continue
			}
			feats = append(feats, feature{f.term, weight * hashWordWeight})
			if w.CJK || w.Compound {
				continue
			}
			if len(f.grams) > 0 {
				// the n-grams share the word's weight, so that a long word does not outweigh a short one
				each := weight * hashCharWeight / float64(len(f.grams))
				for _, g := range f.grams {
					feats = append(feats, feature{g, each})
				}
			}
			if acc != nil && f.row >= 0 {
				h.wv.addRow(acc, int(f.row), weight)
				found = true
			}
		}
	}
	foldFeatures(vec[:h.hashDim], feats)
	if acc == nil {
		return vec
	}
	var sum float64
	for _, x := range acc {
		sum += x * x
	}
	if !found || sum == 0 {
		return vec // hashed features only: the engine normalises again
	}
	hs, ws := math.Sqrt(1-h.wordShare), math.Sqrt(h.wordShare)/math.Sqrt(sum)
	for i := range vec[:h.hashDim] {
		vec[i] *= float32(hs)
	}
	for i, x := range acc {
		vec[h.hashDim+i] = float32(x * ws)
	}
	return Normalize(vec)
}

// fieldLines yields the lines of a ToolText (or any text) without their labels, each with its field's weight.
func fieldLines(text string) func(yield func(string, float64) bool) {
	return func(yield func(string, float64) bool) {
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
			if !yield(line, weight) {
				return
			}
		}
	}
}

// fold writes the unit vector of the hashed features feats into vec. Each distinct feature adds the logarithm of
// its summed weights to its bucket: within a bucket, distinct features are added in ascending hash order and each
// feature's weights are summed in ascending order, so that a vector does not depend on the order the features were
// found in (float32 sums are not associative). Only the order within a bucket matters, so the features are spread
// over the buckets first (a counting sort: one pass) and each bucket's few features sorted alone; sorting all the
// features by hash (a radix sort, 8 passes) gave the very same vectors at several times the cost (TestFoldMatchesFullSort).
func fold(vec []float32, feats []feature) { foldWith(vec, feats, nil) }

// foldScratch is the space fold works in, kept by a caller that folds one vector after another.
type foldScratch struct {
	start, next []int32
	byBucket    []feature
}

// foldWith is fold in s's space (nil: its own).
func foldWith(vec []float32, feats []feature, s *foldScratch) {
	if s == nil {
		s = &foldScratch{}
	}
	if len(feats) == 0 {
		feats = []feature{{hashFeature('e', ""), 1}}
	}
	dim := uint64(len(vec))
	start := resize(s.start, len(vec)+1)
	clear(start)
	for i := range feats {
		start[(feats[i].hash&(1<<63-1))%dim+1]++
	}
	for b := 1; b < len(start); b++ {
		start[b] += start[b-1]
	}
	byBucket := resize(s.byBucket, len(feats))
	next := resize(s.next, len(vec))
	copy(next, start[:len(vec)])
	s.start, s.next, s.byBucket = start, next, byBucket
	for _, f := range feats {
		b := (f.hash & (1<<63 - 1)) % dim
		byBucket[next[b]] = f
		next[b]++
	}
	for b := range vec {
		run := byBucket[start[b]:start[b+1]]
		sortRun(run)
		for i := 0; i < len(run); {
			f, w := run[i].hash, 0.0
			for ; i < len(run) && run[i].hash == f; i++ {
				w += run[i].weight
			}
			v := math.Log1p(w)
			if f>>63 == 1 {
				v = -v
			}
			vec[b] += float32(v)
		}
	}
	Normalize(vec)
	if Validate(vec, len(vec)) != nil { // every bucket cancelled out exactly: not seen in practice, but never zero
		clear(vec)
		vec[0] = 1
	}
}

// sortRun orders one bucket's features by hash, then weight: by insertion when there are a few (the usual case: a
// text's few thousand features over some hundred buckets), else by comparison sort.
func sortRun(run []feature) {
	less := func(a, b feature) bool { return a.hash < b.hash || a.hash == b.hash && a.weight < b.weight }
	if len(run) > 16 {
		slices.SortFunc(run, func(a, b feature) int { return cmp.Or(cmp.Compare(a.hash, b.hash), cmp.Compare(a.weight, b.weight)) })
		return
	}
	for i := 1; i < len(run); i++ {
		for j := i; j > 0 && less(run[j], run[j-1]); j-- {
			run[j], run[j-1] = run[j-1], run[j]
		}
	}
}

// feature is one occurrence of a hashed feature with its weight.
type feature struct {
	hash   uint64
	weight float64
}

// wordFeatures is what one word gives a vector apart from its weight: the hash of its term, the hashes of its
// character n-grams (with boundary marks; none for CJK text and compounds) and its row in the word vectors.
type wordFeatures struct {
	stop  bool // a stop word: nothing at all
	term  uint64
	grams []uint64
	row   int32 // -1: no word vector
}

// wordMemo remembers each distinct word's features for a batch of texts: a catalogue's words recur in every tool,
// and cutting, stemming and hashing them again was most of the embedder's work. A nil memo remembers nothing; a
// memo is used by one goroutine and lives as long as its batch.
type wordMemo struct {
	words *analysis.Memo
	feats map[analysis.Word]wordFeatures
	// buf and fold are one worker's scratch space, reused text after text: a batch's features and buckets were a
	// third of what indexing allocated (BENCHMARKS.md).
	buf  []feature
	fold foldScratch
}

func newWordMemo() *wordMemo {
	return &wordMemo{words: analysis.NewMemo(), feats: make(map[analysis.Word]wordFeatures)}
}

// resize is b with length n, reallocated only when it is too small.
func resize[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// analysis returns the memo of the words' analysis (nil for a nil memo).
func (m *wordMemo) analysis() *analysis.Memo {
	if m == nil {
		return nil
	}
	return m.words
}

// features returns w's features, from memo when it has them.
func (h *Hashed) features(memo *wordMemo, w analysis.Word) wordFeatures {
	if memo != nil {
		if f, ok := memo.feats[w]; ok {
			return f
		}
	}
	f := wordFeatures{row: -1}
	term, ok := memo.analysis().Term(w)
	if !ok {
		f.stop = true
	} else {
		f.term = hashFeature('w', term)
		if !w.CJK && !w.Compound {
			f.grams = grams(w.Text)
			if h.wv != nil {
				if i, ok := h.wv.lookup(w.Text); ok {
					f.row = int32(i)
				}
			}
		}
	}
	if memo != nil {
		memo.feats[w] = f
	}
	return f
}

// grams returns the hashes of the character n-grams of word with boundary marks, shortest first.
func grams(word string) []uint64 {
	r := []rune("<" + word + ">")
	n := 0
	for g := hashMinGram; g <= hashMaxGram; g++ {
		n += max(0, len(r)-g+1)
	}
	if n == 0 {
		return nil
	}
	out := make([]uint64, 0, n)
	for g := hashMinGram; g <= hashMaxGram; g++ {
		for i := 0; i+g <= len(r); i++ {
			out = append(out, hashRunes('c', r[i:i+g]))
		}
	}
	return out
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
