package search

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mcpgw/aggregator/search/internal/analysis"
)

// newBM25 returns an empty index with a dictionary of its own (the engine's two indexes share one: newLexicon).
func newBM25(p bm25Params) *bm25 { return newBM25With(p, newTermDict()) }

// fieldsOf builds fieldTerms from plain text per field.
func fieldsOf(name, desc string) fieldTerms {
	var ft fieldTerms
	ft[fieldName] = analysis.Terms(name)
	ft[fieldDesc] = analysis.Terms(desc)
	return ft
}

// rank scores q and returns the ids with a positive score, best first.
func rank(x *bm25, q string) []int64 {
	x.commit()
	scores := x.scratch(nil)
	x.score(queryTerms(q), scores)
	var ids []int64
	for slot, s := range scores {
		if s > 0 {
			ids = append(ids, x.slots[slot].id)
		}
	}
	slices.SortFunc(ids, func(a, b int64) int {
		return cmpScore(scores[x.slotOf[a]], scores[x.slotOf[b]], a, b)
	})
	return ids
}

func TestBM25AddRemoveUpdate(t *testing.T) {
	type op struct {
		add        bool
		id         int64
		name, desc string
	}
	tests := []struct {
		name  string
		ops   []op
		query string
		want  []int64
	}{
		{"match by name and description", []op{
			{true, 1, "get_weather", "Current weather for a city"},
			{true, 2, "get_stock_price", "Latest price of a stock"},
		}, "weather in Paris", []int64{1}},
		{"name outweighs description", []op{
			{true, 1, "list_files", "List files; no weather here"},
			{true, 2, "weather_forecast", "Forecast for the next days"},
		}, "weather", []int64{2, 1}},
		{"removed document no longer matches", []op{
			{true, 1, "get_weather", "weather"},
			{true, 2, "get_forecast", "weather forecast"},
			{false, 1, "", ""},
		}, "weather", []int64{2}},
		{"update replaces old terms", []op{
			{true, 1, "get_weather", "weather"},
			{true, 1, "get_stock", "stock price"},
		}, "weather", nil},
		{"update keeps the id searchable with new terms", []op{
			{true, 1, "get_weather", "weather"},
			{true, 1, "get_stock", "stock price"},
		}, "stock", []int64{1}},
		{"slot reused after removal", []op{
			{true, 1, "alpha", "first"},
			{false, 1, "", ""},
			{true, 2, "beta", "second"},
		}, "beta second", []int64{2}},
		{"removing an unknown id is harmless", []op{
			{true, 1, "alpha", "first"},
			{false, 42, "", ""},
		}, "alpha", []int64{1}},
		{"CJK", []op{
			{true, 1, "bing_search", "使用必应搜索指定的关键词"},
			{true, 2, "fetch_webpage", "根据提供的ID获取对应网页的内容"},
		}, "必应搜索", []int64{1, 2}}, // 2 shares only the character 应
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := newBM25(defaultBM25)
			for _, o := range tt.ops {
				if o.add {
					x.add(o.id, "s", fieldsOf(o.name, o.desc))
				} else {
					x.remove(o.id)
				}
			}
			if got := rank(x, tt.query); !slices.Equal(got, tt.want) {
				t.Errorf("rank(%q) = %v, want %v", tt.query, got, tt.want)
			}
		})
	}
}

