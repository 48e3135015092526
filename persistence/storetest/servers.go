package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpgw/aggregator/persistence"
)

func testPingAndKind(t *testing.T, s persistence.Store) {
	if err := s.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if k := s.Kind(); k != "postgres" && k != "sqlite" {
		t.Errorf("Kind() = %q, want postgres or sqlite", k)
	}
}

func testCreateAndGetServer(t *testing.T, s persistence.Store) {
	// A time in another zone with nanoseconds: the store must give it back in UTC, truncated to microseconds.
	zoned := time.Date(2025, 1, 8, 11, 0, 0, 123456789, time.FixedZone("CET", 3600))
	explicitID := strings.ToUpper(uuid.NewString()) // any UUID spelling; stored canonical

	tests := []struct {
		name string
		in   persistence.Server
	}{
		{"minimal", *newServer("minimal")},
		{"registration fields", persistence.Server{
			Name:             "github-mcp",
			Description:      ptr("GitHub tools"),
			TransportType:    persistence.TransportSSE,
			ConnectionConfig: json.RawMessage(`{"url":"https://example.test/sse","headers":{"Authorization":"Bearer ${TOKEN}"}}`),
			HealthCheckURL:   ptr("https://example.test/health"),
			AutoConnect:      true,
		}},
		{"every field", persistence.Server{
			ID:                  explicitID,
			Name:                "everything",
			Description:         ptr(""),
			TransportType:       persistence.TransportHTTP,
			ConnectionConfig:    json.RawMessage(`{"base_url":"http://127.0.0.1:9000","n":1.5,"list":[1,"a",null,true]}`),
			Status:              persistence.StatusConnected,
			ErrorMessage:        ptr("previous failure"),
			ToolCount:           7,
			LastHealthCheck:     ptr(zoned),
			HealthResponseMs:    ptr(12.25),
			ConsecutiveFailures: 2,
			ConnectedAt:         ptr(zoned.Add(-time.Hour)),
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			in := tc.in
			before := clock()
			if err := s.CreateServer(ctx, &in, 0); err != nil {
				t.Fatalf("CreateServer: %v", err)
			}
			after := clock()

			u, err := uuid.Parse(in.ID)
			if err != nil {
				t.Fatalf("filled ID %q is not a UUID: %v", in.ID, err)
			}
			if in.ID != u.String() {
				t.Errorf("ID = %q, want canonical %q", in.ID, u.String())
			}
			if tc.in.ID != "" && !strings.EqualFold(in.ID, tc.in.ID) {
				t.Errorf("ID = %q, want the given %q", in.ID, tc.in.ID)
			}
			wantStatus := tc.in.Status
			if wantStatus == "" {
				wantStatus = persistence.StatusDisconnected
			}
			if in.Status != wantStatus {
				t.Errorf("Status = %q, want %q", in.Status, wantStatus)
			}
			between(t, "RegisteredAt", in.RegisteredAt, before, after)
			if !in.UpdatedAt.Equal(in.RegisteredAt) {
				t.Errorf("UpdatedAt %v != RegisteredAt %v on creation", in.UpdatedAt, in.RegisteredAt)
			}
			requireUTC(t, "created server", &in.RegisteredAt, &in.UpdatedAt, in.LastHealthCheck, in.ConnectedAt)
			if tc.in.LastHealthCheck != nil && !in.LastHealthCheck.Equal(storedTime(*tc.in.LastHealthCheck)) {
				t.Errorf("LastHealthCheck = %v, want %v", in.LastHealthCheck, storedTime(*tc.in.LastHealthCheck))
			}

			got, err := s.GetServer(ctx, in.ID)
			if err != nil {
				t.Fatalf("GetServer: %v", err)
			}
			equalServer(t, in, got)
			if got, err = s.GetServer(ctx, strings.ToUpper(in.ID)); err != nil {
				t.Errorf("GetServer(upper-case id): %v", err)
			} else {
				equalServer(t, in, got)
			}
			byName, err := s.GetServerByName(ctx, in.Name)
			if err != nil {
				t.Fatalf("GetServerByName: %v", err)
			}
			equalServer(t, in, byName)
		})
	}
}

