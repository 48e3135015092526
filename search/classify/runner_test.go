package classify_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/search/classify"
)

// memStore keeps tools and the classification states written, in order.
type memStore struct {
	mu     sync.Mutex
	tools  []persistence.Tool
	states []persistence.ToolClassification
	gone   bool
}

func (m *memStore) ListTools(_ context.Context, f persistence.ListToolsFilter) ([]persistence.Tool, int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []persistence.Tool
	for _, t := range m.tools {
		if f.ServerID == "" || t.SourceServerID == f.ServerID {
			out = append(out, t)
		}
	}
	return out, len(out), nil
}

func (m *memStore) SetToolClassification(_ context.Context, _ int64, c persistence.ToolClassification) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gone {
		return fmt.Errorf("tool: %w", persistence.ErrNotFound)
	}
	m.states = append(m.states, c)
	return nil
}

// answer is a classifier that answers res or err, or panics.
type answer struct {
	res    classify.Result
	err    error
	panics bool
}

func (a answer) Name() string { return "test" }
func (a answer) Classify(context.Context, classify.Tool) (classify.Result, error) {
	if a.panics {
		panic("boom")
	}
	return a.res, a.err
}

func TestRunnerRun(t *testing.T) {
	skill := classify.Result{Assignments: []classify.Assignment{{SkillID: "files", Confidence: 0.9}}, Primary: "files"}
	tests := []struct {
		name      string
		c         answer
		gone      bool
		want      classify.Outcome
		wantErr   bool
		wantFinal string // the last state stored ("" none after CLASSIFYING)
	}{
		{name: "classified", c: answer{res: skill}, want: classify.OutcomeClassified, wantFinal: persistence.ClassificationClassified},
		{name: "fits no skill", c: answer{}, want: classify.OutcomeUnclassified, wantFinal: persistence.ClassificationUnclassified},
		{name: "classifier fails", c: answer{err: errors.New("down")}, want: classify.OutcomeFailed, wantErr: true, wantFinal: persistence.ClassificationUnclassified},
		{name: "classifier panics", c: answer{panics: true}, want: classify.OutcomeFailed, wantErr: true, wantFinal: persistence.ClassificationUnclassified},
		{name: "tool removed", c: answer{res: skill}, gone: true, want: classify.OutcomeGone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &memStore{gone: tt.gone}
			r := &classify.Runner{Classifier: tt.c, Store: st, Timeout: time.Minute, StoreTimeout: time.Minute}
			got, err := r.Run(context.Background(), classify.Ref{ID: 1, Name: "read"})
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Fatalf("Run = %s, %v; want %s, error %v", got, err, tt.want, tt.wantErr)
			}
			if tt.wantFinal == "" {
				if len(st.states) != 0 {
					t.Fatalf("stored %v for a removed tool", st.states)
				}
				return
			}
			if len(st.states) != 2 || st.states[0].State != persistence.ClassificationClassifying || st.states[1].State != tt.wantFinal {
				t.Fatalf("stored states %+v, want CLASSIFYING then %s", st.states, tt.wantFinal)
			}
		})
	}
}

func TestRunnerRunInterrupted(t *testing.T) {
	st := &memStore{}
	r := &classify.Runner{Classifier: answer{}, Store: st, Timeout: time.Minute, StoreTimeout: time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got, err := r.Run(ctx, classify.Ref{ID: 1}); got != classify.OutcomeInterrupted || err != nil {
		t.Fatalf("Run after cancel = %s, %v; want interrupted", got, err)
	}
	if len(st.states) != 1 {
		t.Fatalf("stored %+v, want CLASSIFYING only (resumed at the next start)", st.states)
	}
}

func TestRunnerPending(t *testing.T) {
	st := &memStore{tools: []persistence.Tool{
		{ID: 1, SourceServerID: "s", ClassificationState: persistence.ClassificationDiscovered},
		{ID: 2, SourceServerID: "s", ClassificationState: persistence.ClassificationClassifying},
		{ID: 3, SourceServerID: "s", ClassificationState: persistence.ClassificationUnclassified},
		{ID: 4, SourceServerID: "s", ClassificationState: persistence.ClassificationClassified},
		{ID: 5, SourceServerID: "t", ClassificationState: persistence.ClassificationDiscovered},
	}}
	r := &classify.Runner{Store: st, StoreTimeout: time.Minute}
	queue, failed, err := r.Pending(context.Background(), "s")
	if err != nil || len(queue) != 2 || queue[0].ID != 1 || queue[1].ID != 2 || len(failed) != 1 || failed[0].ID != 3 {
		t.Fatalf("Pending = %+v, %+v, %v; want queue [1 2], failed [3]", queue, failed, err)
	}
}

func TestReportCountsAndLogsTransitionsOnce(t *testing.T) {
	counts := map[string]int{}
	rep := &classify.Report{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Name: "test", Retry: time.Second,
		Count: func(_, outcome string) { counts[outcome]++ }}
	for _, o := range []classify.Outcome{classify.OutcomeFailed, classify.OutcomeFailed, classify.OutcomeClassified, classify.OutcomeGone} {
		rep.Outcome(o, "read", nil, classify.Finished{Known: true}, 0)
	}
	if counts["failed"] != 2 || counts["classified"] != 1 || len(counts) != 2 {
		t.Fatalf("counts %v, want failed 2, classified 1 (gone is not counted)", counts)
	}
}

// A Runner classifies one tool and stores the outcome; the classifier actor runs it on a goroutine per tool.
func ExampleRunner() {
	st := &memStore{}
	r := &classify.Runner{Store: st, Timeout: time.Minute, StoreTimeout: time.Minute,
		Classifier: answer{res: classify.Result{Assignments: []classify.Assignment{{SkillID: "files", Confidence: 0.9}}, Primary: "files"}}}
	outcome, err := r.Run(context.Background(), classify.Ref{ID: 7, Name: "read_file"})
	fmt.Println(outcome, err, st.states[len(st.states)-1].State)
	// Output: classified <nil> CLASSIFIED
}
