package search

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/search/embed"
)

// benchWords is the vocabulary of synthetic tools: generic words of tool descriptions.
var benchWords = strings.Fields(`get list create update delete search find read write fetch send post upload
download convert generate analyze summarize extract parse validate format render export import sync merge split
file folder document page sheet table row column chart graph image photo video audio music track playlist user
account team project issue ticket task comment message email calendar event meeting contact note memory record
repository branch commit pull request build deploy container cluster node service server database query index
schema model vector embedding token price stock market crypto weather forecast location address route map place
station train flight hotel ticket booking order payment invoice customer product inventory report metric log
trace alert incident status health config secret key permission role group channel thread post article paper
news feed topic trend rank score game player match character recipe meal ingredient translation language text
word sentence summary title tag label category date time timezone currency unit number random calculator`)

// syntheticDocs makes n tools over servers of perServer tools each, deterministically.
func syntheticDocs(n, perServer int) []Doc {
	r := rand.New(rand.NewPCG(1, 2))
	w := func() string { return benchWords[r.IntN(len(benchWords))] }
	docs := make([]Doc, n)
	for i := range docs {
		server := fmt.Sprintf("srv-%03d", i/perServer)
		tool := fmt.Sprintf("%s_%s_%s", w(), w(), w())
		var desc strings.Builder
		for k := range 12 + r.IntN(20) {
			if k > 0 {
				desc.WriteByte(' ')
			}
			desc.WriteString(w())
		}
		schema := fmt.Sprintf(`{"type":"object","properties":{"%s":{"type":"string","description":"the %s %s"},`+
			`"%s_id":{"type":"integer","description":"%s of the %s"}},"required":["%s"]}`,
			w(), w(), w(), w(), w(), w(), w())
		docs[i] = Doc{ID: int64(i + 1), ServerID: server, Name: server + "." + tool, OriginalName: tool,
			Description: desc.String(), InputSchema: []byte(schema)}
	}
	return docs
}

// syntheticQueries are requests of 3 to 25 words, like the fixture's.
func syntheticQueries(n int) []string {
	r := rand.New(rand.NewPCG(3, 4))
	out := make([]string, n)
	for i := range out {
		var q strings.Builder
		q.WriteString("please help me")
		for range 3 + r.IntN(22) {
			q.WriteString(" " + benchWords[r.IntN(len(benchWords))])
		}
		out[i] = q.String()
	}
	return out
}

// BenchmarkSearch10k measures one search over 10,000 tools on 100 servers and reports the 95th percentile latency
// and the CPU time per search (the machine may be shared). "hybrid" is the full path: query embedding, BM25F over
// tools and servers, an exact scan of the built-in embedder's vectors (memIndex, standing in for the in-process
// index) and fusion; "lexical" is the engine without a vector side, i.e. the engine's own share.
func BenchmarkSearch10k(b *testing.B) {
	ctx := context.Background()
	docs := syntheticDocs(10000, 100)
	queries := syntheticQueries(512)
	for _, bc := range []struct {
		name string
		emb  embed.Embedder
	}{{"hybrid", embed.NewHashed(0)}, {"lexical", nil}} {
		b.Run(bc.name, func(b *testing.B) {
			var idx VectorIndex
			if bc.emb != nil {
				idx = newMemIndex()
			}
			e, err := New(bc.emb, idx, Options{})
			if err != nil {
				b.Fatal(err)
			}
			if err := e.Upsert(ctx, docs); err != nil {
				b.Fatal(err)
			}
			lat := make([]time.Duration, 0, 1024)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			for i := 0; b.Loop(); i++ {
				start := time.Now()
				if _, err := e.Search(ctx, Query{Text: queries[i%len(queries)], Limit: 10}); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			cpu := processCPU() - cpu0
			slices.Sort(lat)
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, "p95-ms")
				if cpu > 0 {
					b.ReportMetric(float64(cpu.Microseconds())/1000/float64(len(lat)), "cpu-ms/op")
				}
			}
		})
	}
}

// BenchmarkIndex measures indexing throughput (analysis, BM25F, server documents, built-in embedding, vector
// upsert) in batches of one server's 100 tools, and reports tools per second.
func BenchmarkIndex(b *testing.B) {
	ctx := context.Background()
	docs := syntheticDocs(10000, 100)
	b.ReportAllocs()
	b.ResetTimer()
	var tools int
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		e, err := New(embed.NewHashed(0), newMemIndex(), Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		cpu0 := processCPU()
		for start := 0; start < len(docs); start += 100 {
			if err := e.Upsert(ctx, docs[start:start+100]); err != nil {
				b.Fatal(err)
			}
		}
		cpu += processCPU() - cpu0
		tools += len(docs)
	}
	b.ReportMetric(float64(tools)/b.Elapsed().Seconds(), "tools/s")
	if cpu > 0 {
		b.ReportMetric(float64(tools)/cpu.Seconds(), "tools/cpu-s")
	}
}