func testCreateServerInvalid(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	ok := newServer(strings.Repeat("n", 255))
	if err := s.CreateServer(ctx, ok, 0); err != nil {
		t.Fatalf("CreateServer with a 255-character name: %v", err)
	}
	tests := []struct {
		name   string
		mutate func(*persistence.Server)
	}{
		{"unknown transport", func(v *persistence.Server) { v.TransportType = "WEBSOCKET" }},
		{"empty transport", func(v *persistence.Server) { v.TransportType = "" }},
		{"name longer than 255", func(v *persistence.Server) { v.Name = strings.Repeat("n", 256) }},
		{"nil connection config", func(v *persistence.Server) { v.ConnectionConfig = nil }},
		{"invalid JSON config", func(v *persistence.Server) { v.ConnectionConfig = json.RawMessage(`{"command":`) }},
		{"id not a UUID", func(v *persistence.Server) { v.ID = "server-1" }},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := newServer(fmt.Sprintf("invalid-%d", i))
			tc.mutate(v)
			err := s.CreateServer(ctx, v, 0)
			if err == nil {
				t.Fatal("CreateServer succeeded, want an error")
			}
			if errors.Is(err, persistence.ErrAlreadyExists) || errors.Is(err, persistence.ErrNotFound) {
				t.Errorf("CreateServer: %v, want an error that is neither ErrAlreadyExists nor ErrNotFound", err)
			}
		})
	}
	if _, total, err := s.ListServers(ctx, persistence.ListServersFilter{}); err != nil || total != 1 {
		t.Errorf("after the invalid creations: ListServers total %d, %v; want 1, nil", total, err)
	}
}

func testDuplicateServer(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	first := mustCreate(t, s, "dup")

	tests := []struct {
		name string
		srv  *persistence.Server
	}{
		{"same name", newServer("dup")},
		{"same name, other fields", &persistence.Server{Name: "dup", TransportType: persistence.TransportHTTP,
			ConnectionConfig: json.RawMessage(`{"base_url":"http://x"}`), AutoConnect: true}},
		{"same id", func() *persistence.Server { v := newServer("other"); v.ID = first.ID; return v }()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			requireErrIs(t, "CreateServer", s.CreateServer(ctx, tc.srv, 0), persistence.ErrAlreadyExists)
		})
	}
	servers, total, err := s.ListServers(ctx, persistence.ListServersFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if total != 1 || len(servers) != 1 {
		t.Fatalf("after duplicates: %d servers (total %d), want 1", len(servers), total)
	}
	equalServer(t, first, servers[0])
}

// testConcurrentCreateSameName is EC-004: the same server registered by many callers at once. Exactly one wins;
// the database's unique constraint refuses the others with ErrAlreadyExists.
func testConcurrentCreateSameName(t *testing.T, s persistence.Store) {
	const n = 20
	ctx := t.Context()
	start := make(chan struct{})
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := newServer("same-name")
			v.Description = ptr(fmt.Sprintf("caller %d", i))
			<-start
			errs[i] = s.CreateServer(ctx, v, 0)
		}()
	}
	close(start)
	wg.Wait()

	won := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if won >= 0 {
				t.Errorf("callers %d and %d both created the server", won, i)
			}
			won = i
		case !errors.Is(err, persistence.ErrAlreadyExists):
			t.Errorf("caller %d: %v, want ErrAlreadyExists", i, err)
		}
	}
	if won < 0 {
		t.Fatal("no caller created the server")
	}
	got, err := s.GetServerByName(ctx, "same-name")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("caller %d", won); got.Description == nil || *got.Description != want {
		t.Errorf("stored server is from %v, want %s", got.Description, want)
	}
	if _, total, err := s.ListServers(ctx, persistence.ListServersFilter{}); err != nil || total != 1 {
		t.Errorf("ListServers total %d, %v; want 1", total, err)
	}
}