// TestBM25IncrementalEqualsFresh checks that statistics after adds, updates and removals are exactly those of an
// index built from the final documents only.
func TestBM25IncrementalEqualsFresh(t *testing.T) {
	inc := newBM25(defaultBM25)
	inc.add(1, "a", fieldsOf("get_weather", "Weather now"))
	inc.add(2, "a", fieldsOf("get_forecast", "Weather forecast for days"))
	inc.add(3, "b", fieldsOf("stock_price", "Price of a stock"))
	inc.add(2, "a", fieldsOf("get_forecast", "Forecast of rain"))
	inc.remove(1)
	inc.add(4, "b", fieldsOf("crypto_price", "Price of a coin"))
	inc.commit()

	fresh := newBM25(defaultBM25)
	fresh.add(2, "a", fieldsOf("get_forecast", "Forecast of rain"))
	fresh.add(3, "b", fieldsOf("stock_price", "Price of a stock"))
	fresh.add(4, "b", fieldsOf("crypto_price", "Price of a coin"))
	fresh.commit()

	if inc.n != fresh.n || inc.sumLen != fresh.sumLen {
		t.Fatalf("n %d/%d sumLen %v/%v", inc.n, fresh.n, inc.sumLen, fresh.sumLen)
	}
	for _, q := range []string{"price", "weather forecast", "rain", "coin stock", "get"} {
		si, sf := inc.scratch(nil), fresh.scratch(nil)
		mi, mf := inc.score(queryTerms(q), si), fresh.score(queryTerms(q), sf)
		if math.Abs(mi-mf) > 1e-12 {
			t.Errorf("%q: max %v vs %v", q, mi, mf)
		}
		for _, id := range []int64{2, 3, 4} {
			a, b := si[inc.slotOf[id]], sf[fresh.slotOf[id]]
			if math.Abs(a-b) > 1e-12 {
				t.Errorf("%q doc %d: %v incremental vs %v fresh", q, id, a, b)
			}
		}
	}
	if tid, ok := inc.dict.lookup("weather"); !ok || inc.df(tid) != 0 {
		t.Errorf("a term of removed versions keeps postings")
	}
	if inc.postings() != fresh.postings() {
		t.Errorf("%d postings after updates, %d in a fresh index", inc.postings(), fresh.postings())
	}
}

func TestBM25RemoveAll(t *testing.T) {
	x := newBM25(defaultBM25)
	for id := range int64(20) {
		x.add(id, "s", fieldsOf("tool", "does things"))
	}
	for id := range int64(20) {
		x.remove(id)
	}
	if x.n != 0 || x.sumLen != [numFields]int64{} || len(x.slotOf) != 0 {
		t.Errorf("after removing all: n %d sumLen %v", x.n, x.sumLen)
	}
	if got := rank(x, "tool"); len(got) != 0 {
		t.Errorf("empty index ranks %v", got)
	}
	if m := x.score(queryTerms("tool"), x.scratch(nil)); m != 0 {
		t.Errorf("max possible on an empty index = %v", m)
	}
}

func TestBM25MaxPossibleBoundsScores(t *testing.T) {
	x := newBM25(defaultBM25)
	x.add(1, "s", fieldsOf("weather weather weather", "weather weather weather weather"))
	x.add(2, "s", fieldsOf("other", "unrelated"))
	x.commit()
	scores := x.scratch(nil)
	m := x.score(queryTerms("weather"), scores)
	if scores[x.slotOf[1]] <= 0 || scores[x.slotOf[1]] > m {
		t.Errorf("score %v not in (0, max %v]", scores[x.slotOf[1]], m)
	}
	if idf0, idf1 := x.idf(0), x.idf(2); idf0 <= idf1 || idf1 <= 0 {
		t.Errorf("idf not positive and decreasing: %v %v", idf0, idf1)
	}
}

// TestBM25TermFrequencySaturates checks the postings' one-byte counts: frequencies up to maxTF score as counted,
// and larger ones as maxTF instead of wrapping around.
func TestBM25TermFrequencySaturates(t *testing.T) {
	repeat := func(n int) fieldTerms {
		var ft fieldTerms
		ft[fieldName] = []string{"tool"}
		ft[fieldDesc] = slices.Repeat([]string{"weather"}, n)
		return ft
	}
	score := func(tf int) float64 {
		x := newBM25(defaultBM25)
		x.add(1, "s", repeat(tf))
		x.commit()
		scores := x.scratch(nil)
		x.score([]queryTerm{{text: "weather", weight: 1}}, scores)
		return scores[x.slotOf[1]]
	}
	tests := []struct {
		name   string
		lo, hi int
		equal  bool
	}{
		{"counts below the cap differ", 100, 254, false},
		{"the cap is counted", 254, maxTF, false},
		{"past the cap saturates", maxTF, 300, true},
		{"far past the cap saturates", maxTF, 1000, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lo, hi := score(tt.lo), score(tt.hi)
			if tt.equal && lo != hi {
				t.Errorf("tf %d scores %v, tf %d scores %v: want equal", tt.lo, lo, tt.hi, hi)
			}
			if !tt.equal && !(lo < hi) {
				t.Errorf("tf %d scores %v, tf %d scores %v: want the larger count to score more", tt.lo, lo, tt.hi, hi)
			}
		})
	}
}

