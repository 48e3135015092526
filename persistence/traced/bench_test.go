package traced_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/mcpgw/aggregator/internal/telemetry"
	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/traced"
)

// discard is an exporter that drops what it is given.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// nopStore answers a health record at once, so the benchmark measures the wrapper alone.
type nopStore struct{ persistence.Store }

func (nopStore) Kind() string                                                 { return "postgres" }
func (nopStore) RecordHealth(context.Context, persistence.HealthRecord) error { return nil }

// BenchmarkStoreWrite is the tracing cost of one store write (RecordHealth) on a store that does no work: off is
// the plain store (the daemon does not wrap it); traced, within a request's sampled span (a child span exported
// in batches to an exporter that drops it), within an unsampled one (1 % sampling, most calls), and outside any
// trace (a root span, sampled at 100 %). The real write costs what the database takes on top.
func BenchmarkStoreWrite(b *testing.B) {
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	b.Cleanup(func() { otel.SetTracerProvider(prevTP); otel.SetTextMapPropagator(prevProp) })
	tp, err := telemetry.NewProvider(context.Background(), discard{}, telemetry.Process{Version: "bench"},
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	rec := persistence.HealthRecord{ServerID: "01a21c90-5e5c-74b4-9872-bd24598a030a", CheckedAt: time.Now()}
	plain := persistence.Store(nopStore{})
	wrapped := persistence.Store(traced.Wrap(nopStore{}))

	otel.SetTracerProvider(noop.NewTracerProvider())
	b.Run("off", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = plain.RecordHealth(context.Background(), rec)
		}
	})
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(telemetry.Propagator())
	sampled, span := tp.Tracer("bench").Start(context.Background(), "request")
	defer span.End()
	unsampledTP := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	unsampled, uspan := unsampledTP.Tracer("bench").Start(context.Background(), "request")
	defer uspan.End()
	for _, c := range []struct {
		name string
		ctx  context.Context
	}{{"in-sampled-trace", sampled}, {"in-unsampled-trace", unsampled}, {"root-sampled", context.Background()}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = wrapped.RecordHealth(c.ctx, rec)
			}
		})
	}
}

// BenchmarkSQLiteWrite is the same write on the embedded store (a file in a temp dir): plain, and traced within a
// sampled request, for the span's share of a real write.
func BenchmarkSQLiteWrite(b *testing.B) {
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	b.Cleanup(func() { otel.SetTracerProvider(prevTP); otel.SetTextMapPropagator(prevProp) })
	tp, err := telemetry.NewProvider(context.Background(), discard{}, telemetry.Process{Version: "bench"},
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	otel.SetTracerProvider(tp)
	inner := openSQLite(b)
	srv := newServer("bench")
	if err := inner.CreateServer(context.Background(), srv, 0); err != nil {
		b.Fatal(err)
	}
	rec := persistence.HealthRecord{ServerID: srv.ID, CheckedAt: time.Now()}
	ctx, span := tp.Tracer("bench").Start(context.Background(), "request")
	defer span.End()
	for _, c := range []struct {
		name  string
		store persistence.Store
	}{{"off", inner}, {"traced", traced.Wrap(inner)}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.store.RecordHealth(ctx, rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