func testNotFound(t *testing.T, s persistence.Store) {
	// A real server and tool, so "not found" cannot come from an empty store.
	srv := mustCreate(t, s, "present")
	mustReplace(t, s, srv.ID, []persistence.ToolDef{toolDef("t", "", "")})

	ids := []struct{ name, id string }{
		{"unknown uuid", uuid.NewString()},
		{"not a uuid", "not-a-uuid"},
		{"sql in id", "x' OR '1'='1"},
		{"empty", ""},
		{"uuid with junk", srv.ID + "0"},
	}
	ops := []struct {
		name string
		call func(ctx context.Context, id string) error
	}{
		{"GetServer", func(ctx context.Context, id string) error { _, err := s.GetServer(ctx, id); return err }},
		{"UpdateServer", func(ctx context.Context, id string) error {
			_, err := s.UpdateServer(ctx, id, persistence.ServerPatch{Description: ptr("x")})
			return err
		}},
		{"UpdateServer empty patch", func(ctx context.Context, id string) error {
			_, err := s.UpdateServer(ctx, id, persistence.ServerPatch{})
			return err
		}},
		{"SetAutoConnect", func(ctx context.Context, id string) error { return s.SetAutoConnect(ctx, id, true) }},
		{"RecordTransition", func(ctx context.Context, id string) error {
			return s.RecordTransition(ctx, persistence.Transition{ServerID: id, From: persistence.StatusDisconnected,
				To: persistence.StatusConnecting})
		}},
		{"RecordHealth", func(ctx context.Context, id string) error {
			return s.RecordHealth(ctx, persistence.HealthRecord{ServerID: id, CheckedAt: time.Now()})
		}},
		{"DeleteServer", func(ctx context.Context, id string) error { return s.DeleteServer(ctx, id) }},
		{"ListHistory", func(ctx context.Context, id string) error { _, err := s.ListHistory(ctx, id, 10); return err }},
		{"ReplaceServerTools", func(ctx context.Context, id string) error {
			_, err := s.ReplaceServerTools(ctx, id, []persistence.ToolDef{toolDef("t", "", "")}, nil)
			return err
		}},
		{"ListTools", func(ctx context.Context, id string) error {
			_, _, err := s.ListTools(ctx, persistence.ListToolsFilter{ServerID: id})
			return err
		}},
		{"CountTools", func(ctx context.Context, id string) error { _, err := s.CountTools(ctx, id); return err }},
	}
	for _, op := range ops {
		for _, id := range ids {
			if id.id == "" && (op.name == "ListTools" || op.name == "CountTools") {
				continue // empty means all servers there
			}
			t.Run(op.name+"/"+id.name, func(t *testing.T) {
				requireErrIs(t, op.name, op.call(t.Context(), id.id), persistence.ErrNotFound)
			})
		}
	}
	t.Run("GetServerByName", func(t *testing.T) {
		for _, name := range []string{"absent", "", "PRESENT", "present "} {
			_, err := s.GetServerByName(t.Context(), name)
			requireErrIs(t, fmt.Sprintf("GetServerByName(%q)", name), err, persistence.ErrNotFound)
		}
	})
	t.Run("tool ids", func(t *testing.T) {
		tools := mustTools(t, s, srv.ID)
		for _, id := range []int64{tools[0].ID + 1000, -1, 0} {
			_, err := s.GetTool(t.Context(), id)
			requireErrIs(t, fmt.Sprintf("GetTool(%d)", id), err, persistence.ErrNotFound)
			err = s.SetToolClassification(t.Context(), id, persistence.ToolClassification{
				State: persistence.ClassificationClassified})
			requireErrIs(t, fmt.Sprintf("SetToolClassification(%d)", id), err, persistence.ErrNotFound)
		}
	})
	// Nothing above may have touched the real rows.
	got := mustGet(t, s, srv.ID)
	equalServer(t, func() persistence.Server { v := srv; v.ToolCount, v.UpdatedAt = 1, got.UpdatedAt; return v }(), got)
	if c, err := s.CountTools(t.Context(), ""); err != nil || c.Total != 1 {
		t.Errorf("CountTools after not-found calls: %+v, %v; want 1 tool", c, err)
	}
}

func testListServers(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	statuses := []string{persistence.StatusDisconnected, persistence.StatusConnected, persistence.StatusError,
		persistence.StatusConnected, persistence.StatusDisconnected, persistence.StatusConnected}
	// Created in an order that differs from name order, so the ordering by registration is visible.
	names := []string{"s-f", "s-b", "s-d", "s-a", "s-e", "s-c"}
	for i, name := range names {
		v := newServer(name)
		v.Status = statuses[i]
		if err := s.CreateServer(ctx, v, 0); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name      string
		filter    persistence.ListServersFilter
		want      []string
		wantTotal int
	}{
		{"all", persistence.ListServersFilter{}, names, 6},
		{"negative limit is no limit", persistence.ListServersFilter{Limit: -1}, names, 6},
		{"first page", persistence.ListServersFilter{Limit: 2}, names[:2], 6},
		{"second page", persistence.ListServersFilter{Limit: 2, Offset: 2}, names[2:4], 6},
		{"offset without limit", persistence.ListServersFilter{Offset: 4}, names[4:], 6},
		{"last partial page", persistence.ListServersFilter{Limit: 4, Offset: 4}, names[4:], 6},
		{"offset past the end", persistence.ListServersFilter{Limit: 2, Offset: 10}, nil, 6},
		{"status", persistence.ListServersFilter{Status: persistence.StatusConnected}, []string{"s-b", "s-a", "s-c"}, 3},
		{"status paged", persistence.ListServersFilter{Status: persistence.StatusConnected, Limit: 1, Offset: 1},
			[]string{"s-a"}, 3},
		{"status with one server", persistence.ListServersFilter{Status: persistence.StatusError}, []string{"s-d"}, 1},
		{"status without servers", persistence.ListServersFilter{Status: persistence.StatusDegraded}, nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, total, err := s.ListServers(ctx, tc.filter)
			if err != nil {
				t.Fatalf("ListServers(%+v): %v", tc.filter, err)
			}
			if total != tc.wantTotal {
				t.Errorf("total = %d, want %d", total, tc.wantTotal)
			}
			if !sameStrings(serverNames(got), tc.want) {
				t.Errorf("names = %v, want %v", serverNames(got), tc.want)
			}
			for _, v := range got {
				equalServer(t, mustGet(t, s, v.ID), v)
			}
		})
	}
}

