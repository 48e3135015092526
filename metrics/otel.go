package metrics

import (
	"fmt"

	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// ActorMeterProvider is an OpenTelemetry meter provider whose instruments (protoactor's mailbox length, message
// processing time, restarts, dead letters, futures ...) are exported into this registry, so one /metrics shows
// them next to ours. protoactor reads its meter from OpenTelemetry's global provider: the daemon must also pass
// this provider to otel.SetMeterProvider, once, at start.
func (m *Metrics) ActorMeterProvider() (metric.MeterProvider, error) {
	exp, err := otelprom.New(otelprom.WithRegisterer(m.Registry), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		return nil, fmt.Errorf("otel prometheus exporter: %w", err)
	}
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)), nil
}
