package search

import (
	"math"
	"slices"
)

// Fields of a document that the lexical index scores separately, each with its own weight and length
// normalisation (BM25F): a word in a tool's name says more about it than the same word deep in a parameter
// description, and two query words next to each other in a description ("word cloud") say more than the same
// words apart.
const (
	fieldName   = iota // the tool's own name, split into words
	fieldServer        // the server part of the namespaced name
	fieldDesc          // the description
	fieldParams        // parameter names, descriptions and enum values
	fieldPairs         // adjacent word pairs of name and description
	numFields
)

// bm25Params are the BM25F constants: k1 saturates term frequency, b[f] normalises field f by its length relative
// to the average, w[f] weighs field f, and delta is the lower bound of BM25+ (Lv and Zhai, "Lower-bounding term
// frequency normalization", CIKM 2011): what a document gains for containing a query term at all, however long it
// is.
type bm25Params struct {
	k1    float64
	b     [numFields]float64
	w     [numFields]float64
	delta float64
}

// defaultBM25 holds the usual BM25 constants (k1 1.2, b 0.75, and b 0.5 for names, which are short and of similar
// lengths), field weights that favour the name, and BM25+'s usual delta of 1.
//
// The delta matters for tool requests: a request names several things ("find the user with ID 7890 and list their
// orders") and a tool that mentions each of them once in a long description or schema should beat one that repeats
// a single word in a short name, which plain BM25's length normalisation lets happen. Parameters weigh as much as the
// description (they were at 0.4): a request often speaks of what a tool takes ("user with ID 7890" is user_id).
// Both changes raised nDCG@10 on LiveMCPBench and on BFCL (BENCHMARKS.md); deltas of 0.5 to 3 and parameter weights
// of 0.4 to 1 were tried, 1 and 1 being best or within 0.005 of it on both.
var defaultBM25 = bm25Params{
	k1:    1.2,
	b:     [numFields]float64{0.5, 0.5, 0.75, 0.75, 0.75},
	w:     [numFields]float64{2.5, 1.0, 1.0, 1.0, 1.0},
	delta: 1,
}

// serverBM25 scores the server index, whose documents are all of a server's tools together: the same constants,
// but parameters keep their earlier weight of 0.4, because a server's document is mostly its tools' parameter
// text (ids, limits, paths that every server takes), which says little about what the server is for. Weight 1 there
// lowered nDCG@10 by 0.002 and 0.003 on the two fixtures (0.4: LiveMCPBench 0.397, BFCL 0.696).
var serverBM25 = func() bm25Params {
	p := defaultBM25
	p.w[fieldParams] = 0.4
	return p
}()

// postingList is a term's postings: the slots of the documents that contain it and, at the same index, the term's
// frequency in each of their fields. The two are kept in separate arrays (9 bytes a posting, where a struct of an
// int32 and the counts is padded to 12 or 16): postings are most of the index's memory, millions of them at 10,000
// tools (BENCHMARKS.md, search at scale).
type postingList struct {
	slots []int32
	tfs   [][numFields]uint8
}

// maxTF is where a field's term frequency saturates. BM25's k1 of 1.2 makes a frequency past a few dozen add next
// to nothing (tf 255 is within 0.5% of the saturated score), so counts above it are not worth a wider integer.
const maxTF = math.MaxUint8

// lexDoc is what the lexical index keeps about one document.
type lexDoc struct {
	id       int64
	serverID string
	lens     [numFields]int32
	terms    []int32 // distinct term ids, to remove the document's postings
}

// bm25 is an incremental BM25F index. Documents live in slots (reused after removal) so that scoring accumulates
// into a dense array instead of a map. It is not safe for concurrent use; Engine guards it.
type bm25 struct {
	p        bm25Params
	slots    []lexDoc
	free     []int32
	slotOf   map[int64]int32
	termID   map[string]int32
	postings []postingList
	df       []int32
	sumLen   [numFields]int64
	n        int
}

func newBM25(p bm25Params) *bm25 {
	return &bm25{p: p, slotOf: make(map[int64]int32), termID: make(map[string]int32)}
}

// fieldTerms are the analysed terms of a document, per field.
type fieldTerms [numFields][]string

