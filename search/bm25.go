package search

import (
	"encoding/binary"
	"hash/maphash"
	"math"
	"math/bits"
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

// Postings are stored compressed, one byte stream per term (see bm25): the number of postings as a uvarint, then
// for each posting in ascending slot order the slot as a uvarint (the first one as it is, the others as the gap to
// the one before), a byte whose bits say which fields hold the term, and the term's frequency in each of those
// fields, one byte each. Most postings are of rare terms (word pairs) in one field: about 3 to 4 bytes each instead
// of 9 packed or 16 as a struct (BENCHMARKS.md, memory). Postings are most of the index's memory: over a million at
// 10,000 tools.

// maxTF is where a field's term frequency saturates. BM25's k1 of 1.2 makes a frequency past a few dozen add next
// to nothing (tf 255 is within 0.5% of the saturated score), so counts above it are not worth a wider integer.
const maxTF = math.MaxUint8

// posting is one decoded posting: a document's slot and the term's frequency in each field of it.
type posting struct {
	slot int32
	tf   [numFields]uint8
}

// appendPostings appends the stream of ps (sorted by slot, each with some frequency) to b.
func appendPostings(b []byte, ps []posting) []byte {
	if len(ps) == 0 {
		return b
	}
	b = binary.AppendUvarint(b, uint64(len(ps)))
	prev := int32(0)
	for _, p := range ps {
		b = appendPosting(b, p, prev)
		prev = p.slot
	}
	return b
}

// appendPosting appends one posting of a stream, prev being the slot of the posting before it (0 for the first).
func appendPosting(b []byte, p posting, prev int32) []byte {
	b = binary.AppendUvarint(b, uint64(p.slot-prev))
	var mask byte
	for f := range numFields {
		if p.tf[f] != 0 {
			mask |= 1 << f
		}
	}
	b = append(b, mask)
	for f := range numFields {
		if p.tf[f] != 0 {
			b = append(b, p.tf[f])
		}
	}
	return b
}

// postingReader reads one term's stream.
type postingReader struct {
	b    []byte
	left int32
	slot int32
}

// readPostings starts reading stream b; it returns the reader and the number of postings.
func readPostings(b []byte) (postingReader, int32) {
	if len(b) == 0 {
		return postingReader{}, 0
	}
	n, k := binary.Uvarint(b)
	return postingReader{b: b[k:], left: int32(n)}, int32(n)
}

// next returns the next posting's slot, its field mask and its frequencies (one byte per bit of the mask, in field
// order), or ok false at the end.
func (r *postingReader) next() (slot int32, mask byte, tfs []byte, ok bool) {
	if r.left == 0 {
		return 0, 0, nil, false
	}
	r.left--
	gap, k := binary.Uvarint(r.b)
	r.slot += int32(gap)
	mask = r.b[k]
	n := bits.OnesCount8(mask)
	tfs = r.b[k+1 : k+1+n]
	r.b = r.b[k+1+n:]
	return r.slot, mask, tfs, true
}

// decode is next with the frequencies spread over the fields.
func (r *postingReader) decode() (posting, bool) {
	slot, mask, tfs, ok := r.next()
	if !ok {
		return posting{}, false
	}
	p := posting{slot: slot}
	for f := range numFields {
		if mask&(1<<f) != 0 {
			p.tf[f], tfs = tfs[0], tfs[1:]
		}
	}
	return p, true
}

// lexDoc is what the lexical index keeps about one document besides its postings.
type lexDoc struct {
	id       int64
	serverID string
	lens     [numFields]int32
	live     bool
}

// staged is a posting of a document added since the last commit.
type staged struct {
	term int32
	p    posting
}

// cmpStaged orders staged postings by term, then slot: the order commit merges them in.
func cmpStaged(a, b staged) int {
	if a.term != b.term {
		return int(a.term) - int(b.term)
	}
	return int(a.p.slot) - int(b.p.slot)
}

// bm25 is a BM25F index whose postings are one byte array in term order (compressed sparse rows): term t's
// postings are the stream post[off[t]:off[t+1]] (empty when no document holds t; format above). Changes are staged
// by add and remove and applied by commit, which builds the new array from the old one in one pass. One array
// instead of a slice per term saves the slice headers and the allocation of each of the hundreds of thousands of
// terms that occur once (most of them word pairs), and leaves nothing for the collector to scatter across the heap.
//
// Documents live in slots so that scoring accumulates into a dense array instead of a map; a removed document's
// slot is reused after the next commit. It is not safe for concurrent use; Engine guards it, and readers see it
// only between commits.
type bm25 struct {
	p      bm25Params
	dict   *termDict
	slots  []lexDoc
	free   []int32
	slotOf map[int64]int32
	off    []uint32 // len: terms in the postings + 1
	post   []byte
	sumLen [numFields]int64
	n      int

	pending []staged
	dead    []int32 // slots removed since the last commit

	// add's scratch, reused from one document to the next (a batch adds thousands): a term's index in terms and
	// tfs, the document's distinct terms and their frequencies per field.
	at    map[int32]int
	terms []int32
	tfs   [][numFields]uint8
}

func newBM25With(p bm25Params, dict *termDict) *bm25 {
	return &bm25{p: p, dict: dict, slotOf: make(map[int64]int32), off: []uint32{0}}
}

// fieldTerms are the analysed terms of a document, per field.
type fieldTerms [numFields][]string

// add stages a document, replacing any earlier version with the same id; commit applies it.
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
	d := lexDoc{id: id, serverID: serverID, live: true}
	var total int
	for f := range numFields {
		total += len(ft[f])
	}
	at := x.at // term id -> index in terms and tfs
	terms, tfs := x.terms[:0], x.tfs[:0]
	if at == nil || total > addScratchMost { // an unusually long document gets its own, not kept after it
		at = make(map[int32]int, total)
		terms, tfs = make([]int32, 0, total), make([][numFields]uint8, 0, total)
		if x.at == nil && total <= addScratchMost {
			x.at = at
		}
	} else {
		clear(at)
	}
	for f := range numFields {
		d.lens[f] = int32(len(ft[f]))
		x.sumLen[f] += int64(len(ft[f]))
		for _, t := range ft[f] {
			tid := x.dict.id(t)
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
	if need := len(x.pending) + len(terms); need > cap(x.pending) {
		// doubled, where append grows a large slice by a quarter: a batch stages tens of thousands
		x.pending = slices.Grow(x.pending, max(need, 2*cap(x.pending), 1024)-len(x.pending))
	}
	for i, tid := range terms {
		x.pending = append(x.pending, staged{term: tid, p: posting{slot: slot, tf: tfs[i]}})
	}
	if total <= addScratchMost {
		x.terms, x.tfs = terms[:0], tfs[:0]
	}
	x.slots[slot] = d
	x.slotOf[id] = slot
	x.n++
}

// keepStagedMost is the most staged postings whose slice commit keeps for the next batch (1 MiB), instead of
// growing it again from nothing through many copies.
const keepStagedMost = 64 << 10

// addScratchMost is the most terms of a document whose scratch add keeps for the next one.
const addScratchMost = 1 << 10

// remove stages the removal of a document; unknown ids are ignored.
func (x *bm25) remove(id int64) {
	slot, ok := x.slotOf[id]
	if !ok {
		return
	}
	d := &x.slots[slot]
	for f := range numFields {
		x.sumLen[f] -= int64(d.lens[f])
	}
	*d = lexDoc{}
	delete(x.slotOf, id)
	x.dead = append(x.dead, slot)
	x.n--
}

// commit applies the staged changes: the postings of removed documents are dropped, those of added documents
// merged in by slot, and the removed documents' slots freed. It costs one pass over the postings, and decodes only
// what it must: when no document was removed, a term without new postings keeps its stream's bytes, and a term
// whose new postings all come after its last one keeps them too, with the new ones appended (the usual case:
// new documents take new slots).
func (x *bm25) commit() {
	if len(x.pending) == 0 && len(x.dead) == 0 {
		return
	}
	gone := make([]bool, len(x.slots))
	for _, s := range x.dead {
		gone[s] = true
	}
	pending := x.pending[:0] // a document added and removed again within the batch leaves nothing
	for _, sp := range x.pending {
		if !gone[sp.p.slot] {
			pending = append(pending, sp)
		}
	}
	terms := max(x.dict.size(), len(x.off)-1)
	pending = sortStaged(pending, terms)
	keep := len(x.dead) == 0 // no old posting is dropped: old streams may be kept as they are
	off := make([]uint32, terms+1)
	post := make([]byte, 0, len(x.post)+len(pending)*4)
	var merged []posting
	for t := range terms {
		var stream []byte
		if t < len(x.off)-1 {
			stream = x.post[x.off[t]:x.off[t+1]]
		}
		run := len(pending)
		for i, sp := range pending {
			if sp.term != int32(t) {
				run = i
				break
			}
		}
		if keep {
			if added, ok := appendAfter(post, stream, pending[:run]); ok {
				post, pending = added, pending[run:]
				off[t+1] = uint32(len(post))
				continue
			}
		}
		merged = merged[:0]
		r, _ := readPostings(stream)
		old, more := r.decode()
		for more || len(pending) > 0 && pending[0].term == int32(t) {
			if more && gone[old.slot] {
				old, more = r.decode()
				continue
			}
			// Old and new postings never share a slot: a slot is reused only after the commit that dropped its
			// postings.
			if more && (len(pending) == 0 || pending[0].term != int32(t) || old.slot < pending[0].p.slot) {
				merged = append(merged, old)
				old, more = r.decode()
				continue
			}
			merged = append(merged, pending[0].p)
			pending = pending[1:]
		}
		post = appendPostings(post, merged)
		off[t+1] = uint32(len(post))
	}
	x.off, x.post = off, slices.Clip(post)
	if cap(post)-len(post) > len(post)/16 { // exactly sized: the estimate may be well above
		x.post = slices.Clone(post)
	}
	x.free = append(x.free, x.dead...)
	x.dead = nil
	if x.pending = x.pending[:0]; cap(x.pending) > keepStagedMost {
		x.pending = nil
	}
}

// appendAfter appends to b the stream of old (a term's postings, none of them removed) followed by added (the
// term's new postings, sorted by slot), without decoding old, when every added posting comes after old's last;
// ok false (b unchanged) otherwise.
func appendAfter(b, old []byte, added []staged) ([]byte, bool) {
	if len(added) == 0 {
		return append(b, old...), true
	}
	r, n := readPostings(old)
	body := r.b
	var last int32
	for {
		slot, _, _, ok := r.next()
		if !ok {
			break
		}
		last = slot
	}
	if n > 0 && added[0].p.slot <= last {
		return b, false
	}
	b = binary.AppendUvarint(b, uint64(int(n)+len(added)))
	b = append(b, body...)
	prev := last
	for _, sp := range added {
		b = appendPosting(b, sp.p, prev)
		prev = sp.p.slot
	}
	return b, true
}

// sortStaged orders staged postings as cmpStaged does, terms being below terms: a counting sort by term, which
// keeps each term's postings in the order they were staged (by slot, unless a freed slot was reused), then a sort
// of any term's run that is not in slot order. Sorting all of them by comparison was a third of the commit.
func sortStaged(ps []staged, terms int) []staged {
	if len(ps) < 2 {
		return ps
	}
	start := make([]int32, terms+1)
	for _, sp := range ps {
		start[sp.term+1]++
	}
	for t := 1; t <= terms; t++ {
		start[t] += start[t-1]
	}
	out := make([]staged, len(ps))
	next := slices.Clone(start[:terms])
	for _, sp := range ps {
		out[next[sp.term]] = sp
		next[sp.term]++
	}
	for t := range terms {
		run := out[start[t]:start[t+1]]
		if !slices.IsSortedFunc(run, cmpStaged) {
			slices.SortFunc(run, cmpStaged)
		}
	}
	return out
}

// df is the number of documents containing term t.
func (x *bm25) df(t int32) int32 {
	if int(t)+1 >= len(x.off) {
		return 0
	}
	_, n := readPostings(x.post[x.off[t]:x.off[t+1]])
	return n
}

// postings is the number of postings of all terms.
func (x *bm25) postings() int {
	n := 0
	for t := range len(x.off) - 1 {
		n += int(x.df(int32(t)))
	}
	return n
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
		tid, ok := x.dict.lookup(qt.text)
		if !ok || int(tid)+1 >= len(x.off) {
			continue
		}
		r, df := readPostings(x.post[x.off[tid]:x.off[tid+1]])
		if df == 0 {
			continue
		}
		idf := x.idf(df) * qt.weight
		maxPossible += idf
		// The postings decoded inline (the format of appendPostings): this loop is most of a lexical search.
		b, slot := r.b, int32(0)
		for range df {
			gap := uint32(b[0])
			k := 1
			for shift := 7; shift < 32 && gap&(1<<shift) != 0; shift += 7 { // a gap of more than 7 bits
				gap = gap&(1<<shift-1) | uint32(b[k])<<shift
				k++
			}
			slot += int32(gap)
			mask := b[k]
			tfs := b[k+1:]
			d := &x.slots[slot]
			var tf float64
			n := 0
			for m := mask; m != 0; m &= m - 1 {
				f := bits.TrailingZeros8(m)
				norm := 1 - x.p.b[f] + x.p.b[f]*float64(d.lens[f])/avg[f]
				tf += x.p.w[f] * float64(tfs[n]) / norm
				n++
			}
			b = tfs[n:]
			scores[slot] += idf * (tf*(k1+1)/(tf+k1) + x.p.delta)
		}
	}
	return maxPossible * (k1 + 1 + x.p.delta)
}

// termDict gives every analysed term a dense id, shared by the tool and server indexes. It keeps a 64-bit hash of
// each term, not the term: 8 bytes instead of a string (and the text it may share), and two different terms of a
// catalogue collide with a probability of about n²/2⁶⁵ (10⁻⁸ at a million terms). The seed is the dictionary's
// own; ids never reach a ranking (ties fall to document ids), so rankings do not depend on it.
type termDict struct {
	seed maphash.Seed
	ids  map[uint64]int32
}

func newTermDict() *termDict {
	return &termDict{seed: maphash.MakeSeed(), ids: make(map[uint64]int32)}
}

// id returns t's id, giving it the next one if it is new.
func (d *termDict) id(t string) int32 {
	h := maphash.String(d.seed, t)
	id, ok := d.ids[h]
	if !ok {
		id = int32(len(d.ids))
		d.ids[h] = id
	}
	return id
}

// lookup returns t's id if it has one.
func (d *termDict) lookup(t string) (int32, bool) {
	id, ok := d.ids[maphash.String(d.seed, t)]
	return id, ok
}

func (d *termDict) size() int { return len(d.ids) }
