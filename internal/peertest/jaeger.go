package peertest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/internal/syncbuf"
)

// Jaeger is a Jaeger all-in-one process (Jaeger v2, `make jaeger`) a test started: an OTLP/HTTP receiver and the
// query API on free loopback ports, spans kept in memory.
type Jaeger struct {
	// OTLP is the OTLP/HTTP endpoint (http://127.0.0.1:port), what OTEL_EXPORTER_OTLP_ENDPOINT names.
	OTLP string
	// Query is the query service's root (http://127.0.0.1:port): /api/traces/{id}.
	Query string
}

// jaegerConfig is the collector configuration of the test's Jaeger: the OTLP/HTTP receiver, memory storage and
// the query extension, no metrics listener.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 10000
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`

// JaegerBinary finds the jaeger program: on PATH, or where `make jaeger` puts it ($(go env GOPATH)/bin). Missing,
// the test skips (fails under CI=true).
func JaegerBinary(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("jaeger"); err == nil {
		return p
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
			if p := filepath.Join(dir, "bin", "jaeger"); isExecutable(p) {
				return p
			}
		}
	}
	msg := "jaeger is not installed: run `make jaeger` (builds github.com/jaegertracing/jaeger/cmd/jaeger)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// StartJaeger runs Jaeger on free loopback ports until the test ends and waits until its query API answers.
func StartJaeger(t testing.TB) *Jaeger {
	t.Helper()
	bin := JaegerBinary(t)
	query, grpc, otlp := FreePort(t), FreePort(t), FreePort(t)
	cfg := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(jaegerConfig, query, grpc, otlp)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", cfg)
	logs := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = nil, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start jaeger: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	j := &Jaeger{OTLP: fmt.Sprintf("http://127.0.0.1:%d", otlp), Query: fmt.Sprintf("http://127.0.0.1:%d", query)}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(j.Query + "/api/services")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return j
			}
		}
		select {
		case <-exited:
			t.Fatalf("jaeger exited: %s", logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaeger's query API did not answer within 60 s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// JaegerTrace is a trace as Jaeger's query API returns it (the parts the tests read).
type JaegerTrace struct {
	TraceID string       `json:"traceID"`
	Spans   []JaegerSpan `json:"spans"`
	// Processes describes the process of each span, by JaegerSpan.ProcessID.
	Processes map[string]struct {
		ServiceName string      `json:"serviceName"`
		Tags        []JaegerTag `json:"tags"`
	} `json:"processes"`
}

// JaegerSpan is one span of a JaegerTrace.
type JaegerSpan struct {
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		SpanID  string `json:"spanID"`
		TraceID string `json:"traceID"`
	} `json:"references"`
	Tags      []JaegerTag `json:"tags"`
	ProcessID string      `json:"processID"`
}

// JaegerTag is a span's or a process's attribute.
type JaegerTag struct {
	Key   string `json:"key"`
	Value any    `json:"value"`
}

// Tag is the value of the span's attribute key, as text ("" when absent).
func (s JaegerSpan) Tag(key string) string { return tag(s.Tags, key) }

// Parent is the span id of the span's parent ("" for a root).
func (s JaegerSpan) Parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// ServiceName is the service.name of the span's process.
func (tr JaegerTrace) ServiceName(s JaegerSpan) string { return tr.Processes[s.ProcessID].ServiceName }

// ProcessTag is the value of the attribute key of the span's process (its resource).
func (tr JaegerTrace) ProcessTag(s JaegerSpan, key string) string {
	return tag(tr.Processes[s.ProcessID].Tags, key)
}

func tag(tags []JaegerTag, key string) string {
	for _, t := range tags {
		if t.Key == key {
			return fmt.Sprint(t.Value)
		}
	}
	return ""
}

// Trace reads trace id from Jaeger, waiting up to within until it holds at least minSpans spans (exports are
// batched); it returns what it has then.
func (j *Jaeger) Trace(t testing.TB, id string, minSpans int, within time.Duration) JaegerTrace {
	t.Helper()
	deadline := time.Now().Add(within)
	var last JaegerTrace
	for {
		var body struct {
			Data []JaegerTrace `json:"data"`
		}
		resp, err := http.Get(j.Query + "/api/traces/" + id)
		if err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if len(body.Data) > 0 {
				last = body.Data[0]
				if len(body.Data) == 1 && len(last.Spans) >= minSpans {
					return last
				}
			}
		}
		if time.Now().After(deadline) {
			return last
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Descends reports whether s is below ancestor in the trace: ancestor is its parent, or its parent's, and so on.
func (tr JaegerTrace) Descends(s, ancestor JaegerSpan) bool {
	byID := make(map[string]JaegerSpan, len(tr.Spans))
	for _, x := range tr.Spans {
		byID[x.SpanID] = x
	}
	for p := s.Parent(); p != ""; {
		if p == ancestor.SpanID {
			return true
		}
		x, ok := byID[p]
		if !ok {
			return false
		}
		p = x.Parent()
	}
	return false
}
