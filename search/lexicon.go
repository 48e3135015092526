package search

import (
	"container/heap"
	"math"
	"slices"
	"strings"

	"github.com/mcpgw/aggregator/search/internal/analysis"
)

// lexicon is the lexical side of the engine: the tool index and the server index, whose documents are each
// server's tools together, over one term dictionary. It keeps no text and no copy of the tools' terms: the server
// index is derived from the tool index's postings at every commit. It is not safe for concurrent use; Engine
// guards it.
type lexicon struct {
	dict    *termDict
	tools   *bm25
	servers *bm25
}

func newLexicon(tool, server bm25Params) *lexicon {
	dict := newTermDict()
	return &lexicon{dict: dict, tools: newBM25With(tool, dict), servers: newBM25With(server, dict)}
}

// add stages a tool, replacing an earlier version. Call commit after a batch.
func (l *lexicon) add(d Doc, ft fieldTerms) { l.tools.add(d.ID, d.ServerID, ft) }

// remove stages the removal of a tool; unknown ids are ignored. Call commit after a batch.
func (l *lexicon) remove(id int64) { l.tools.remove(id) }

// commit applies the staged changes to the tool index, forgets the terms no tool holds any more once they are
// most of the dictionary (a catalogue whose descriptions keep changing would otherwise grow it without end), and
// rebuilds the server index. The cost is a few passes over the postings, once per batch.
func (l *lexicon) commit() {
	if len(l.tools.pending) == 0 && len(l.tools.dead) == 0 {
		return
	}
	l.tools.commit()
	l.compactDict()
	l.rebuildServers()
}

// minDictCompaction is the dictionary size below which dead terms are left alone: compaction costs a pass over
// the dictionary, and a few thousand dead ids cost next to nothing.
const minDictCompaction = 4096

// compactDict renumbers the terms that still have postings and drops the others, when the others are more than
// half of the dictionary.
func (l *lexicon) compactDict() {
	x := l.tools
	terms := len(x.off) - 1
	live := 0
	for t := range terms {
		if x.off[t+1] > x.off[t] {
			live++
		}
	}
	if l.dict.size() < minDictCompaction || l.dict.size() <= 2*live {
		return
	}
	remap := make([]int32, terms)
	off := make([]uint32, 1, live+1)
	for t := range terms {
		remap[t] = -1
		if x.off[t+1] > x.off[t] {
			remap[t] = int32(len(off) - 1)
			off = append(off, x.off[t+1])
		}
	}
	ids := make(map[uint64]int32, live)
	for h, t := range l.dict.ids {
		if int(t) < terms && remap[t] >= 0 {
			ids[h] = remap[t]
		}
	}
	l.dict.ids = ids
	x.off = off // the postings keep their order: only empty rows went
}

// rebuildServers builds the server index from the tool index: a server's document is the union of its tools,
// each field's frequency the sum of its tools' (the server-name field once: it is the same in every tool of a
// server), its lengths likewise.
func (l *lexicon) rebuildServers() {
	tools := l.tools
	var ids []string
	slotOf := map[string]int32{}
	for i := range tools.slots {
		d := &tools.slots[i]
		if d.live {
			if _, ok := slotOf[d.serverID]; !ok {
				slotOf[d.serverID] = 0
				ids = append(ids, d.serverID)
			}
		}
	}
	slices.Sort(ids)
	x := newBM25With(l.servers.p, l.dict)
	x.slots = make([]lexDoc, len(ids))
	for i, id := range ids {
		slotOf[id] = int32(i)
		x.slots[i] = lexDoc{id: int64(i + 1), serverID: id, live: true}
		x.slotOf[int64(i+1)] = int32(i)
	}
	x.n = len(ids)
	toolServer := make([]int32, len(tools.slots)) // tool slot -> server slot
	for i := range tools.slots {
		d := &tools.slots[i]
		if !d.live {
			continue
		}
		s := slotOf[d.serverID]
		toolServer[i] = s
		for f := range numFields {
			if f == fieldServer {
				x.slots[s].lens[f] = max(x.slots[s].lens[f], d.lens[f])
			} else {
				x.slots[s].lens[f] += d.lens[f]
			}
		}
	}
	for s := range x.slots {
		for f := range numFields {
			x.sumLen[f] += int64(x.slots[s].lens[f])
		}
	}
	terms := len(tools.off) - 1
	x.off = make([]uint32, terms+1)
	acc := make([][numFields]int32, len(ids))
	var touched []int32
	var ps []posting
	for t := range terms {
		r, _ := readPostings(tools.post[tools.off[t]:tools.off[t+1]])
		for {
			p, ok := r.decode()
			if !ok {
				break
			}
			s := toolServer[p.slot]
			if acc[s] == ([numFields]int32{}) {
				touched = append(touched, s)
			}
			for f := range numFields {
				if f == fieldServer {
					acc[s][f] = max(acc[s][f], int32(p.tf[f]))
				} else {
					acc[s][f] += int32(p.tf[f])
				}
			}
		}
		slices.Sort(touched)
		ps = ps[:0]
		for _, s := range touched {
			var tf [numFields]uint8
			for f := range numFields {
				tf[f] = uint8(min(acc[s][f], maxTF))
			}
			ps = append(ps, posting{slot: s, tf: tf})
			acc[s] = [numFields]int32{}
		}
		x.post = appendPostings(x.post, ps)
		touched = touched[:0]
		x.off[t+1] = uint32(len(x.post))
	}
	x.post = slices.Clone(x.post) // exactly sized: appending left up to a quarter unused
	l.servers = x
}

