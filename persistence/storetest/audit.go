package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpgw/aggregator/persistence"
)

func testAudit(t *testing.T, s persistence.Store) {
	ctx := t.Context()
	if recs, total, err := s.ListAudit(ctx, 10, 0); err != nil || total != 0 || len(recs) != 0 {
		t.Fatalf("empty audit: %d records, total %d, %v", len(recs), total, err)
	}
	base := time.Date(2025, 1, 8, 10, 0, 0, 123_456_789, time.FixedZone("IST", 5*3600+1800))
	serverID := uuid.NewString()
	recs := make([]persistence.AuditRecord, 5)
	for i := range recs {
		recs[i] = persistence.AuditRecord{
			Event:     fmt.Sprintf("server.event%d", i),
			Actor:     fmt.Sprintf("token:%d", i),
			IPAddress: "192.0.2.1",
			Timestamp: base.Add(time.Duration(i) * time.Minute),
		}
	}
	recs[1].ServerID, recs[1].ServerName = ptr(strings.ToUpper(serverID)), ptr("github-mcp")
	recs[1].Details = json.RawMessage(`{"changed": ["name", "description"], "old_name": "gh"}`)
	recs[2].Details = json.RawMessage(`null`)
	// Inserted out of time order: the listing is by timestamp, not insertion.
	for _, i := range []int{2, 0, 4, 1, 3} {
		if err := s.InsertAudit(ctx, recs[i]); err != nil {
			t.Fatalf("InsertAudit(%d): %v", i, err)
		}
	}
	pages := []struct {
		name          string
		limit, offset int
		want          []int // indexes into recs, newest first
	}{
		{"all", 0, 0, []int{4, 3, 2, 1, 0}},
		{"first page", 2, 0, []int{4, 3}},
		{"second page", 2, 2, []int{2, 1}},
		{"last page", 2, 4, []int{0}},
		{"offset without limit", 0, 3, []int{1, 0}},
		{"past the end", 2, 10, nil},
	}
	for _, p := range pages {
		t.Run(p.name, func(t *testing.T) {
			got, total, err := s.ListAudit(ctx, p.limit, p.offset)
			if err != nil {
				t.Fatalf("ListAudit(%d, %d): %v", p.limit, p.offset, err)
			}
			if total != len(recs) || len(got) != len(p.want) {
				t.Fatalf("ListAudit(%d, %d): %d records, total %d; want %d, total %d", p.limit, p.offset, len(got),
					total, len(p.want), len(recs))
			}
			for k, i := range p.want {
				equalAudit(t, recs[i], got[k])
			}
		})
	}
	t.Run("server id canonical", func(t *testing.T) {
		got, _, err := s.ListAudit(ctx, 1, 3)
		if err != nil || len(got) != 1 || got[0].ServerID == nil || *got[0].ServerID != serverID {
			t.Errorf("stored server id = %s, %v; want %s", dump(got), err, serverID)
		}
	})
	t.Run("zero timestamp is now and newest", func(t *testing.T) {
		before := clock()
		if err := s.InsertAudit(ctx, persistence.AuditRecord{Event: "server.deleted"}); err != nil {
			t.Fatal(err)
		}
		got, total, err := s.ListAudit(ctx, 1, 0)
		if err != nil || total != len(recs)+1 || len(got) != 1 || got[0].Event != "server.deleted" {
			t.Fatalf("ListAudit after insert = %s, total %d, %v", dump(got), total, err)
		}
		between(t, "Timestamp", got[0].Timestamp, before, clock())
		if got[0].ServerID != nil || got[0].ServerName != nil || got[0].Details != nil || got[0].Actor != "" {
			t.Errorf("optional fields of a bare record: %s", dump(got[0]))
		}
	})
	t.Run("same timestamp, newest insert first", func(t *testing.T) {
		at := base.Add(time.Hour)
		for _, ev := range []string{"tie.first", "tie.second"} {
			if err := s.InsertAudit(ctx, persistence.AuditRecord{Event: ev, Timestamp: at}); err != nil {
				t.Fatal(err)
			}
		}
		got, _, err := s.ListAudit(ctx, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		// The zero-timestamp record above is "now", later than base+1h.
		if len(got) < 3 || got[1].Event != "tie.second" || got[2].Event != "tie.first" {
			t.Errorf("order = %v, want tie.second before tie.first", auditEvents(got))
		}
	})
	t.Run("invalid", func(t *testing.T) {
		for _, r := range []persistence.AuditRecord{
			{Event: "x", ServerID: ptr("not-a-uuid")},
			{Event: "x", Details: json.RawMessage(`{broken`)},
			{Event: strings.Repeat("e", 65)},
		} {
			err := s.InsertAudit(ctx, r)
			if err == nil || errors.Is(err, persistence.ErrNotFound) || errors.Is(err, persistence.ErrAlreadyExists) {
				t.Errorf("InsertAudit(%s): %v, want a validation error", dump(r), err)
			}
		}
	})
}

func auditEvents(recs []persistence.AuditRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Event
	}
	return out
}

func equalAudit(t *testing.T, want, got persistence.AuditRecord) {
	t.Helper()
	requireUTC(t, "audit "+got.Event, &got.Timestamp)
	if got.ID <= 0 {
		t.Errorf("audit %s: id %d", got.Event, got.ID)
	}
	if !jsonEqual(want.Details, got.Details) {
		t.Errorf("audit %s: details %s, want %s", want.Event, got.Details, want.Details)
	}
	if want.ServerID != nil {
		want.ServerID = ptr(strings.ToLower(*want.ServerID))
	}
	want.ID, want.Details, want.Timestamp = got.ID, nil, normTime(storedTime(want.Timestamp))
	got.Details, got.Timestamp = nil, normTime(got.Timestamp)
	if !reflect.DeepEqual(want, got) {
		t.Errorf("audit mismatch\n got %s\nwant %s", dump(got), dump(want))
	}
}
