package sqlstore

import (
	"context"

	"github.com/mcpgw/aggregator/persistence"
	"github.com/mcpgw/aggregator/persistence/internal/storeutil"
)

// Log implements the audit log and the servers' connection history reads of persistence.Store over a Dialect.
type Log struct {
	d *Dialect
}

// NewLog returns the audit and history methods over d.
func NewLog(d *Dialect) Log { return Log{d: d} }

// InsertAudit implements persistence.Store: one statement, outside a transaction.
func (l Log) InsertAudit(ctx context.Context, r persistence.AuditRecord) (err error) {
	d := l.d
	defer d.wrap(&err, "insert audit %s", r.Event)
	sid, err := storeutil.AuditServerID(r.ServerID)
	if err != nil {
		return err
	}
	_, err = d.Writer.Exec(ctx, d.Q.InsertAudit, r.Event, sid, r.ServerName, r.Actor, r.IPAddress, d.JSON(r.Details),
		d.Time(storeutil.NormTime(r.Timestamp)))
	return err
}

// ListAudit returns one page of audit records, newest first (by timestamp, then id), and the total, from one
// snapshot.
func (l Log) ListAudit(ctx context.Context, limit, offset int) (out []persistence.AuditRecord, total int, err error) {
	d := l.d
	defer d.wrap(&err, "list audit")
	err = d.ReadTx(ctx, func(tx Tx) error {
		if err := tx.QueryRow(ctx, d.Q.CountAudit).Scan(&total); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, d.Q.ListAudit, d.limitArg(limit), max(offset, 0))
		if err != nil {
			return err
		}
		out, err = collect(rows, func(row Row) (persistence.AuditRecord, error) {
			var r persistence.AuditRecord
			var details []byte
			err := row.Scan(&r.ID, &r.Event, &r.ServerID, &r.ServerName, &r.Actor, &r.IPAddress, &details,
				Time(&r.Timestamp))
			r.Details = details
			return r, err
		})
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	return out, total, nil
}

// ListHistory returns the server's newest history rows first; limit <= 0 returns them all. An unknown server is
// ErrNotFound.
func (l Log) ListHistory(ctx context.Context, serverID string, limit int) (out []persistence.HistoryEvent, err error) {
	d := l.d
	defer d.wrap(&err, "list history of %q", serverID)
	uid, err := storeutil.ServerID(serverID)
	if err != nil {
		return nil, err
	}
	err = d.ReadTx(ctx, func(tx Tx) error {
		if err := d.serverExists(ctx, tx, uid, serverID); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, d.Q.ListHistory, uid, d.limitArg(limit))
		if err != nil {
			return err
		}
		out, err = collect(rows, func(row Row) (persistence.HistoryEvent, error) {
			var e persistence.HistoryEvent
			var details []byte
			err := row.Scan(&e.ID, &e.ServerID, &e.EventType, &details, Time(&e.Timestamp))
			e.Details = details
			return e, err
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
