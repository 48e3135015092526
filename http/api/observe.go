package api

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/mcpgw/aggregator/actors"
	"github.com/mcpgw/aggregator/http/apierror"
	"github.com/mcpgw/aggregator/metrics"
	"github.com/mcpgw/aggregator/persistence"
)

// The console's live figures and actor view (issue 29), from the daemon's own counters: no Prometheus needed.
//
//   - GET /servers/{id}/timeseries: one server's calls of the last minutes (metrics.Recorder: calls/s, errors,
//     p50/p95 latency per step) and its state changes over the same window (its history rows). Client scope like
//     the other server reads; a client token bound to profiles sees only its profiles' servers (another one is
//     404, as if it did not exist).
//   - GET /timeseries: the same figures for every server the caller may see, without the state changes.
//   - GET /actors: the node's actor tree and where each server is served (actors.System.Actors). Admin only
//     (auth.Policy): actor ids carry every server's id.
//
// The figures are those of the node that answers: a call is counted where its server's actor runs (on a cluster,
// the owner). The actor view says which node owns each server.

// actorInspector is what GET /actors asks of the actor system (actors.System).
type actorInspector interface {
	Actors(ctx context.Context) (actors.ActorView, error)
}

// Answer shapes (named, so that the OpenAPI document describes them).
type (
	seriesPointView struct {
		// T is when the step began; Seconds how much of it has passed.
		T              time.Time      `json:"t"`
		Seconds        float64        `json:"seconds"`
		Calls          int            `json:"calls"`
		CallsPerSecond float64        `json:"calls_per_second"`
		Errors         int            `json:"errors"`
		ToolErrors     int            `json:"tool_errors"`
		Cancelled      int            `json:"cancelled"`
		Outcomes       map[string]int `json:"outcomes,omitempty"`
		// P50Ms and P95Ms are null in a step where no call was answered.
		P50Ms *float64 `json:"p50_ms"`
		P95Ms *float64 `json:"p95_ms"`
	}
	stateChangeView struct {
		T     time.Time `json:"t"`
		State string    `json:"state"`
	}
	serverSeriesView struct {
		ServerID string            `json:"server_id"`
		Name     string            `json:"name"`
		Status   string            `json:"status"`
		Points   []seriesPointView `json:"points"`
		// InitialState is the server's state when the window began ("" when its history does not say), and States
		// its changes within the window, oldest first (GET /servers/{id}/timeseries only).
		InitialState string            `json:"initial_state,omitempty"`
		States       []stateChangeView `json:"states,omitempty"`
	}
	timeseriesView struct {
		// Node is the node whose counters these are ("" on a single node).
		Node          string             `json:"node"`
		StepSeconds   float64            `json:"step_seconds"`
		WindowSeconds float64            `json:"window_seconds"`
		Servers       []serverSeriesView `json:"servers"`
	}
)

// historyForWindow bounds the history rows read for a server's state changes.
const historyForWindow = 200

func (s *server) routeObserve(g fiber.Router) {
	g.Get("/servers/:id/timeseries", s.serverTimeseries)
	g.Get("/timeseries", s.allTimeseries)
	g.Get("/actors", s.actorsView)
}

func (s *server) recorder() (*metrics.Recorder, error) {
	if s.metrics == nil || s.metrics.Series == nil {
		return nil, &apierror.Error{Status: fiber.StatusServiceUnavailable, Code: apierror.CodeServiceUnavailable,
			Detail: "The daemon records no metrics"}
	}
	return s.metrics.Series, nil
}

// visible is the set of servers a client token bound to profiles may see (nil: every server).
func (s *server) visible(c *fiber.Ctx) (map[string]bool, error) {
	sc, err := s.scopeOf(c, "")
	if err != nil {
		return nil, err
	}
	return s.control.Routes().ServersIn(sc), nil
}

func (s *server) node() string {
	if s.cluster == nil {
		return ""
	}
	node, _, _ := s.cluster()
	return node
}

func seriesOf(rec *metrics.Recorder, srv persistence.Server) serverSeriesView {
	pts := rec.Series(srv.Name)
	out := serverSeriesView{ServerID: srv.ID, Name: srv.Name, Status: srv.Status, Points: make([]seriesPointView, 0, len(pts))}
	for _, p := range pts {
		v := seriesPointView{T: p.Start.UTC(), Seconds: p.Seconds, Calls: p.Calls, CallsPerSecond: p.CallsPerSecond(),
			Errors: p.Errors, ToolErrors: p.ToolErrors, Cancelled: p.Cancelled, Outcomes: p.Outcomes}
		if p.HasLatency {
			p50, p95 := ms(p.P50), ms(p.P95)
			v.P50Ms, v.P95Ms = &p50, &p95
		}
		out.Points = append(out.Points, v)
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// GET /servers/{id}/timeseries.
func (s *server) serverTimeseries(c *fiber.Ctx) error {
	id, err := serverID(c)
	if err != nil {
		return err
	}
	rec, err := s.recorder()
	if err != nil {
		return err
	}
	if in, err := s.visible(c); err != nil {
		return err
	} else if in != nil && !in[id] {
		return apierror.ServerNotFound(c.Params("id"))
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	srv, err := s.storedServer(ctx, c, id)
	if err != nil {
		return err
	}
	out := seriesOf(rec, srv)
	if len(out.Points) > 0 {
		from := out.Points[0].T
		events, err := s.store.ListHistory(ctx, id, historyForWindow)
		if err != nil {
			return serverFailed(c, "list history of", id, err)
		}
		out.States = []stateChangeView{}
		for _, e := range events { // newest first
			if e.Timestamp.Before(from) {
				out.InitialState = e.EventType
				break
			}
			out.States = append(out.States, stateChangeView{T: e.Timestamp.UTC(), State: e.EventType})
		}
		slices.Reverse(out.States)
	}
	return c.JSON(timeseriesView{Node: s.node(), StepSeconds: rec.Step().Seconds(),
		WindowSeconds: rec.Step().Seconds() * float64(rec.Points()), Servers: []serverSeriesView{out}})
}

// GET /timeseries: every server the caller may see, by name.
func (s *server) allTimeseries(c *fiber.Ctx) error {
	rec, err := s.recorder()
	if err != nil {
		return err
	}
	in, err := s.visible(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	servers, _, err := s.store.ListServers(ctx, persistence.ListServersFilter{})
	if err != nil {
		return mapError(fmt.Errorf("list servers: %w", err), subject{})
	}
	out := timeseriesView{Node: s.node(), StepSeconds: rec.Step().Seconds(), WindowSeconds: rec.Step().Seconds() * float64(rec.Points()),
		Servers: []serverSeriesView{}}
	for _, srv := range servers {
		if in != nil && !in[srv.ID] {
			continue
		}
		out.Servers = append(out.Servers, seriesOf(rec, srv))
	}
	return c.JSON(out)
}

// GET /actors (admin).
func (s *server) actorsView(c *fiber.Ctx) error {
	ai, ok := s.control.(actorInspector)
	if !ok {
		return &apierror.Error{Status: fiber.StatusServiceUnavailable, Code: apierror.CodeServiceUnavailable, Detail: "The actor view is not available"}
	}
	ctx, cancel := s.opContext(c)
	defer cancel()
	v, err := ai.Actors(ctx)
	if err != nil {
		return mapError(fmt.Errorf("actor view: %w", err), subject{})
	}
	return c.JSON(v)
}
