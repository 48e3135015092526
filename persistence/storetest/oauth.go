package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// testOAuthFlows: a flow is stored, returned once, and taken once by its own subject only; a flow not yet
// returned is ErrOAuthFlowPending and stays; an expired flow is gone for every step and is deleted by the next
// creation; the per-subject and total bounds refuse; an unknown server is ErrNotFound; flows go with their server.
func testOAuthFlows(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	srv := mustCreate(t, s, "oauthed")
	now := time.Now().UTC().Truncate(time.Millisecond)
	ttl := 10 * time.Minute
	flow := func(state, subject string) persistence.OAuthFlow {
		return persistence.OAuthFlow{State: state, ServerID: srv.ID, Subject: subject,
			Data: []byte(`{"verifier":"v-` + state + `"}`), ExpiresAt: now.Add(ttl)}
	}
	create := func(f persistence.OAuthFlow, perSubject, total int, at time.Time) error {
		t.Helper()
		return s.CreateOAuthFlow(ctx, f, perSubject, total, at)
	}
	if err := create(flow("s1", "token:alice"), 4, 100, now); err != nil {
		t.Fatalf("create: %v", err)
	}
	if err := create(flow("s1", "token:bob"), 4, 100, now); !errors.Is(err, persistence.ErrAlreadyExists) {
		t.Fatalf("a taken state: %v, want ErrAlreadyExists", err)
	}
	unknown := flow("s0", "token:alice")
	unknown.ServerID = "00000000-0000-4000-8000-000000000000"
	if err := create(unknown, 4, 100, now); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("unknown server: %v, want ErrNotFound", err)
	}

	// Not returned yet: the completion is told so and the flow stays; someone else is told nothing.
	if _, err := s.TakeOAuthFlow(ctx, "s1", "token:alice", now); !errors.Is(err, persistence.ErrOAuthFlowPending) {
		t.Fatalf("take before return: %v, want ErrOAuthFlowPending", err)
	}
	if _, err := s.TakeOAuthFlow(ctx, "s1", "token:bob", now); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("another subject's pending flow: %v, want ErrNotFound", err)
	}
	if err := s.ReturnOAuthFlow(ctx, "s1", []byte(`"the-code"`), "https://as.example", "", now); err != nil {
		t.Fatalf("return: %v", err)
	}
	if err := s.ReturnOAuthFlow(ctx, "s1", []byte(`"other-code"`), "", "", now); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("second return: %v, want ErrNotFound", err)
	}
	if _, err := s.TakeOAuthFlow(ctx, "s1", "token:bob", now); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("another subject's flow: %v, want ErrNotFound", err)
	}
	got, err := s.TakeOAuthFlow(ctx, "s1", "token:alice", now)
	if err != nil {
		t.Fatalf("take: %v", err)
	}
	if got.State != "s1" || got.ServerID != srv.ID || got.Subject != "token:alice" || !got.Returned ||
		!jsonEqual(got.Data, []byte(`{"verifier":"v-s1"}`)) || !jsonEqual(got.Code, []byte(`"the-code"`)) || got.Iss != "https://as.example" ||
		!got.ExpiresAt.Equal(now.Add(ttl)) {
		t.Fatalf("taken flow %+v (data %s, code %s)", got, got.Data, got.Code)
	}
	if _, err := s.TakeOAuthFlow(ctx, "s1", "token:alice", now); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("second take: %v, want ErrNotFound", err)
	}

	// An error answer is kept as the flow's error, without a code.
	if err := create(flow("s2", "token:alice"), 4, 100, now); err != nil {
		t.Fatal(err)
	}
	if err := s.ReturnOAuthFlow(ctx, "s2", nil, "", "access_denied: no", now); err != nil {
		t.Fatal(err)
	}
	if got, err := s.TakeOAuthFlow(ctx, "s2", "token:alice", now); err != nil || got.Error != "access_denied: no" || len(got.Code) != 0 {
		t.Fatalf("error answer: %+v, %v", got, err)
	}

	// Expiry: every step refuses an expired flow, and the next creation deletes it.
	if err := create(flow("s3", "token:alice"), 4, 100, now); err != nil {
		t.Fatal(err)
	}
	if err := create(flow("s4", "token:alice"), 4, 100, now); err != nil {
		t.Fatal(err)
	}
	if err := s.ReturnOAuthFlow(ctx, "s4", []byte(`"c"`), "", "", now); err != nil {
		t.Fatal(err)
	}
	late := now.Add(ttl)
	if err := s.ReturnOAuthFlow(ctx, "s3", []byte(`"c"`), "", "", late); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("return of an expired flow: %v, want ErrNotFound", err)
	}
	for _, state := range []string{"s3", "s4"} {
		if _, err := s.TakeOAuthFlow(ctx, state, "token:alice", late); !errors.Is(err, persistence.ErrNotFound) {
			t.Fatalf("take of expired %s: %v, want ErrNotFound", state, err)
		}
	}
	if n, err := s.CountOAuthFlows(ctx, now); err != nil || n != 2 {
		t.Fatalf("pending before expiry: %d, %v; want 2", n, err)
	}
	if n, err := s.CountOAuthFlows(ctx, late); err != nil || n != 0 {
		t.Fatalf("pending after expiry: %d, %v; want 0", n, err)
	}

	// Bounds, counted without the expired flows (deleted by the creation).
	lateFlow := func(state, subject string) persistence.OAuthFlow {
		f := flow(state, subject)
		f.ExpiresAt = late.Add(ttl)
		return f
	}
	for _, st := range []string{"b1", "b2"} {
		if err := create(lateFlow(st, "token:bob"), 2, 3, late); err != nil {
			t.Fatalf("create %s: %v", st, err)
		}
	}
	if err := create(lateFlow("b3", "token:bob"), 2, 3, late); !errors.Is(err, persistence.ErrOAuthFlowLimit) {
		t.Fatalf("past the subject's bound: %v, want ErrOAuthFlowLimit", err)
	}
	if err := create(lateFlow("c1", "token:carol"), 2, 3, late); err != nil {
		t.Fatal(err)
	}
	if err := create(lateFlow("c2", "token:carol"), 2, 3, late); !errors.Is(err, persistence.ErrOAuthFlowLimit) {
		t.Fatalf("past the total bound: %v, want ErrOAuthFlowLimit", err)
	}
	if _, err := s.TakeOAuthFlow(ctx, "s3", "token:alice", now); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("an expired flow survived a creation: %v", err)
	}

	// Flows go with their server.
	if err := s.DeleteServer(ctx, srv.ID); err != nil {
		t.Fatal(err)
	}
	if n, err := s.CountOAuthFlows(ctx, late); err != nil || n != 0 {
		t.Fatalf("flows after their server was deleted: %d, %v", n, err)
	}
}