func testUpdateServer(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	tests := []struct {
		name  string
		patch persistence.ServerPatch
		want  func(v *persistence.Server) // the expected change, UpdatedAt aside
	}{
		{"description", persistence.ServerPatch{Description: ptr("new description")},
			func(v *persistence.Server) { v.Description = ptr("new description") }},
		{"connection config", persistence.ServerPatch{ConnectionConfig: json.RawMessage(`{"command":"uvx","args":["x"]}`)},
			func(v *persistence.Server) { v.ConnectionConfig = json.RawMessage(`{"command":"uvx","args":["x"]}`) }},
		{"health url", persistence.ServerPatch{HealthCheckURL: ptr("http://new/health")},
			func(v *persistence.Server) { v.HealthCheckURL = ptr("http://new/health") }},
		{"clear health url", persistence.ServerPatch{ClearHealthCheckURL: true},
			func(v *persistence.Server) { v.HealthCheckURL = nil }},
		{"clear wins over set", persistence.ServerPatch{ClearHealthCheckURL: true, HealthCheckURL: ptr("http://x")},
			func(v *persistence.Server) { v.HealthCheckURL = nil }},
		{"name", persistence.ServerPatch{Name: ptr("renamed")},
			func(v *persistence.Server) { v.Name = "renamed" }},
		{"credential per_user", persistence.ServerPatch{Credential: &persistence.CredentialChange{Mode: persistence.CredentialPerUser,
			Slot: &persistence.UserCredentialSlot{Env: "API_KEY"}}},
			func(v *persistence.Server) {
				v.CredentialMode, v.UserCredential = persistence.CredentialPerUser, &persistence.UserCredentialSlot{Env: "API_KEY"}
			}},
		{"credential shared", persistence.ServerPatch{Credential: &persistence.CredentialChange{Mode: persistence.CredentialShared}},
			func(v *persistence.Server) {}},
		{"everything", persistence.ServerPatch{Name: ptr("all-new"), Description: ptr("d"),
			ConnectionConfig: json.RawMessage(`{"command":"c"}`), HealthCheckURL: ptr("http://h")},
			func(v *persistence.Server) {
				v.Name, v.Description, v.HealthCheckURL = "all-new", ptr("d"), ptr("http://h")
				v.ConnectionConfig = json.RawMessage(`{"command":"c"}`)
			}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			orig := newServer(fmt.Sprintf("update-%d", i))
			orig.Description, orig.HealthCheckURL = ptr("old description"), ptr("http://old/health")
			orig.Status, orig.AutoConnect = persistence.StatusConnected, true
			if err := s.CreateServer(ctx, orig, 0); err != nil {
				t.Fatal(err)
			}
			before := clock()
			got, err := s.UpdateServer(ctx, orig.ID, tc.patch)
			if err != nil {
				t.Fatalf("UpdateServer: %v", err)
			}
			after := clock()
			want := *orig
			tc.want(&want)
			between(t, "UpdatedAt", got.UpdatedAt, before, after)
			want.UpdatedAt = got.UpdatedAt
			equalServer(t, want, got)
			equalServer(t, want, mustGet(t, s, orig.ID))
			if tc.patch.Name != nil {
				if _, err := s.GetServerByName(ctx, orig.Name); !errors.Is(err, persistence.ErrNotFound) {
					t.Errorf("GetServerByName(old name) after rename: %v, want ErrNotFound", err)
				}
				byName, err := s.GetServerByName(ctx, *tc.patch.Name)
				if err != nil {
					t.Fatalf("GetServerByName(new name): %v", err)
				}
				equalServer(t, want, byName)
			}
		})
	}
	t.Run("empty patch changes nothing", func(t *testing.T) {
		orig := mustCreate(t, s, "untouched")
		got, err := s.UpdateServer(ctx, orig.ID, persistence.ServerPatch{})
		if err != nil {
			t.Fatal(err)
		}
		equalServer(t, orig, got)
	})
	t.Run("invalid config", func(t *testing.T) {
		orig := mustCreate(t, s, "bad-config")
		_, err := s.UpdateServer(ctx, orig.ID, persistence.ServerPatch{ConnectionConfig: json.RawMessage(`{oops`)})
		if err == nil {
			t.Fatal("UpdateServer with invalid JSON succeeded")
		}
		equalServer(t, orig, mustGet(t, s, orig.ID))
	})
}

