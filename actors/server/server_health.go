package server

import (
	"context"
	"fmt"
	"time"

	"github.com/mcpgw/aggregator/actors/backend"
	"github.com/mcpgw/aggregator/actors/lifecycle"
	"github.com/mcpgw/aggregator/internal/connconfig"
	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence"
)

// The server actor's health checks: one per interval on a live session (GET health_check_url, or an MCP ping when
// no message succeeded within the interval); two failures degrade the server, three end its session.

func (a *serverActor) scheduleHealth() {
	if a.deps.Config.HealthInterval <= 0 || a.sess == nil {
		return
	}
	gen := a.sess.gen
	a.stopTimer(&a.healthTimer)
	a.healthTimer = time.AfterFunc(a.deps.Config.HealthInterval, func() { a.sys.Root.Send(a.self, &healthTick{gen: gen}) })
}

// onHealthTick runs one health check (BR-006 as READING.md decides): GET health_check_url when configured;
// otherwise healthy without I/O when a message succeeded within the interval, else an MCP ping.
func (a *serverActor) onHealthTick(m *healthTick) {
	if a.sess == nil || a.sess.gen != m.gen || !callable(a.status) || a.healthBusy {
		return
	}
	url := ptrStr(a.rec.HealthCheckURL)
	if url == "" && time.Since(time.Unix(0, a.lastOK.Load())) < a.deps.Config.HealthInterval {
		a.onHealthResult(&healthResult{gen: m.gen, ok: true, counted: true})
		return
	}
	if url != "" {
		if problem := connconfig.PlainHTTPProblem(url, connconfig.AllowsInsecureHTTP(a.rec.ConnectionConfig)); problem != "" {
			a.onHealthResult(&healthResult{gen: m.gen, err: "health_check_url refused: " + problem})
			return
		}
	}
	a.healthBusy = true
	sess, timeout, sys, self := a.sess.session, a.deps.Config.HealthTimeout, a.sys, a.self
	client := backend.HealthClientFor(a.deps.HealthClient, connconfig.AllowsInsecureHTTP(a.rec.ConnectionConfig))
	sec := a.secrets
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		start := time.Now()
		r := &healthResult{gen: m.gen, counted: true}
		if url != "" {
			r.ok, r.counted, r.err = lifecycle.HTTPHealth(ctx, client, url)
		} else if err := sess.Ping(ctx, nil); err != nil {
			r.err = "ping failed: " + err.Error()
		} else {
			r.ok = true
		}
		r.err = sec.Scrub(r.err)
		ms := float64(time.Since(start).Microseconds()) / 1000
		r.responseMs = &ms
		sys.Root.Send(self, r)
	}()
}

func (a *serverActor) onHealthResult(r *healthResult) {
	if a.sess == nil || a.sess.gen != r.gen {
		return
	}
	a.healthBusy = false
	var took time.Duration
	if r.responseMs != nil {
		took = time.Duration(*r.responseMs * float64(time.Millisecond))
	}
	a.deps.Metrics.HealthCheck(a.rec.Name, took, !r.ok && r.counted)
	var step int
	a.failures, step = lifecycle.NextHealth(a.failures, a.status, r.ok, r.counted)
	switch {
	case step == lifecycle.HealthRecovered:
		a.transition(persistence.StatusConnected, "health check success", nil)
	case !r.ok && !r.counted:
		a.log().Warn("health check answered 4xx; check health_check_url", "error", r.err)
	case !r.ok:
		a.lastError = r.err
		a.log().Warn("health check failed", "error", r.err, "consecutive_failures", a.failures)
	}
	var lastErr *string
	if r.err != "" {
		e := r.err
		lastErr = &e
	}
	if fence := a.lease; fence != nil {
		rec := persistence.HealthRecord{ServerID: a.id, CheckedAt: time.Now().UTC(), ResponseMs: r.responseMs,
			ConsecutiveFailures: a.failures, LastError: lastErr, Fence: fence}
		store, check := a.deps.Store, a.writeCheck()
		a.writes.enqueueKeyed("health", func() {
			sctx, cancel := a.storeCtx()
			defer cancel()
			check(store.RecordHealth(sctx, rec), fence, "persist health check")
		})
	}
	switch step {
	case lifecycle.HealthFailed:
		msg := fmt.Sprintf("%d consecutive health check failures: %s", a.failures, r.err)
		a.lastError = msg
		a.cancelPending()
		a.closeSession(false)
		a.deps.Metrics.SessionLost(a.rec.Name, metrics.CauseHealthChecks)
		a.transition(persistence.StatusError, "3 health failures", &msg)
		a.resetBackoffIfStable()
		a.scheduleRetry()
		return
	case lifecycle.HealthDegraded:
		a.transition(persistence.StatusDegraded, "2 health failures", nil)
	}
	a.scheduleHealth()
}