// testOAuthClients: a registered client is stored per (server, issuer), replaced, deleted, and goes with its
// server.
func testOAuthClients(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	srv := mustCreate(t, s, "registered")
	if _, err := s.GetOAuthClient(ctx, srv.ID, "https://as.example"); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("no client yet: %v", err)
	}
	c := persistence.OAuthClient{ServerID: srv.ID, Issuer: "https://as.example", RedirectURL: "https://agg.example/cb",
		Data: []byte(`{"client_id":"c1"}`)}
	if err := s.PutOAuthClient(ctx, c); err != nil {
		t.Fatal(err)
	}
	c.Data = []byte(`{"client_id":"c2"}`)
	if err := s.PutOAuthClient(ctx, c); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetOAuthClient(ctx, srv.ID, "https://as.example")
	if err != nil || !jsonEqual(got.Data, []byte(`{"client_id":"c2"}`)) || got.RedirectURL != c.RedirectURL || got.ServerID != srv.ID {
		t.Fatalf("client %+v (%s), %v", got, got.Data, err)
	}
	if _, err := s.GetOAuthClient(ctx, srv.ID, "https://other.example"); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("another issuer: %v", err)
	}
	bad := c
	bad.ServerID = "00000000-0000-4000-8000-000000000000"
	if err := s.PutOAuthClient(ctx, bad); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("unknown server: %v", err)
	}
	if err := s.DeleteOAuthClient(ctx, srv.ID, c.Issuer); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteOAuthClient(ctx, srv.ID, c.Issuer); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if err := s.PutOAuthClient(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteServer(ctx, srv.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetOAuthClient(ctx, srv.ID, c.Issuer); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("client after its server was deleted: %v", err)
	}
}