func testRenameServerRenamesTools(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	srv := mustCreate(t, s, "old")
	other := mustCreate(t, s, "other")
	mustReplace(t, s, srv.ID, []persistence.ToolDef{toolDef("a", "A", ""), toolDef("b.c", "dotted", ""),
		toolDef("x.y.z", "more dots", `{"type":"object"}`)})
	mustReplace(t, s, other.ID, []persistence.ToolDef{toolDef("a", "other A", "")})
	before := toolsByName(mustTools(t, s, srv.ID))
	otherBefore := mustTools(t, s, other.ID)

	if _, err := s.UpdateServer(ctx, srv.ID, persistence.ServerPatch{Name: ptr("new")}); err != nil {
		t.Fatalf("rename: %v", err)
	}
	after := mustTools(t, s, srv.ID)
	if want := []string{"new.a", "new.b.c", "new.x.y.z"}; !sameStrings(toolNames(after), want) {
		t.Fatalf("tool names after rename = %v, want %v", toolNames(after), want)
	}
	for _, tl := range after {
		old := before["old."+tl.OriginalName]
		if tl.ID != old.ID || !tl.DiscoveredAt.Equal(old.DiscoveredAt) || tl.DefinitionHash != old.DefinitionHash {
			t.Errorf("tool %s after rename: id %d discovered %v hash %s; want those of %s (%d, %v, %s)", tl.Name,
				tl.ID, tl.DiscoveredAt, tl.DefinitionHash, old.Name, old.ID, old.DiscoveredAt, old.DefinitionHash)
		}
		if got, err := s.GetTool(ctx, tl.ID); err != nil || got.Name != tl.Name {
			t.Errorf("GetTool(%d) = %q, %v; want %q", tl.ID, got.Name, err, tl.Name)
		}
	}
	otherAfter := mustTools(t, s, other.ID)
	if len(otherAfter) != 1 {
		t.Fatalf("other server has %d tools after rename, want 1", len(otherAfter))
	}
	equalTool(t, otherBefore[0], otherAfter[0])

	t.Run("onto a taken name", func(t *testing.T) {
		renamed := mustGet(t, s, srv.ID)
		_, err := s.UpdateServer(ctx, srv.ID, persistence.ServerPatch{Name: ptr("other"), Description: ptr("lost")})
		requireErrIs(t, "rename onto taken name", err, persistence.ErrAlreadyExists)
		equalServer(t, renamed, mustGet(t, s, srv.ID))
		if got := toolNames(mustTools(t, s, srv.ID)); !sameStrings(got, toolNames(after)) {
			t.Errorf("tool names after refused rename = %v, want %v", got, toolNames(after))
		}
	})
	t.Run("discovery after rename", func(t *testing.T) {
		diff := mustReplace(t, s, srv.ID, []persistence.ToolDef{toolDef("a", "A", ""), toolDef("b.c", "dotted", ""),
			toolDef("x.y.z", "more dots", `{"type":"object"}`), toolDef("d", "", "")})
		if !sameStrings(diff.Added, []string{"new.d"}) || len(diff.Removed) != 0 || len(diff.Changed) != 0 {
			t.Errorf("diff after rename = %+v, want only new.d added", diff)
		}
	})
}

func testSetAutoConnect(t *testing.T, s persistence.Store) {
	srv := mustCreate(t, s, "auto")
	for _, on := range []bool{true, true, false, true} {
		before := clock()
		if err := s.SetAutoConnect(t.Context(), srv.ID, on); err != nil {
			t.Fatalf("SetAutoConnect(%v): %v", on, err)
		}
		got := mustGet(t, s, srv.ID)
		if got.AutoConnect != on {
			t.Errorf("AutoConnect = %v after SetAutoConnect(%v)", got.AutoConnect, on)
		}
		between(t, "UpdatedAt", got.UpdatedAt, before, clock())
		want := srv
		want.AutoConnect, want.UpdatedAt = on, got.UpdatedAt
		equalServer(t, want, got)
	}
}

