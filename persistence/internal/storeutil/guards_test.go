package storeutil

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpgw/aggregator/persistence"
)

const canonical = "0190a7b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b"

func TestWrapf(t *testing.T) {
	base := errors.New("boom")
	tests := []struct {
		name string
		in   error
		want string
	}{
		{"nil stays nil", nil, ""},
		{"context added", base, `sqlite: get server "x": boom`},
		{"sentinel kept", NotFound("server", "x"), `sqlite: get server "x": server "x": not found`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.in
			Wrapf(&err, "sqlite: get server %q", "x")
			if tc.in == nil {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			if err.Error() != tc.want || !errors.Is(err, tc.in) {
				t.Fatalf("got %q (Is %v), want %q wrapping the error", err, errors.Is(err, tc.in), tc.want)
			}
		})
	}
}

func TestServerIDs(t *testing.T) {
	upper := strings.ToUpper(canonical)
	tests := []struct {
		name     string
		id       string
		want     string
		optional string // OptionalServerID's answer
		notFound bool   // ServerID's error is ErrNotFound
	}{
		{"canonical", canonical, canonical, canonical, false},
		{"upper case", upper, canonical, canonical, false},
		{"braces", "{" + canonical + "}", canonical, canonical, false},
		{"not a UUID", "server-1", "", "", true},
		{"empty", "", "", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ServerID(tc.id)
			if got != tc.want || errors.Is(err, persistence.ErrNotFound) != tc.notFound || (err == nil) == tc.notFound {
				t.Fatalf("ServerID(%q) = %q, %v", tc.id, got, err)
			}
			opt, err := OptionalServerID(tc.id)
			wantErr := tc.notFound && tc.id != ""
			if opt != tc.optional || (err != nil) != wantErr {
				t.Fatalf("OptionalServerID(%q) = %q, %v", tc.id, opt, err)
			}
		})
	}
}

