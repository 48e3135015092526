package api

import (
	"context"
	"slices"

	"github.com/mcpgw/aggregator/persistence"
)

// InsertAudit and ListAudit complete the fake store for the audit log: newest first, ids from 1.
func (f *fakeStore) InsertAudit(_ context.Context, r persistence.AuditRecord) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	r.ID = int64(len(f.audit) + 1)
	f.audit = append(f.audit, r)
	return nil
}

func (f *fakeStore) ListAudit(_ context.Context, limit, offset int) ([]persistence.AuditRecord, int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	all := slices.Clone(f.audit)
	slices.Reverse(all)
	total := len(all)
	all = all[min(offset, total):]
	if limit > 0 && len(all) > limit {
		all = all[:limit]
	}
	return all, total, nil
}

func (f *fakeStore) auditRecords() []persistence.AuditRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.audit)
}
