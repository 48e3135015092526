package search

import (
	"container/heap"
	"slices"
	"strings"

	"github.com/mcpgw/aggregator/search/internal/analysis"
)

// lexDocRecord is what the engine keeps about one tool besides its postings: what a vector point carries, and its
// analysed fields (to rebuild its server's document) as the tool index's term ids, field after field: 4 bytes a
// term instead of a string each. Its text is not kept (the store has it).
type lexDocRecord struct {
	serverID, name, originalName string
	payload                      any
	terms                        []int32          // term ids of every field in turn
	ends                         [numFields]int32 // terms[ends[f-1]:ends[f]] are field f's
}

// serverRecord is a server as one document of the server index: the union of its tools.
type serverRecord struct {
	key   int64 // document id in the server index
	tools map[int64]struct{}
}

// lexicon is the lexical side of the engine: the tool index, the server index and the records they are built
// from. It is not safe for concurrent use; Engine guards it.
type lexicon struct {
	tools   *bm25
	servers *bm25
	docs    map[int64]lexDocRecord
	text    []string // term id of the tool index -> term
	byServ  map[string]*serverRecord
	dirty   map[string]struct{} // servers whose document is out of date
	nextKey int64
}

func newLexicon(tool, server bm25Params) *lexicon {
	return &lexicon{
		tools: newBM25(tool), servers: newBM25(server),
		docs: make(map[int64]lexDocRecord), byServ: make(map[string]*serverRecord), dirty: make(map[string]struct{}),
	}
}

// add indexes a tool, replacing an earlier version. Call refreshServers after a batch.
func (l *lexicon) add(d Doc, ft fieldTerms) {
	id, serverID := d.ID, d.ServerID
	l.detach(id)
	l.tools.add(id, serverID, ft)
	rec := lexDocRecord{serverID: serverID, name: d.Name, originalName: d.OriginalName, payload: d.Payload}
	var n int
	for f := range numFields {
		n += len(ft[f])
	}
	rec.terms = make([]int32, 0, n)
	for f := range numFields {
		for _, t := range ft[f] {
			tid := l.tools.termID[t]
			for int(tid) >= len(l.text) {
				l.text = append(l.text, "")
			}
			if l.text[tid] == "" {
				l.text[tid] = t
			}
			rec.terms = append(rec.terms, tid)
		}
		rec.ends[f] = int32(len(rec.terms))
	}
	l.docs[id] = rec
	sr := l.byServ[serverID]
	if sr == nil {
		l.nextKey++
		sr = &serverRecord{key: l.nextKey, tools: make(map[int64]struct{})}
		l.byServ[serverID] = sr
	}
	sr.tools[id] = struct{}{}
	l.dirty[serverID] = struct{}{}
}

// remove drops a tool; unknown ids are ignored. Call refreshServers after a batch.
func (l *lexicon) remove(id int64) {
	l.detach(id)
	l.tools.remove(id)
	delete(l.docs, id)
}

// detach takes a tool out of its server's record.
func (l *lexicon) detach(id int64) {
	old, ok := l.docs[id]
	if !ok {
		return
	}
	if sr := l.byServ[old.serverID]; sr != nil {
		delete(sr.tools, id)
		l.dirty[old.serverID] = struct{}{}
	}
}

// refreshServers rebuilds the documents of the servers whose tools changed. The cost is proportional to the size
// of those servers, once per batch.
func (l *lexicon) refreshServers() {
	for sid := range l.dirty {
		sr := l.byServ[sid]
		if sr == nil {
			continue
		}
		if len(sr.tools) == 0 {
			l.servers.remove(sr.key)
			delete(l.byServ, sid)
			continue
		}
		ids := make([]int64, 0, len(sr.tools))
		for id := range sr.tools {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		var ft fieldTerms
		for i, id := range ids {
			r := l.docs[id]
			var from int32
			for k := range numFields {
				if k == fieldServer && i > 0 {
					from = r.ends[k]
					continue // the server's name once, not once per tool
				}
				for _, tid := range r.terms[from:r.ends[k]] {
					ft[k] = append(ft[k], l.text[tid])
				}
				from = r.ends[k]
			}
		}
		l.servers.add(sr.key, sid, ft)
	}
	clear(l.dirty)
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
func (l *lexicon) topTools(scores []float64, allowed map[string]struct{}, pool int) []candidate {
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

// docFields analyses a tool into its lexical fields.
func docFields(d Doc) fieldTerms {
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
	ft[fieldName] = analysis.Terms(orig)
	ft[fieldServer] = analysis.Terms(server)
	ft[fieldDesc] = analysis.Terms(d.Description)
	for _, p := range analysis.SchemaParams(d.InputSchema) {
		ft[fieldParams] = append(ft[fieldParams], analysis.Terms(p.Name)...)
		ft[fieldParams] = append(ft[fieldParams], analysis.Terms(p.Description)...)
		for _, v := range p.Enum {
			ft[fieldParams] = append(ft[fieldParams], analysis.Terms(v)...)
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

// queryTerms analyses a query into distinct terms and adjacent pairs, weighted by their frequency in it.
func queryTerms(text string) []queryTerm {
	terms := analysis.Terms(text)
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
	return out
}