func testRecordTransition(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	srv := mustCreate(t, s, "lifecycle")
	bystander := mustCreate(t, s, "bystander")
	base := time.Date(2025, 1, 8, 11, 0, 0, 999_999_999, time.FixedZone("CET", 3600))
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }

	steps := []struct {
		tr            persistence.Transition
		wantConnected *time.Time
		wantError     *string
	}{
		{persistence.Transition{From: persistence.StatusDisconnected, To: persistence.StatusConnecting,
			Reason: "connect requested", At: at(0)}, nil, nil},
		{persistence.Transition{From: persistence.StatusConnecting, To: persistence.StatusConnected,
			Reason: "handshake done", At: at(1), Details: json.RawMessage(`{"attempt": 2}`)}, ptr(at(1)), nil},
		{persistence.Transition{From: persistence.StatusConnected, To: persistence.StatusError,
			Reason: "process exited", ErrorMessage: ptr("exit status 1"), At: at(2)}, ptr(at(1)), ptr("exit status 1")},
		{persistence.Transition{From: persistence.StatusError, To: persistence.StatusConnecting, Reason: "retry",
			At: at(3)}, ptr(at(1)), nil},
		{persistence.Transition{From: persistence.StatusConnecting, To: persistence.StatusConnected, At: at(4)},
			ptr(at(4)), nil},
		{persistence.Transition{From: persistence.StatusConnected, To: persistence.StatusDisconnected,
			Reason: "admin", At: at(5)}, ptr(at(4)), nil},
	}
	for i, st := range steps {
		tr := st.tr
		tr.ServerID = srv.ID
		if err := s.RecordTransition(ctx, tr); err != nil {
			t.Fatalf("step %d: RecordTransition(%s -> %s): %v", i, tr.From, tr.To, err)
		}
		got := mustGet(t, s, srv.ID)
		want := srv
		want.Status, want.ErrorMessage, want.UpdatedAt = tr.To, st.wantError, storedTime(tr.At)
		if st.wantConnected != nil {
			want.ConnectedAt = ptr(storedTime(*st.wantConnected))
		}
		equalServer(t, want, got)
	}

	history, err := s.ListHistory(ctx, srv.ID, 0)
	if err != nil {
		t.Fatalf("ListHistory: %v", err)
	}
	if len(history) != len(steps) {
		t.Fatalf("ListHistory: %d rows, want %d", len(history), len(steps))
	}
	for i, e := range history { // newest first
		st := steps[len(steps)-1-i]
		if e.ServerID != srv.ID || e.EventType != st.tr.To || !e.Timestamp.Equal(storedTime(st.tr.At)) {
			t.Errorf("history[%d] = %s %s at %v, want %s %s at %v", i, e.ServerID, e.EventType, e.Timestamp, srv.ID,
				st.tr.To, storedTime(st.tr.At))
		}
		requireUTC(t, "history timestamp", &e.Timestamp)
		if i > 0 && e.ID >= history[i-1].ID {
			t.Errorf("history ids not newest first: %d after %d", e.ID, history[i-1].ID)
		}
		var d struct {
			From         string          `json:"from"`
			Reason       string          `json:"reason"`
			ErrorMessage *string         `json:"error_message"`
			Details      json.RawMessage `json:"details"`
		}
		if err := json.Unmarshal(e.Details, &d); err != nil {
			t.Fatalf("history[%d] details %s: %v", i, e.Details, err)
		}
		if d.From != st.tr.From || d.Reason != st.tr.Reason || !sameStringPtr(d.ErrorMessage, st.tr.ErrorMessage) ||
			!jsonEqual(d.Details, st.tr.Details) {
			t.Errorf("history[%d] details = %s, want from %s, reason %q, error %v, details %s", i, e.Details,
				st.tr.From, st.tr.Reason, st.tr.ErrorMessage, st.tr.Details)
		}
	}
	limited, err := s.ListHistory(ctx, srv.ID, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(limited) != 2 || limited[0].ID != history[0].ID || limited[1].ID != history[1].ID {
		t.Errorf("ListHistory(limit 2) = %v, want the two newest %v", dump(limited), dump(history[:2]))
	}
	if h, err := s.ListHistory(ctx, bystander.ID, 0); err != nil || len(h) != 0 {
		t.Errorf("ListHistory(bystander) = %d rows, %v; want none", len(h), err)
	}
	equalServer(t, bystander, mustGet(t, s, bystander.ID))

	t.Run("zero At is now", func(t *testing.T) {
		before := clock()
		if err := s.RecordTransition(ctx, persistence.Transition{ServerID: srv.ID, From: persistence.StatusDisconnected,
			To: persistence.StatusConnecting}); err != nil {
			t.Fatal(err)
		}
		after := clock()
		h, err := s.ListHistory(ctx, srv.ID, 1)
		if err != nil || len(h) != 1 {
			t.Fatalf("ListHistory: %d, %v", len(h), err)
		}
		between(t, "history timestamp", h[0].Timestamp, before, after)
		between(t, "UpdatedAt", mustGet(t, s, srv.ID).UpdatedAt, before, after)
	})
	t.Run("invalid details change nothing", func(t *testing.T) {
		before := mustGet(t, s, srv.ID)
		err := s.RecordTransition(ctx, persistence.Transition{ServerID: srv.ID, From: before.Status,
			To: persistence.StatusError, Details: json.RawMessage(`{not json`)})
		if err == nil {
			t.Fatal("RecordTransition with invalid details succeeded")
		}
		equalServer(t, before, mustGet(t, s, srv.ID))
		if h, _ := s.ListHistory(ctx, srv.ID, 0); len(h) != len(steps)+1 {
			t.Errorf("history has %d rows, want %d", len(h), len(steps)+1)
		}
	})
}

