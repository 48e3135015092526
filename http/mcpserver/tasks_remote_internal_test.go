package mcpserver

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/persistence"
)

// TestRemoteInputsWaiting: the other nodes' tasks heard input_required are kept by owner until they move on or
// expire (an announced task's expiry is its creation plus its TTL); past a size, the expired ones are forgotten.
func TestRemoteInputsWaiting(t *testing.T) {
	now := time.Now()
	task := func(id, owner string, expires time.Time) persistence.Task {
		return persistence.Task{ID: id, Owner: owner, Status: persistence.TaskInputRequired, ExpiresAt: expires}
	}
	tests := []struct {
		name  string
		do    func(r *remoteInputs)
		owner string
		want  []string
	}{
		{"heard", func(r *remoteInputs) { r.wait(task("t1", "alice", now.Add(time.Hour))) }, "alice", []string{"t1"}},
		{"another owner's", func(r *remoteInputs) { r.wait(task("t1", "bob", now.Add(time.Hour))) }, "alice", nil},
		{"moved on", func(r *remoteInputs) {
			r.wait(task("t1", "alice", now.Add(time.Hour)))
			r.wait(task("t2", "alice", now.Add(time.Hour)))
			r.unwait("alice", "t1")
		}, "alice", []string{"t2"}},
		{"expired", func(r *remoteInputs) { r.wait(task("t1", "alice", now.Add(-time.Second))) }, "alice", nil},
		{"announced: created plus TTL", func(r *remoteInputs) {
			r.wait(persistence.Task{ID: "t1", Owner: "alice", CreatedAt: now, TTL: time.Hour})
			r.wait(persistence.Task{ID: "t2", Owner: "alice", CreatedAt: now.Add(-2 * time.Hour), TTL: time.Hour})
		}, "alice", []string{"t1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRemoteInputs()
			tc.do(r)
			got := r.waitingFor(tc.owner)
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("waiting for %s = %v, want %v", tc.owner, got, tc.want)
			}
		})
	}

	t.Run("pruned", func(t *testing.T) {
		r := newRemoteInputs()
		for i := range minWaitingPrune {
			r.wait(task(fmt.Sprint("old", i), fmt.Sprint("owner", i%7), now.Add(-time.Second)))
		}
		r.wait(task("live", "alice", now.Add(time.Hour)))
		if r.size != 1 || len(r.waiting) != 1 || len(r.waiting["alice"]) != 1 {
			t.Errorf("after the prune: %d tasks of %d owners, want alice's live one", r.size, len(r.waiting))
		}
	})
}
