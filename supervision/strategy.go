package supervision

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// RestartHook is told about every restart a Strategy schedules (for metrics); kind names the child's kind.
type RestartHook func(child *actor.PID, failures int, delay time.Duration, reason any)

// Strategy is a one-for-one protoactor SupervisorStrategy: a failed child is restarted on its own after an
// exponential backoff with jitter; siblings never notice. A child that ran for ResetAfter without failing starts
// again from the first delay. Children are never given up on: a crash loop just waits Backoff.Max between tries.
type Strategy struct {
	Backoff    Backoff
	ResetAfter time.Duration
	Logger     *slog.Logger
	OnRestart  RestartHook
}

var _ actor.SupervisorStrategy = (*Strategy)(nil)

// NewStrategy returns a Strategy with the given backoff, resetting after a quiet minute.
func NewStrategy(b Backoff, logger *slog.Logger, hook RestartHook) *Strategy {
	if logger == nil {
		logger = slog.Default()
	}
	return &Strategy{Backoff: b, ResetAfter: time.Minute, Logger: logger, OnRestart: hook}
}

// HandleFailure implements actor.SupervisorStrategy.
func (s *Strategy) HandleFailure(system *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, rs *actor.RestartStatistics, reason any, message any) {
	if rs.NumberOfFailures(s.ResetAfter) == 0 {
		rs.Reset()
	}
	rs.Fail()
	n := rs.FailureCount()
	delay := s.Backoff.Delay(n, nil)
	s.Logger.Warn("actor crashed; restarting after backoff",
		"actor", child.Id, "failures", n, "delay", delay.String(), "reason", fmt.Sprint(reason))
	if s.OnRestart != nil {
		s.OnRestart(child, n, delay, reason)
	}
	time.AfterFunc(delay, func() {
		system.EventStream.Publish(&actor.SupervisorEvent{Child: child, Reason: reason, Directive: actor.RestartDirective})
		sup.RestartChildren(child)
	})
}