// add indexes a document, replacing any earlier version with the same id.
func (x *bm25) add(id int64, serverID string, ft fieldTerms) {
	x.remove(id)
	var slot int32
	if n := len(x.free); n > 0 {
		slot = x.free[n-1]
		x.free = x.free[:n-1]
	} else {
		slot = int32(len(x.slots))
		x.slots = append(x.slots, lexDoc{})
	}
	d := lexDoc{id: id, serverID: serverID}
	var total int
	for f := range numFields {
		total += len(ft[f])
	}
	at := make(map[int32]int, total) // term id -> index in terms and tfs
	terms := make([]int32, 0, total)
	tfs := make([][numFields]uint8, 0, total)
	for f := range numFields {
		d.lens[f] = int32(len(ft[f]))
		x.sumLen[f] += int64(len(ft[f]))
		for _, t := range ft[f] {
			tid, ok := x.termID[t]
			if !ok {
				tid = int32(len(x.postings))
				x.termID[t] = tid
				x.postings = append(x.postings, postingList{})
				x.df = append(x.df, 0)
			}
			i, ok := at[tid]
			if !ok {
				i = len(terms)
				at[tid] = i
				terms = append(terms, tid)
				tfs = append(tfs, [numFields]uint8{})
			}
			if tfs[i][f] < maxTF {
				tfs[i][f]++
			}
		}
	}
	d.terms = slices.Clone(terms) // exactly as long as the document's distinct terms: kept for its lifetime
	for i, tid := range d.terms {
		pl := &x.postings[tid]
		pl.slots = append(pl.slots, slot)
		pl.tfs = append(pl.tfs, tfs[i])
		x.df[tid]++
	}
	x.slots[slot] = d
	x.slotOf[id] = slot
	x.n++
}

// remove drops a document; unknown ids are ignored.
func (x *bm25) remove(id int64) {
	slot, ok := x.slotOf[id]
	if !ok {
		return
	}
	d := &x.slots[slot]
	for _, tid := range d.terms {
		pl := &x.postings[tid]
		for i, s := range pl.slots {
			if s == slot {
				last := len(pl.slots) - 1
				pl.slots[i], pl.tfs[i] = pl.slots[last], pl.tfs[last]
				pl.slots, pl.tfs = pl.slots[:last], pl.tfs[:last]
				break
			}
		}
		x.df[tid]--
	}
	for f := range numFields {
		x.sumLen[f] -= int64(d.lens[f])
	}
	*d = lexDoc{}
	delete(x.slotOf, id)
	x.free = append(x.free, slot)
	x.n--
}

// scratch returns buf resized to hold one score per slot, zeroed.
func (x *bm25) scratch(buf []float64) []float64 {
	n := len(x.slots)
	if cap(buf) < n {
		return make([]float64, n)
	}
	buf = buf[:n]
	clear(buf)
	return buf
}

// idf is the BM25 inverse document frequency, always positive.
func (x *bm25) idf(df int32) float64 {
	return math.Log(1 + (float64(x.n)-float64(df)+0.5)/(float64(df)+0.5))
}

// queryTerm is one distinct query term with its weight (its frequency in the query).
type queryTerm struct {
	text   string
	weight float64
}

// score adds the BM25F (BM25+) score of every document matching the query into scores (indexed by slot,
// len(x.slots)) and returns the maximum score the query could reach (every term saturated in the best field), used
// to map scores into 0..1.
func (x *bm25) score(q []queryTerm, scores []float64) (maxPossible float64) {
	if x.n == 0 {
		return 0
	}
	var avg [numFields]float64
	for f := range numFields {
		avg[f] = float64(x.sumLen[f]) / float64(x.n)
		if avg[f] == 0 {
			avg[f] = 1
		}
	}
	k1 := x.p.k1
	for _, qt := range q {
		tid, ok := x.termID[qt.text]
		if !ok || x.df[tid] == 0 {
			continue
		}
		idf := x.idf(x.df[tid]) * qt.weight
		maxPossible += idf
		pl := &x.postings[tid]
		for i, slot := range pl.slots {
			d := &x.slots[slot]
			ptf := &pl.tfs[i]
			var tf float64
			for f := range numFields {
				if ptf[f] == 0 {
					continue
				}
				norm := 1 - x.p.b[f] + x.p.b[f]*float64(d.lens[f])/avg[f]
				tf += x.p.w[f] * float64(ptf[f]) / norm
			}
			scores[slot] += idf * (tf*(k1+1)/(tf+k1) + x.p.delta)
		}
	}
	return maxPossible * (k1 + 1 + x.p.delta)
}