func TestAuditServerID(t *testing.T) {
	ptr := func(s string) *string { return &s }
	tests := []struct {
		name    string
		in      *string
		want    *string
		wantErr bool
	}{
		{"none", nil, nil, false},
		{"canonicalised", ptr(strings.ToUpper(canonical)), ptr(canonical), false},
		{"refused", ptr("server-1"), nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := AuditServerID(tc.in)
			if (err != nil) != tc.wantErr || errors.Is(err, persistence.ErrNotFound) {
				t.Fatalf("error %v, want error %v (never ErrNotFound)", err, tc.wantErr)
			}
			if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPrepareCreate(t *testing.T) {
	zoned := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.FixedZone("X", 3600))
	stored := zoned.UTC().Truncate(time.Microsecond)
	tests := []struct {
		name    string
		in      persistence.Server
		check   func(t *testing.T, in, out persistence.Server)
		wantErr bool
	}{
		{"defaults", persistence.Server{Name: "a"}, func(t *testing.T, _, out persistence.Server) {
			u, err := uuid.Parse(out.ID)
			if err != nil || u.Version() != 7 {
				t.Errorf("ID %q is not a UUIDv7", out.ID)
			}
			if out.Status != persistence.StatusDisconnected {
				t.Errorf("Status %q", out.Status)
			}
		}, false},
		{"given values kept", persistence.Server{ID: strings.ToUpper(canonical), Name: "b", Status: persistence.StatusConnected,
			LastHealthCheck: &zoned, ConnectedAt: &zoned, ToolCount: 3}, func(t *testing.T, in, out persistence.Server) {
			if out.ID != canonical || out.Status != persistence.StatusConnected || out.ToolCount != 3 || out.Name != in.Name {
				t.Errorf("got %+v", out)
			}
			if !out.LastHealthCheck.Equal(stored) || out.LastHealthCheck.Location() != time.UTC || !out.ConnectedAt.Equal(stored) {
				t.Errorf("times %v %v, want %v in UTC", out.LastHealthCheck, out.ConnectedAt, stored)
			}
		}, false},
		{"id not a UUID", persistence.Server{ID: "server-1"}, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := Now()
			out, err := PrepareCreate(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if out.RegisteredAt.Before(before) || !out.UpdatedAt.Equal(out.RegisteredAt) || out.RegisteredAt.Location() != time.UTC {
				t.Errorf("RegisteredAt %v, UpdatedAt %v", out.RegisteredAt, out.UpdatedAt)
			}
			tc.check(t, tc.in, out)
		})
	}
}

func TestEmptyPatch(t *testing.T) {
	s := "x"
	tests := []struct {
		name string
		p    persistence.ServerPatch
		want bool
	}{
		{"empty", persistence.ServerPatch{}, true},
		{"name", persistence.ServerPatch{Name: &s}, false},
		{"description", persistence.ServerPatch{Description: &s}, false},
		{"config", persistence.ServerPatch{ConnectionConfig: json.RawMessage(`{}`)}, false},
		{"health url", persistence.ServerPatch{HealthCheckURL: &s}, false},
		{"clear health url", persistence.ServerPatch{ClearHealthCheckURL: true}, false},
	}
	for _, tc := range tests {
		if got := EmptyPatch(tc.p); got != tc.want {
			t.Errorf("%s: EmptyPatch = %v", tc.name, got)
		}
	}
}

func TestPrepareClassificationAndTransition(t *testing.T) {
	c, err := PrepareClassification(persistence.ToolClassification{State: persistence.ClassificationClassified})
	if err != nil || c.SkillIDs == nil {
		t.Fatalf("classification: %+v %v", c, err)
	}
	if _, err := PrepareClassification(persistence.ToolClassification{State: "DONE"}); err == nil {
		t.Fatal("unknown state accepted")
	}
	if _, _, err := PrepareTransition(persistence.Transition{ServerID: canonical}); err == nil {
		t.Fatal("transition without a target status accepted")
	}
	details, at, err := PrepareTransition(persistence.Transition{ServerID: canonical, From: "A", To: "B", Reason: "r"})
	if err != nil || string(details) != `{"from":"A","reason":"r"}` || at.IsZero() {
		t.Fatalf("transition: %s %v %v", details, at, err)
	}
}

func TestOneRow(t *testing.T) {
	if err := OneRow(1, "tool", "7"); err != nil {
		t.Fatal(err)
	}
	if err := OneRow(0, "tool", "7"); !errors.Is(err, persistence.ErrNotFound) || !strings.Contains(err.Error(), `tool "7"`) {
		t.Fatalf("no row: %v", err)
	}
}

// fakeRows is a result set of (string, int) rows; its Close has the signature of *sql.Rows or of pgx.Rows.
type fakeRows struct {
	rows   [][2]any
	i      int
	err    error
	closed bool
}

func (r *fakeRows) Next() bool { r.i++; return r.i <= len(r.rows) }
func (r *fakeRows) Err() error { return r.err }
func (r *fakeRows) Scan(dest ...any) error {
	row := r.rows[r.i-1]
	*dest[0].(*string), *dest[1].(*int) = row[0].(string), row[1].(int)
	return nil
}

type sqlRows struct{ *fakeRows }

func (r sqlRows) Close() error { r.closed = true; return nil }

type pgxRows struct{ *fakeRows }

func (r pgxRows) Close() { r.closed = true }

func TestCollectAndCountByStatus(t *testing.T) {
	data := [][2]any{{persistence.StatusConnected, 2}, {persistence.StatusError, 1}}
	for _, kind := range []string{"sql", "pgx"} {
		t.Run(kind, func(t *testing.T) {
			wrap := func(f *fakeRows) Rows {
				if kind == "sql" {
					return sqlRows{f}
				}
				return pgxRows{f}
			}
			f := &fakeRows{rows: data}
			got, err := Collect(wrap(f), func(row Scanner) (string, error) {
				var s string
				var n int
				err := row.Scan(&s, &n)
				return s, err
			})
			if err != nil || len(got) != 2 || got[1] != persistence.StatusError || !f.closed {
				t.Fatalf("Collect = %v, %v (closed %v)", got, err, f.closed)
			}
			if got, err := Collect(wrap(&fakeRows{}), func(Scanner) (int, error) { return 0, nil }); err != nil || got == nil {
				t.Fatalf("Collect of no rows = %#v, %v; want an empty slice", got, err)
			}
			f = &fakeRows{rows: data}
			counts, err := CountByStatus(wrap(f))
			if err != nil || !f.closed {
				t.Fatalf("CountByStatus: %v (closed %v)", err, f.closed)
			}
			for _, st := range AllStatuses() {
				want := map[string]int{persistence.StatusConnected: 2, persistence.StatusError: 1}[st]
				if n, ok := counts[st]; !ok || n != want {
					t.Errorf("%s: %d (present %v), want %d", st, n, ok, want)
				}
			}
			boom := errors.New("boom")
			if _, err := CountByStatus(wrap(&fakeRows{err: boom})); !errors.Is(err, boom) {
				t.Fatalf("rows error lost: %v", err)
			}
		})
	}
}
