package actors_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/sqlite"
	pb "github.com/mcpgw/aggregator/proto/aggregatorpb"
	"github.com/mcpgw/aggregator/search/classify"
)

// syntheticTools are n tool definitions whose descriptions read like real tools of the taxonomy's skills.
func syntheticTools(n int) []persistence.ToolDef {
	tax := classify.DefaultTaxonomy()
	verbs := []string{"List", "Get", "Create", "Update", "Delete", "Search", "Summarise", "Export"}
	defs := make([]persistence.ToolDef, n)
	for i := range defs {
		s := tax.Skills[i%len(tax.Skills)]
		v := verbs[(i/len(tax.Skills))%len(verbs)]
		defs[i] = persistence.ToolDef{
			OriginalName: fmt.Sprintf("%s_%s_%04d", v, s.ID, i),
			Description:  fmt.Sprintf("%s %s items. %s", v, s.Name, s.Description),
			InputSchema: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string","description":"what to look for"},` +
				`"limit":{"type":"integer","description":"how many results"}}}`),
		}
	}
	return defs
}

// BenchmarkClassify measures the classifier actor end to end with the built-in classifier: a server's tools are
// announced (as discovery does) and the batch ends when ClassificationDone has covered every tool: the ids looked
// up, each tool set CLASSIFYING, classified, stored and reported, 5 at a time. SLA (BR-004): 50 tools in 60 s.
//
//	go test -run '^$' -bench BenchmarkClassify -benchtime 3x ./actors/
func BenchmarkClassify(b *testing.B) {
	for _, n := range []int{50, 1000} {
		b.Run(fmt.Sprintf("tools=%d", n), func(b *testing.B) {
			st, err := sqlite.Open(context.Background(), b.TempDir()+"/agg.db")
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			sys, err := actors.Start(context.Background(), actors.Deps{Store: st, Config: actors.DefaultConfig(), Classifier: builtinClassifier(b), Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				_ = sys.Shutdown(ctx)
			}()
			defs := syntheticTools(n)
			var total time.Duration
			classified := 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				srv := persistence.Server{Name: fmt.Sprintf("bench-%d", i), TransportType: persistence.TransportSTDIO, ConnectionConfig: json.RawMessage(`{"command":"true"}`)}
				if err := st.CreateServer(context.Background(), &srv, 0); err != nil {
					b.Fatal(err)
				}
				diff, err := st.ReplaceServerTools(context.Background(), srv.ID, defs, nil)
				if err != nil {
					b.Fatal(err)
				}
				var mu sync.Mutex
				seen := map[int64]bool{}
				done := make(chan struct{})
				sub := sys.ActorSystem().EventStream.Subscribe(func(evt any) {
					e, ok := evt.(*pb.ClassificationDone)
					if !ok || e.ServerId != srv.ID {
						return
					}
					mu.Lock()
					defer mu.Unlock()
					for _, id := range e.ToolIds {
						seen[id] = true
					}
					if len(seen) == n {
						close(done)
					}
				})
				b.StartTimer()
				start := time.Now()
				sys.ActorSystem().EventStream.Publish(&pb.ToolsChanged{ServerId: srv.ID, ServerName: srv.Name, Added: diff.Added, Total: int32(diff.Total)})
				select {
				case <-done:
				case <-time.After(60 * time.Second):
					b.Fatalf("%d tools not classified within the 60 s SLA", n)
				}
				total += time.Since(start)
				b.StopTimer()
				sys.ActorSystem().EventStream.Unsubscribe(sub)
				c, _ := st.CountTools(context.Background(), srv.ID)
				classified += c.Classified
				b.StartTimer()
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s/batch")
			b.ReportMetric(float64(n*b.N)/total.Seconds(), "tools/s")
			b.ReportMetric(float64(classified)/float64(n*b.N), "classified/tool")
		})
	}
}
