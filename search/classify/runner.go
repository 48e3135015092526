package classify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// Store is what a Runner reads and writes of the store: the stored tools and their classification state.
// persistence.Store satisfies it.
type Store interface {
	ListTools(ctx context.Context, f persistence.ListToolsFilter) ([]persistence.Tool, int, error)
	SetToolClassification(ctx context.Context, id int64, c persistence.ToolClassification) error
}

// Runner does the classifier actor's work, one tool at a time: it moves a tool through DISCOVERED -> CLASSIFYING
// -> CLASSIFIED | UNCLASSIFIED in the store around one answer of the Classifier (Run), and finds the stored tools
// that wait for classification (Pending). It holds no state: the actor decides what runs when (Queue) and runs
// each Run on a goroutine of its own.
type Runner struct {
	Classifier Classifier
	Store      Store
	// Timeout bounds one classification; StoreTimeout one store operation.
	Timeout, StoreTimeout time.Duration
}

// RefOf is the classifier's reference to a tool row: the text it is classified by, and the skills it keeps while
// it is being classified.
func RefOf(t *persistence.Tool) Ref {
	return Ref{ID: t.ID, Server: t.SourceServerID, Name: t.Name, Description: t.Description,
		InputSchema: t.InputSchema, SkillIDs: t.SkillIDs, PrimarySkillID: t.PrimarySkillID}
}

// Pending is the stored tools of one server (all servers: "") that wait for classification: new ones and those
// whose classification was interrupted (queue), and the UNCLASSIFIED ones, which may have failed before a restart
// (failed: they wait for the retry like failed ones).
func (r *Runner) Pending(ctx context.Context, serverID string) (queue, failed []Ref, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.StoreTimeout)
	defer cancel()
	tools, _, err := r.Store.ListTools(ctx, persistence.ListToolsFilter{ServerID: serverID})
	if err != nil && !errors.Is(err, persistence.ErrNotFound) {
		return nil, nil, fmt.Errorf("list stored tools: %w", err)
	}
	for i := range tools {
		t := &tools[i]
		switch t.ClassificationState {
		case persistence.ClassificationDiscovered, persistence.ClassificationClassifying:
			queue = append(queue, RefOf(t))
		case persistence.ClassificationUnclassified:
			failed = append(failed, RefOf(t))
		}
	}
	return queue, failed, nil
}

// Run classifies one tool and stores the outcome; err is the classifier's or the store's failure (outcome
// OutcomeFailed). Cancelling ctx interrupts it (OutcomeInterrupted: the tool stays CLASSIFYING, resumed at the
// next start). A panic of the classifier is a failure.
func (r *Runner) Run(ctx context.Context, ref Ref) (outcome Outcome, err error) {
	defer func() {
		if p := recover(); p != nil {
			outcome, err = OutcomeFailed, fmt.Errorf("classifier panicked: %v", p)
			_ = r.setState(ref.ID, persistence.ToolClassification{State: persistence.ClassificationUnclassified})
		}
	}()
	// While it is being classified the tool keeps the skills it had (a changed tool is reclassified).
	if err := r.setState(ref.ID, persistence.ToolClassification{State: persistence.ClassificationClassifying,
		SkillIDs: ref.SkillIDs, PrimarySkillID: ref.PrimarySkillID}); err != nil {
		if errors.Is(err, persistence.ErrNotFound) {
			return OutcomeGone, nil
		}
		return OutcomeFailed, fmt.Errorf("store CLASSIFYING: %w", err)
	}
	cctx, ccancel := context.WithTimeout(ctx, r.Timeout)
	res, cerr := r.Classifier.Classify(cctx, ref.Tool())
	ccancel()
	if ctx.Err() != nil {
		return OutcomeInterrupted, nil
	}
	c := persistence.ToolClassification{State: persistence.ClassificationUnclassified}
	outcome = OutcomeUnclassified
	switch {
	case cerr != nil:
		outcome = OutcomeFailed
	case len(res.Assignments) > 0:
		outcome = OutcomeClassified
		primary := res.Primary
		c = persistence.ToolClassification{State: persistence.ClassificationClassified, SkillIDs: res.SkillIDs(), PrimarySkillID: &primary}
	}
	if err := r.setState(ref.ID, c); err != nil {
		if errors.Is(err, persistence.ErrNotFound) {
			return OutcomeGone, nil
		}
		return OutcomeFailed, fmt.Errorf("store %s: %w", c.State, err)
	}
	return outcome, cerr
}

// setState writes a tool's classification within StoreTimeout; it does not depend on the run's context, so that an
// interrupted or panicked run still records its state.
func (r *Runner) setState(id int64, c persistence.ToolClassification) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.StoreTimeout)
	defer cancel()
	return r.Store.SetToolClassification(ctx, id, c)
}

// Report tells the operator about the classifier's answers: every outcome is counted, and a change between
// answering and failing is logged once, not once per tool. Not safe for concurrent use (the actor owns it).
type Report struct {
	Logger *slog.Logger
	Name   string        // the classifier's name
	Retry  time.Duration // the retry interval, named in the warning
	Count  func(classifier, outcome string)
	// failing: the last answer of the classifier was a failure.
	failing bool
}

// Outcome reports one finished classification of tool (err: its failure); fin is what the queue made of it and
// failed the tools failed after it.
func (r *Report) Outcome(o Outcome, tool string, err error, fin Finished, failed int) {
	switch o {
	case OutcomeClassified, OutcomeUnclassified:
		r.Count(r.Name, string(o))
		if r.failing {
			r.failing = false
			r.Logger.Info("classifier answers again", "classifier", r.Name, "failed_tools", failed+fin.Recovered)
		}
		if fin.Recovered > 0 {
			// The classifier recovered: every tool that failed is classified again (EC-009).
			r.Logger.Info("classifier recovered: retrying failed tools", "classifier", r.Name, "tools", fin.Recovered)
		}
	case OutcomeFailed:
		r.Count(r.Name, string(OutcomeFailed))
		if !r.failing {
			r.failing = true
			r.Logger.Warn("tool classification failed; the tool stays unclassified and searchable and is retried when the classifier recovers",
				"classifier", r.Name, "tool", tool, "error", err, "retry_interval", r.Retry.String())
		} else {
			r.Logger.Debug("tool classification failed", "classifier", r.Name, "tool", tool, "error", err)
		}
	}
}