func sameStringPtr(a, b *string) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func testRecordHealth(t *testing.T, s persistence.Store) {
	srv := mustCreate(t, s, "health")
	checked := time.Date(2025, 1, 8, 10, 0, 0, 555_555_555, time.FixedZone("EST", -5*3600))
	tests := []struct {
		name string
		rec  persistence.HealthRecord
	}{
		{"healthy", persistence.HealthRecord{CheckedAt: checked, ResponseMs: ptr(12.5)}},
		{"first failure", persistence.HealthRecord{CheckedAt: checked.Add(30 * time.Second), ConsecutiveFailures: 1,
			LastError: ptr("timeout after 5s")}},
		{"second failure", persistence.HealthRecord{CheckedAt: checked.Add(time.Minute), ResponseMs: ptr(4999.75),
			ConsecutiveFailures: 2, LastError: ptr("HTTP 503")}},
		{"recovered", persistence.HealthRecord{CheckedAt: checked.Add(90 * time.Second), ResponseMs: ptr(3.0)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := tc.rec
			rec.ServerID = srv.ID
			if err := s.RecordHealth(t.Context(), rec); err != nil {
				t.Fatalf("RecordHealth: %v", err)
			}
			want := srv // status and updated_at stay
			want.LastHealthCheck = ptr(storedTime(rec.CheckedAt))
			want.HealthResponseMs, want.ConsecutiveFailures, want.ErrorMessage = rec.ResponseMs, rec.ConsecutiveFailures,
				rec.LastError
			equalServer(t, want, mustGet(t, s, srv.ID))
		})
	}
	t.Run("zero CheckedAt is now", func(t *testing.T) {
		before := clock()
		if err := s.RecordHealth(t.Context(), persistence.HealthRecord{ServerID: srv.ID}); err != nil {
			t.Fatal(err)
		}
		got := mustGet(t, s, srv.ID)
		if got.LastHealthCheck == nil {
			t.Fatal("LastHealthCheck not set")
		}
		between(t, "LastHealthCheck", *got.LastHealthCheck, before, clock())
	})
}

