package classify_test

import (
	"slices"
	"testing"

	"github.com/mcpgw/aggregator/search/classify"
)

func ref(id int64, server string) classify.Ref {
	return classify.Ref{ID: id, Server: server, Name: "t"}
}

// drain hands out everything Next gives now.
func drain(q *classify.Queue) []int64 {
	var out []int64
	for {
		r, ok := q.Next()
		if !ok {
			return out
		}
		out = append(out, r.ID)
	}
}

func TestQueue(t *testing.T) {
	type backlog struct{ queued, running, failed int }
	tests := []struct {
		name    string
		limit   int
		run     func(t *testing.T, q *classify.Queue) []int64 // returns the ids handed out last
		started []int64
		backlog backlog
		retry   bool
	}{
		{"at most limit run", 2, func(t *testing.T, q *classify.Queue) []int64 {
			for i := int64(1); i <= 3; i++ {
				q.Enqueue(ref(i, "s"), false)
			}
			return drain(q)
		}, []int64{1, 2}, backlog{1, 2, 0}, false},
		{"queued once", 5, func(t *testing.T, q *classify.Queue) []int64 {
			q.Enqueue(ref(1, "s"), false)
			q.Enqueue(ref(1, "s"), true)
			return drain(q)
		}, []int64{1}, backlog{0, 1, 0}, false},
		{"forced while running runs again", 1, func(t *testing.T, q *classify.Queue) []int64 {
			q.Enqueue(ref(1, "s"), false)
			drain(q)
			q.Enqueue(ref(1, "s"), true)
			q.Finish(1, classify.OutcomeClassified)
			return drain(q)
		}, []int64{1}, backlog{0, 1, 0}, false},
		{"not forced while running: once", 1, func(t *testing.T, q *classify.Queue) []int64 {
			q.Enqueue(ref(1, "s"), false)
			drain(q)
			q.Enqueue(ref(1, "s"), false)
			q.Finish(1, classify.OutcomeClassified)
			return drain(q)
		}, nil, backlog{0, 0, 0}, false},
		{"failed waits for the retry", 5, func(t *testing.T, q *classify.Queue) []int64 {
			q.Enqueue(ref(1, "s"), false)
			q.Enqueue(ref(2, "s"), false)
			drain(q)
			q.Finish(1, classify.OutcomeFailed)
			q.Finish(2, classify.OutcomeFailed)
			return drain(q)
		}, nil, backlog{0, 0, 2}, true},
		{"probe goes first, and its answer queues every failed tool", 1, func(t *testing.T, q *classify.Queue) []int64 {
			q.SeedFailed([]classify.Ref{ref(3, "s"), ref(2, "s")})
			q.Enqueue(ref(9, "s"), false)
			q.StartProbe()
			if got := drain(q); !slices.Equal(got, []int64{2}) {
				t.Fatalf("probe started %v, want [2]", got)
			}
			if res := q.Finish(2, classify.OutcomeUnclassified); res.Recovered != 1 {
				t.Errorf("Recovered = %d, want 1", res.Recovered)
			}
			return drain(q)
		}, []int64{9}, backlog{1, 1, 0}, false},
		{"a gone probe gives way to the next failed tool", 1, func(t *testing.T, q *classify.Queue) []int64 {
			q.SeedFailed([]classify.Ref{ref(4, "s"), ref(5, "s")})
			q.StartProbe()
			drain(q)
			q.Finish(4, classify.OutcomeGone)
			return drain(q)
		}, []int64{5}, backlog{0, 1, 0}, false},
		{"removed tools leave the queue and the failed", 5, func(t *testing.T, q *classify.Queue) []int64 {
			q.SeedFailed([]classify.Ref{ref(1, "s")})
			q.Enqueue(ref(2, "s"), false)
			q.Enqueue(ref(3, "s"), false)
			q.Remove([]int64{1, 2})
			return drain(q)
		}, []int64{3}, backlog{0, 1, 0}, false},
		{"removed server", 1, func(t *testing.T, q *classify.Queue) []int64 {
			q.SeedFailed([]classify.Ref{ref(1, "a")})
			q.Enqueue(ref(2, "a"), false)
			q.Enqueue(ref(3, "b"), false)
			q.Enqueue(ref(4, "a"), false)
			q.RemoveServer("a")
			return drain(q)
		}, []int64{3}, backlog{0, 1, 0}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := classify.NewQueue(tt.limit)
			if got := tt.run(t, q); !slices.Equal(got, tt.started) {
				t.Errorf("started %v, want %v", got, tt.started)
			}
			queued, running, failed := q.Backlog()
			if got := (backlog{queued, running, failed}); got != tt.backlog {
				t.Errorf("backlog = %+v, want %+v", got, tt.backlog)
			}
			if q.NeedsRetry() != tt.retry {
				t.Errorf("NeedsRetry = %v, want %v", q.NeedsRetry(), tt.retry)
			}
		})
	}
}

// A server's finished tools are announced together when its last one settles, or by the flush tick before.
func TestQueueAnnounce(t *testing.T) {
	q := classify.NewQueue(5)
	for i := int64(1); i <= 3; i++ {
		q.Enqueue(ref(i, "s"), false)
	}
	drain(q)
	if res := q.Finish(1, classify.OutcomeClassified); res.Last || !res.Waiting {
		t.Fatalf("first of three: %+v, want waiting, not last", res)
	}
	if got := q.DoneServers(); !slices.Equal(got, []string{"s"}) {
		t.Fatalf("DoneServers = %v", got)
	}
	if got := q.TakeDone("s"); !slices.Equal(got, []int64{1}) {
		t.Fatalf("TakeDone = %v, want [1]", got)
	}
	if res := q.Finish(2, classify.OutcomeInterrupted); res.Last || res.Waiting {
		t.Fatalf("interrupted: %+v, want nothing to announce", res)
	}
	if res := q.Finish(3, classify.OutcomeFailed); !res.Last {
		t.Fatalf("last of three: %+v, want last", res)
	}
	if got := q.TakeDone("s"); !slices.Equal(got, []int64{3}) {
		t.Fatalf("TakeDone = %v, want [3]", got)
	}
	if res := q.Finish(3, classify.OutcomeClassified); res.Known {
		t.Error("a tool not running was finished again")
	}
}