// serverScores returns each matching server's lexical score (0..1) for the query.
func (l *lexicon) serverScores(terms []queryTerm) map[string]float64 {
	scores := make([]float64, len(l.servers.slots))
	maxPossible := l.servers.score(terms, scores)
	out := make(map[string]float64)
	for slot, s := range scores {
		if s > 0 {
			out[l.servers.slots[slot].serverID] = lexicalScore(s, maxPossible)
		}
	}
	return out
}

// topTools returns the pool best tools by lexical score (ranked, with lexRank set) among those allowed.
func (l *lexicon) topTools(scores []float64, allowed map[string]struct{}, allow func(int64) bool, pool int) []candidate {
	h := make(candHeap, 0, pool)
	for slot, s := range scores {
		if s <= 0 {
			continue
		}
		d := &l.tools.slots[slot]
		if allowed != nil {
			if _, ok := allowed[d.serverID]; !ok {
				continue
			}
		}
		if allow != nil && !allow(d.id) {
			continue
		}
		c := candidate{id: d.id, serverID: d.serverID, lexRaw: s}
		if len(h) < pool {
			heap.Push(&h, c)
		} else if cmpScore(s, h[0].lexRaw, d.id, h[0].id) < 0 {
			h[0] = c
			heap.Fix(&h, 0)
		}
	}
	top := []candidate(h)
	slices.SortFunc(top, func(a, b candidate) int { return cmpScore(a.lexRaw, b.lexRaw, a.id, b.id) })
	for i := range top {
		top[i].lexRank = i + 1
	}
	return top
}

// candHeap is a min-heap of candidates by lexical score (the worst on top), keeping the best pool of them.
type candHeap []candidate

func (h candHeap) Len() int { return len(h) }
func (h candHeap) Less(i, j int) bool {
	return cmpScore(h[i].lexRaw, h[j].lexRaw, h[i].id, h[j].id) > 0
}
func (h candHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *candHeap) Push(x any)   { *h = append(*h, x.(candidate)) }
func (h *candHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// docFields analyses a tool into its lexical fields, taking the words it has seen from memo (nil: none).
func docFields(d Doc, memo *analysis.Memo) fieldTerms {
	orig := d.OriginalName
	server := ""
	if orig == "" {
		var ok bool
		server, orig, ok = strings.Cut(d.Name, ".")
		if !ok {
			server, orig = "", d.Name
		}
	} else if s, ok := strings.CutSuffix(d.Name, orig); ok {
		server = strings.TrimSuffix(s, ".")
	}
	var ft fieldTerms
	ft[fieldName] = memo.Terms(orig)
	ft[fieldServer] = memo.Terms(server)
	ft[fieldDesc] = memo.Terms(d.Description)
	for _, p := range analysis.SchemaParams(d.InputSchema) {
		ft[fieldParams] = append(ft[fieldParams], memo.Terms(p.Name)...)
		ft[fieldParams] = append(ft[fieldParams], memo.Terms(p.Description)...)
		for _, v := range p.Enum {
			ft[fieldParams] = append(ft[fieldParams], memo.Terms(v)...)
		}
	}
	ft[fieldPairs] = append(pairs(ft[fieldName]), pairs(ft[fieldDesc])...)
	return ft
}

// pairs returns the adjacent pairs of terms ("word cloud"), the terms of the pairs field.
func pairs(terms []string) []string {
	if len(terms) < 2 {
		return nil
	}
	out := make([]string, 0, len(terms)-1)
	for i := 1; i < len(terms); i++ {
		out = append(out, terms[i-1]+" "+terms[i])
	}
	return out
}

// queryTerms analyses a query into distinct terms and adjacent pairs, weighted sublinearly by their frequency in it
// (1 + ln tf, as SMART's "l"): a long request that repeats a word ("the file ... the file") still asks for other
// things too.
func queryTerms(text string) []queryTerm {
	terms := analysis.QueryTerms(text)
	terms = append(terms, pairs(terms)...)
	idx := make(map[string]int, len(terms))
	var out []queryTerm
	for _, t := range terms {
		if i, ok := idx[t]; ok {
			out[i].weight++
			continue
		}
		idx[t] = len(out)
		out = append(out, queryTerm{text: t, weight: 1})
	}
	for i := range out {
		out[i].weight = 1 + math.Log(out[i].weight)
	}
	return out
}