func testDeleteServerCascades(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	doomed := mustCreate(t, s, "doomed")
	kept := mustCreate(t, s, "kept")
	mustReplace(t, s, doomed.ID, []persistence.ToolDef{toolDef("a", "", ""), toolDef("b", "", "")})
	mustReplace(t, s, kept.ID, []persistence.ToolDef{toolDef("a", "", "")})
	for _, id := range []string{doomed.ID, kept.ID} {
		if err := s.RecordTransition(ctx, persistence.Transition{ServerID: id, From: persistence.StatusDisconnected,
			To: persistence.StatusConnecting}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.InsertAudit(ctx, persistence.AuditRecord{Event: "server.deleted", ServerID: &doomed.ID,
		ServerName: &doomed.Name}); err != nil {
		t.Fatal(err)
	}
	doomedTools := mustTools(t, s, doomed.ID)
	keptBefore := mustGet(t, s, kept.ID)
	keptTools := mustTools(t, s, kept.ID)

	if err := s.DeleteServer(ctx, doomed.ID); err != nil {
		t.Fatalf("DeleteServer: %v", err)
	}
	if _, err := s.GetServer(ctx, doomed.ID); !errors.Is(err, persistence.ErrNotFound) {
		t.Errorf("GetServer after delete: %v, want ErrNotFound", err)
	}
	if _, err := s.GetServerByName(ctx, doomed.Name); !errors.Is(err, persistence.ErrNotFound) {
		t.Errorf("GetServerByName after delete: %v, want ErrNotFound", err)
	}
	for _, tl := range doomedTools {
		if _, err := s.GetTool(ctx, tl.ID); !errors.Is(err, persistence.ErrNotFound) {
			t.Errorf("GetTool(%d) of deleted server: %v, want ErrNotFound", tl.ID, err)
		}
	}
	if _, err := s.ListHistory(ctx, doomed.ID, 0); !errors.Is(err, persistence.ErrNotFound) {
		t.Errorf("ListHistory of deleted server: %v, want ErrNotFound", err)
	}
	requireErrIs(t, "second DeleteServer", s.DeleteServer(ctx, doomed.ID), persistence.ErrNotFound)

	all := mustTools(t, s, "")
	if len(all) != 1 {
		t.Fatalf("%d tools left, want only the kept server's", len(all))
	}
	equalTool(t, keptTools[0], all[0])
	equalServer(t, keptBefore, mustGet(t, s, kept.ID))
	if h, err := s.ListHistory(ctx, kept.ID, 0); err != nil || len(h) != 1 {
		t.Errorf("kept server history: %d rows, %v; want 1", len(h), err)
	}
	if c, err := s.CountTools(ctx, ""); err != nil || c.Total != 1 {
		t.Errorf("CountTools after delete = %+v, %v; want total 1", c, err)
	}
	audit, total, err := s.ListAudit(ctx, 0, 0)
	if err != nil || total != 1 || len(audit) != 1 || audit[0].ServerID == nil || *audit[0].ServerID != doomed.ID {
		t.Errorf("audit after delete = %s (total %d), %v; want the record of the deleted server", dump(audit), total, err)
	}
	t.Run("name reusable", func(t *testing.T) {
		again := mustCreate(t, s, "doomed")
		if again.ID == doomed.ID {
			t.Error("re-registered server got the deleted server's id")
		}
		if tools := mustTools(t, s, again.ID); len(tools) != 0 {
			t.Errorf("re-registered server inherited %d tools", len(tools))
		}
	})
}

func testCountServersByStatus(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	zero := map[string]int{persistence.StatusDisconnected: 0, persistence.StatusConnecting: 0,
		persistence.StatusConnected: 0, persistence.StatusDegraded: 0, persistence.StatusError: 0,
		persistence.StatusDisconnecting: 0}
	got, err := s.CountServersByStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if dump(got) != dump(zero) {
		t.Errorf("empty store: %v, want %v", got, zero)
	}
	for i, st := range []string{persistence.StatusConnected, persistence.StatusConnected, persistence.StatusError,
		"", "CUSTOM"} {
		v := newServer(fmt.Sprintf("count-%d", i))
		v.Status = st
		if err := s.CreateServer(ctx, v, 0); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int{}
	for k, v := range zero {
		want[k] = v
	}
	want[persistence.StatusConnected], want[persistence.StatusError], want[persistence.StatusDisconnected] = 2, 1, 1
	want["CUSTOM"] = 1
	got, err = s.CountServersByStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if dump(got) != dump(want) { // json sorts map keys
		t.Errorf("CountServersByStatus = %v, want %v", got, want)
	}
}

func testCanceledContext(t *testing.T, s persistence.Store) {
	srv := mustCreate(t, s, "ctx")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	calls := []struct {
		name string
		call func() error
	}{
		{"CreateServer", func() error { return s.CreateServer(ctx, newServer("never"), 0) }},
		{"GetServer", func() error { _, err := s.GetServer(ctx, srv.ID); return err }},
		{"ListServers", func() error { _, _, err := s.ListServers(ctx, persistence.ListServersFilter{}); return err }},
		{"RecordTransition", func() error {
			return s.RecordTransition(ctx, persistence.Transition{ServerID: srv.ID, To: persistence.StatusConnecting})
		}},
		{"ReplaceServerTools", func() error {
			_, err := s.ReplaceServerTools(ctx, srv.ID, []persistence.ToolDef{toolDef("t", "", "")}, nil)
			return err
		}},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			if err := c.call(); !errors.Is(err, context.Canceled) {
				t.Errorf("%s with a canceled context: %v, want context.Canceled", c.name, err)
			}
		})
	}
	if _, err := s.GetServerByName(t.Context(), "never"); !errors.Is(err, persistence.ErrNotFound) {
		t.Errorf("server created despite the canceled context: %v", err)
	}
	equalServer(t, srv, mustGet(t, s, srv.ID))
}

// testConcurrentUse mixes writers and readers, the load under which SQLite would answer SQLITE_BUSY if the store
// did not serialise its writes.
func testConcurrentUse(t *testing.T, s persistence.Store) {
	const workers, tools = 8, 25
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make(chan error, workers*16)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fail := func(op string, err error) { errs <- fmt.Errorf("worker %d: %s: %w", w, op, err) }
			v := newServer(fmt.Sprintf("worker-%d", w))
			if err := s.CreateServer(ctx, v, 0); err != nil {
				fail("create", err)
				return
			}
			for _, to := range []string{persistence.StatusConnecting, persistence.StatusConnected} {
				if err := s.RecordTransition(ctx, persistence.Transition{ServerID: v.ID, To: to}); err != nil {
					fail("transition", err)
				}
			}
			defs := make([]persistence.ToolDef, tools)
			for i := range defs {
				defs[i] = toolDef(fmt.Sprintf("tool-%02d", i), "d", `{"type":"object"}`)
			}
			if _, err := s.ReplaceServerTools(ctx, v.ID, defs, nil); err != nil {
				fail("replace tools", err)
			}
			if err := s.RecordHealth(ctx, persistence.HealthRecord{ServerID: v.ID, ResponseMs: ptr(1.0)}); err != nil {
				fail("health", err)
			}
			if err := s.InsertAudit(ctx, persistence.AuditRecord{Event: "server.registered", ServerID: &v.ID}); err != nil {
				fail("audit", err)
			}
			if _, _, err := s.ListServers(ctx, persistence.ListServersFilter{Limit: 5}); err != nil {
				fail("list servers", err)
			}
			if _, _, err := s.ListTools(ctx, persistence.ListToolsFilter{ServerID: v.ID, Limit: 10}); err != nil {
				fail("list tools", err)
			}
			if _, err := s.CountServersByStatus(ctx); err != nil {
				fail("count", err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	counts, err := s.CountServersByStatus(ctx)
	if err != nil || counts[persistence.StatusConnected] != workers {
		t.Errorf("connected servers = %d, %v; want %d", counts[persistence.StatusConnected], err, workers)
	}
	if c, err := s.CountTools(ctx, ""); err != nil || c.Total != workers*tools {
		t.Errorf("CountTools = %+v, %v; want %d", c, err, workers*tools)
	}
	if _, total, err := s.ListAudit(ctx, 1, 0); err != nil || total != workers {
		t.Errorf("audit total = %d, %v; want %d", total, err, workers)
	}
}
