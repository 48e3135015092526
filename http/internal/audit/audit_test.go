package audit

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// recorder is a store that keeps the audit records it is given (and fails when told to).
type recorder struct {
	persistence.Store
	got  []persistence.AuditRecord
	errs []error // the context's state during each insert
	fail bool
}

func (r *recorder) InsertAudit(ctx context.Context, a persistence.AuditRecord) error {
	r.got = append(r.got, a)
	r.errs = append(r.errs, ctx.Err())
	if r.fail {
		return errors.New("down")
	}
	return nil
}

func TestRecord(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	tests := []struct {
		name    string
		e       Entry
		want    persistence.AuditRecord
		details string
	}{
		{"rest, with a server", Entry{Event: ServerRegistered, Actor: "ops", IP: "1.2.3.4", Via: "rest", ServerID: "id",
			ServerName: "s", Details: map[string]any{"auto_connect": true}, At: at},
			persistence.AuditRecord{Event: ServerRegistered, Actor: "ops", IPAddress: "1.2.3.4", Timestamp: at.UTC()},
			`{"auto_connect":true,"via":"rest"}`},
		{"mcp, anonymous, no server", Entry{Event: ServerRemoved, Via: "mcp", At: at},
			persistence.AuditRecord{Event: ServerRemoved, Actor: "anonymous", Timestamp: at.UTC()}, `{"via":"mcp"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := &recorder{}
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // a client that hung up does not lose the record
			Record(ctx, st, nil, tc.e)
			if len(st.got) != 1 {
				t.Fatalf("%d records", len(st.got))
			}
			r := st.got[0]
			if string(r.Details) != tc.details || st.errs[0] != nil {
				t.Errorf("details %s, ctx err %v", r.Details, st.errs[0])
			}
			if (r.ServerID != nil) != (tc.e.ServerID != "") || (r.ServerName != nil) != (tc.e.ServerName != "") {
				t.Errorf("server %v %v", r.ServerID, r.ServerName)
			}
			r.Details, r.ServerID, r.ServerName = nil, nil, nil
			if b, w := mustJSON(r), mustJSON(tc.want); b != w {
				t.Errorf("record %s, want %s", b, w)
			}
		})
	}
	st := &recorder{fail: true}
	Record(context.Background(), st, nil, Entry{Event: ToolsRefreshed, Via: "rest"}) // logged, not returned
	if len(st.got) != 1 || st.got[0].Timestamp.IsZero() {
		t.Errorf("failing store: %+v", st.got)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