// TestLexiconForgetsDeadTerms checks that a catalogue whose tools keep changing their text does not grow the term
// dictionary without end, and that renumbering the terms keeps both indexes answering.
func TestLexiconForgetsDeadTerms(t *testing.T) {
	l := newLexicon(defaultBM25, serverBM25)
	doc := func(id int64, gen int) (Doc, fieldTerms) {
		d := Doc{ID: id, ServerID: "s", Name: fmt.Sprintf("s.tool%d", id)}
		return d, fieldsOf(d.Name, fmt.Sprintf("word%dx%d other%dx%d stable", id, gen, id, gen))
	}
	const tools = 500
	for gen := range 20 {
		for id := int64(1); id <= tools; id++ {
			l.add(doc(id, gen))
		}
		l.commit()
	}
	// Each generation brings 2 words and 3 pairs per tool; the live ones are one generation's plus the shared.
	live := 0
	for tm := range len(l.tools.off) - 1 {
		if l.tools.df(int32(tm)) > 0 {
			live++
		}
	}
	if n := l.dict.size(); n > 2*live+minDictCompaction {
		t.Errorf("dictionary holds %d terms for %d live ones", n, live)
	}
	scores := l.tools.scratch(nil)
	l.tools.score(queryTerms("word7x19"), scores)
	if s := scores[l.tools.slotOf[7]]; s <= 0 {
		t.Errorf("tool 7 not found by its current text after compaction")
	}
	scores = l.tools.scratch(scores)
	l.tools.score(queryTerms("word7x3"), scores) // a word of an old version
	for slot, s := range scores {
		if s > 0 && l.tools.slots[slot].id != 7 {
			t.Errorf("slot %d scores %v", slot, s)
		}
	}
	if got := l.serverScores(queryTerms("word9x19")); got["s"] <= 0 {
		t.Errorf("server index lost the renumbered terms: %v", got)
	}
}

// TestPostingsRoundTrip checks the postings' byte format: slots far apart and next to each other, every field
// mask, frequencies up to maxTF, and an empty stream.
func TestPostingsRoundTrip(t *testing.T) {
	var ps []posting
	slot := int32(0)
	for i := range 300 {
		slot += int32(1 + i*i%5000) // gaps of one to several varint bytes
		var tf [numFields]uint8
		for f := range numFields {
			if (i+1)&(1<<f) != 0 || i%32 == 31 {
				tf[f] = uint8(1 + (i*7+f)%maxTF)
			}
		}
		ps = append(ps, posting{slot: slot, tf: tf})
	}
	b := appendPostings([]byte{0xff}, ps)[1:]
	r, n := readPostings(b)
	if int(n) != len(ps) {
		t.Fatalf("%d postings read, %d written", n, len(ps))
	}
	for i, want := range ps {
		got, ok := r.decode()
		if !ok || got != want {
			t.Fatalf("posting %d: %+v (%v), want %+v", i, got, ok, want)
		}
	}
	if _, ok := r.decode(); ok {
		t.Fatal("a posting past the end")
	}
	if len(appendPostings(nil, nil)) != 0 {
		t.Fatal("no postings should take no bytes")
	}
	if _, n := readPostings(nil); n != 0 {
		t.Fatal("an empty stream has postings")
	}
	if per := float64(len(b)) / float64(len(ps)); per > 9 {
		t.Errorf("%.1f bytes a posting", per)
	}
}

