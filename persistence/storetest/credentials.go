package storetest

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/mcpgw/aggregator/persistence"
)

// testCredentialMode: a server's credential settings are stored and read back; shared is the default; a per_user
// server without a slot, a shared one with a slot and an unknown mode are refused.
func testCredentialMode(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	plain := mustCreate(t, s, "plain")
	if plain.CredentialMode != persistence.CredentialShared || plain.UserCredential != nil {
		t.Fatalf("default: mode %q slot %+v", plain.CredentialMode, plain.UserCredential)
	}
	if got := mustGet(t, s, plain.ID); got.CredentialMode != persistence.CredentialShared || got.UserCredential != nil {
		t.Fatalf("default read back: mode %q slot %+v", got.CredentialMode, got.UserCredential)
	}
	slot := &persistence.UserCredentialSlot{Header: "Authorization", Prefix: "Bearer "}
	per := newServer("per")
	per.TransportType, per.ConnectionConfig = persistence.TransportHTTP, json.RawMessage(`{"base_url":"https://x.example/mcp"}`)
	per.CredentialMode, per.UserCredential = persistence.CredentialPerUser, slot
	if err := s.CreateServer(ctx, per, 0); err != nil {
		t.Fatalf("create per_user: %v", err)
	}
	got := mustGet(t, s, per.ID)
	if got.CredentialMode != persistence.CredentialPerUser || got.UserCredential == nil || *got.UserCredential != *slot {
		t.Fatalf("per_user read back: mode %q slot %+v", got.CredentialMode, got.UserCredential)
	}
	list, _, err := s.ListServers(ctx, persistence.ListServersFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range list {
		if v.ID == per.ID && (v.UserCredential == nil || *v.UserCredential != *slot) {
			t.Fatalf("listed per_user slot %+v", v.UserCredential)
		}
	}
	tests := []struct {
		name string
		mode string
		slot *persistence.UserCredentialSlot
	}{
		{"per_user without slot", persistence.CredentialPerUser, nil},
		{"shared with slot", persistence.CredentialShared, slot},
		{"unknown mode", "everyone", nil},
	}
	for _, tc := range tests {
		bad := newServer("bad")
		bad.CredentialMode, bad.UserCredential = tc.mode, tc.slot
		if err := s.CreateServer(ctx, bad, 0); err == nil {
			t.Errorf("%s: stored", tc.name)
		}
	}
}

// testCredentialSwitch: PATCH's credential change (issue 28) stores the mode with its slot, refuses an inconsistent
// one, and a switch to shared drops every caller's secret of that server (only that server's).
func testCredentialSwitch(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	a, b := mustCreate(t, s, "switch-a"), mustCreate(t, s, "switch-b")
	slot := &persistence.UserCredentialSlot{Env: "API_KEY"}
	for _, srv := range []persistence.Server{a, b} {
		got, err := s.UpdateServer(ctx, srv.ID, persistence.ServerPatch{Credential: &persistence.CredentialChange{
			Mode: persistence.CredentialPerUser, Slot: slot}})
		if err != nil || got.CredentialMode != persistence.CredentialPerUser || got.UserCredential == nil || *got.UserCredential != *slot {
			t.Fatalf("to per_user: %+v %v", got, err)
		}
		if _, _, err := s.PutUserSecret(ctx, persistence.UserSecret{ServerID: srv.ID, Subject: "token:alice", Secret: json.RawMessage(`"s"`)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []persistence.CredentialChange{
		{Mode: persistence.CredentialPerUser},
		{Mode: persistence.CredentialShared, Slot: slot},
		{Mode: "everyone"},
	} {
		if _, err := s.UpdateServer(ctx, a.ID, persistence.ServerPatch{Credential: &bad}); err == nil {
			t.Errorf("%+v stored", bad)
		}
	}
	got, err := s.UpdateServer(ctx, a.ID, persistence.ServerPatch{Credential: &persistence.CredentialChange{Mode: persistence.CredentialShared}})
	if err != nil || got.CredentialMode != persistence.CredentialShared || got.UserCredential != nil {
		t.Fatalf("to shared: %+v %v", got, err)
	}
	if _, err := s.GetUserSecret(ctx, a.ID, "token:alice"); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("a caller's secret kept after the switch to shared: %v", err)
	}
	if _, err := s.GetUserSecret(ctx, b.ID, "token:alice"); err != nil {
		t.Fatalf("another server's secret: %v", err)
	}
}

// testUserSecrets: one secret per (server, subject), replaced in place, listed without secrets, deleted one by
// one, gone with the server; one subject's write never touches another's.
func testUserSecrets(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	a, b := mustCreate(t, s, "a"), mustCreate(t, s, "b")
	put := func(server, subject, secret string) (persistence.UserSecret, bool) {
		t.Helper()
		got, created, err := s.PutUserSecret(ctx, persistence.UserSecret{ServerID: server, Subject: subject, Secret: json.RawMessage(secret)})
		if err != nil {
			t.Fatalf("put %s/%s: %v", server, subject, err)
		}
		if got.Secret != nil || got.Subject != subject || got.ServerID != server || got.CreatedAt.IsZero() {
			t.Fatalf("put %s/%s answered %+v", server, subject, got)
		}
		return got, created
	}
	secretOf := func(server, subject string) string {
		t.Helper()
		got, err := s.GetUserSecret(ctx, server, subject)
		if err != nil {
			t.Fatalf("get %s/%s: %v", server, subject, err)
		}
		return string(got.Secret)
	}
	if _, created := put(a.ID, "token:alice", `"s1"`); !created {
		t.Fatal("first put not created")
	}
	first, _ := s.GetUserSecret(ctx, a.ID, "token:alice")
	if _, created := put(a.ID, "token:alice", `"s2"`); created {
		t.Fatal("second put created")
	}
	put(a.ID, "oauth:bob", `"b1"`)
	put(b.ID, "token:alice", `"other"`)
	if got := secretOf(a.ID, "token:alice"); got != `"s2"` {
		t.Fatalf("alice on a: %s", got)
	}
	if got := secretOf(a.ID, "oauth:bob"); got != `"b1"` {
		t.Fatalf("bob on a: %s", got)
	}
	if got, _ := s.GetUserSecret(ctx, a.ID, "token:alice"); !got.CreatedAt.Equal(first.CreatedAt) {
		t.Fatalf("replace moved created_at: %v then %v", first.CreatedAt, got.CreatedAt)
	}
	for _, tc := range []struct{ server, subject string }{{a.ID, "token:carol"}, {a.ID, "alice"}, {"not-a-uuid", "token:alice"}} {
		if _, err := s.GetUserSecret(ctx, tc.server, tc.subject); !errors.Is(err, persistence.ErrNotFound) {
			t.Errorf("get %s/%s: %v, want ErrNotFound", tc.server, tc.subject, err)
		}
	}
	list, err := s.ListUserSecrets(ctx, a.ID)
	if err != nil || len(list) != 2 || list[0].Subject != "oauth:bob" || list[1].Subject != "token:alice" {
		t.Fatalf("list a: %+v, %v", list, err)
	}
	for _, v := range list {
		if v.Secret != nil {
			t.Fatalf("list returned a secret: %+v", v)
		}
	}
	if all, err := s.ListUserSecrets(ctx, ""); err != nil || len(all) != 3 {
		t.Fatalf("list all: %d, %v", len(all), err)
	}
	if _, err := s.ListUserSecrets(ctx, "0190b0b0-0000-7000-8000-000000000000"); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("list of unknown server: %v", err)
	}
	bad := []persistence.UserSecret{
		{ServerID: a.ID, Subject: "", Secret: json.RawMessage(`"x"`)},
		{ServerID: a.ID, Subject: string(make([]byte, persistence.MaxSubjectLength+1)), Secret: json.RawMessage(`"x"`)},
		{ServerID: a.ID, Subject: "token:x", Secret: nil},
		{ServerID: "0190b0b0-0000-7000-8000-000000000000", Subject: "token:x", Secret: json.RawMessage(`"x"`)},
	}
	for i, v := range bad {
		if _, _, err := s.PutUserSecret(ctx, v); err == nil {
			t.Errorf("bad put %d stored", i)
		}
	}
	if err := s.DeleteUserSecret(ctx, a.ID, "token:alice"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteUserSecret(ctx, a.ID, "token:alice"); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if got := secretOf(b.ID, "token:alice"); got != `"other"` {
		t.Fatalf("delete on a touched b: %s", got)
	}
	if err := s.DeleteServer(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if all, err := s.ListUserSecrets(ctx, ""); err != nil || len(all) != 1 || all[0].Subject != "oauth:bob" {
		t.Fatalf("after deleting server b: %+v, %v", all, err)
	}
}