// TestBM25ScoresAcrossWideGaps checks the scoring loop's own decoding of the postings where slots are one, two and
// three varint bytes apart: exactly the documents holding a term score, and alike.
func TestBM25ScoresAcrossWideGaps(t *testing.T) {
	x := newBM25(defaultBM25)
	holders := map[int64]bool{0: true, 1: true, 100: true, 300: true, 20000: true, 20001: true, 70000: true}
	for id := range int64(70001) {
		desc := "filler"
		if holders[id] {
			desc = "filler needle"
		}
		x.add(id, "s", fieldsOf("tool", desc))
	}
	x.commit()
	scores := x.scratch(nil)
	x.score(queryTerms("needle"), scores)
	var want float64
	for slot, s := range scores {
		id := x.slots[slot].id
		if (s > 0) != holders[id] {
			t.Fatalf("document %d scores %v", id, s)
		}
		if s > 0 && want == 0 {
			want = s
		}
		if s > 0 && s != want {
			t.Fatalf("document %d scores %v, the others %v", id, s, want)
		}
	}
}

// commitByMerge is commit as it was before it kept streams: every posting decoded, merged and encoded again, the
// staged ones sorted by comparison. TestCommitMatchesMerge holds the two to the same bytes.
func commitByMerge(x *bm25) {
	if len(x.pending) == 0 && len(x.dead) == 0 {
		return
	}
	gone := make([]bool, len(x.slots))
	for _, s := range x.dead {
		gone[s] = true
	}
	var pending []staged
	for _, sp := range x.pending {
		if !gone[sp.p.slot] {
			pending = append(pending, sp)
		}
	}
	slices.SortFunc(pending, cmpStaged)
	terms := max(x.dict.size(), len(x.off)-1)
	off := make([]uint32, terms+1)
	var post []byte
	for t := range terms {
		var merged []posting
		var r postingReader
		if t < len(x.off)-1 {
			r, _ = readPostings(x.post[x.off[t]:x.off[t+1]])
		}
		for p, ok := r.decode(); ok; p, ok = r.decode() {
			if !gone[p.slot] {
				merged = append(merged, p)
			}
		}
		for len(pending) > 0 && pending[0].term == int32(t) {
			merged = append(merged, pending[0].p)
			pending = pending[1:]
		}
		slices.SortFunc(merged, func(a, b posting) int { return int(a.slot) - int(b.slot) })
		post = appendPostings(post, merged)
		off[t+1] = uint32(len(post))
	}
	x.off, x.post = off, post
	x.free = append(x.free, x.dead...)
	x.pending, x.dead = nil, nil
}

// TestCommitMatchesMerge runs the same random adds, updates and removals through commit and through
// commitByMerge and compares the postings byte for byte after every commit: batches of new documents only (the
// streams kept and appended to), with removals (merged), and with freed slots reused (out of slot order).
func TestCommitMatchesMerge(t *testing.T) {
	words := []string{"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"}
	rng := rand.New(rand.NewPCG(7, 11))
	doc := func() fieldTerms {
		var ft fieldTerms
		for f := range numFields {
			for range rng.IntN(6) {
				ft[f] = append(ft[f], words[rng.IntN(len(words))]+fmt.Sprint(rng.IntN(3)))
			}
		}
		return ft
	}
	for _, removals := range []bool{false, true} {
		t.Run(fmt.Sprintf("removals=%v", removals), func(t *testing.T) {
			dict := newTermDict()
			fast, slow := newBM25With(defaultBM25, dict), newBM25With(defaultBM25, dict)
			next := int64(1)
			for batch := range 40 {
				for range rng.IntN(30) {
					id := next
					if removals && next > 1 && rng.IntN(3) == 0 {
						id = 1 + rng.Int64N(next-1) // an update: the old version removed, a new slot
					} else {
						next++
					}
					ft := doc()
					fast.add(id, "s", ft)
					slow.add(id, "s", ft)
					if removals && next > 1 && rng.IntN(4) == 0 {
						gone := 1 + rng.Int64N(next-1)
						fast.remove(gone)
						slow.remove(gone)
					}
				}
				fast.commit()
				commitByMerge(slow)
				if !slices.Equal(fast.off, slow.off) || !slices.Equal(fast.post, slow.post) {
					t.Fatalf("batch %d: postings differ (%d and %d bytes)", batch, len(fast.post), len(slow.post))
				}
				if !slices.Equal(fast.free, slow.free) {
					t.Fatalf("batch %d: free slots %v, want %v", batch, fast.free, slow.free)
				}
			}
			if fast.postings() == 0 {
				t.Fatal("no postings: the test indexed nothing")
			}
		})
	}
}
