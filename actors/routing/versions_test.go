package routing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors/routing"
)

func TestVersions(t *testing.T) {
	tests := []struct {
		name                 string
		run                  func(b *routing.Versions)
		served, indexed      uint64
		searchable, awaitAll bool // AwaitIndexed of s1, and of every server, returns at once
	}{
		{"nothing", func(*routing.Versions) {}, 0, 0, true, true},
		{"issued only", func(b *routing.Versions) { b.Next("s1") }, 0, 0, true, true},
		{"published, not indexed", func(b *routing.Versions) {
			b.Publish(&routing.ServedDelta{ServerID: "s1", Version: b.Next("s1")})
		}, 1, 0, false, false},
		{"indexed", func(b *routing.Versions) {
			b.Publish(&routing.ServedDelta{ServerID: "s1", Version: b.Next("s1")})
			b.Ack("s1", 1)
		}, 1, 1, true, true},
		{"ack never goes back", func(b *routing.Versions) {
			b.Publish(&routing.ServedDelta{ServerID: "s1", Version: 3})
			b.Ack("s1", 3)
			b.Ack("s1", 2)
		}, 3, 3, true, true},
		{"another server not indexed", func(b *routing.Versions) {
			b.Publish(&routing.ServedDelta{ServerID: "s2", Version: 1})
		}, 0, 0, true, false},
		{"forgotten", func(b *routing.Versions) {
			b.Publish(&routing.ServedDelta{ServerID: "s1", Version: 2})
			b.Forget("s1")
		}, 0, 0, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := routing.NewVersions()
			tt.run(b)
			if s, i := b.Of("s1"); s != tt.served || i != tt.indexed {
				t.Errorf("Of(s1) = %d, %d, want %d, %d", s, i, tt.served, tt.indexed)
			}
			for _, c := range []struct {
				ids  []string
				want bool
			}{{[]string{"s1"}, tt.searchable}, {nil, tt.awaitAll}} {
				ctx, cancel := context.WithCancel(context.Background())
				cancel() // answer now: done already, or the context's error
				err := b.AwaitIndexed(ctx, c.ids)
				if got := err == nil; got != c.want {
					t.Errorf("AwaitIndexed(%v) = %v, want done %v", c.ids, err, c.want)
				}
			}
		})
	}
}

func TestVersionsAwaitAck(t *testing.T) {
	b := routing.NewVersions()
	v := b.Next("s1")
	if v != 1 || b.Current("s1") != 1 {
		t.Fatalf("Next = %d, Current = %d, want 1, 1", v, b.Current("s1"))
	}
	b.Publish(&routing.ServedDelta{ServerID: "s1", Version: v})
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		done <- b.AwaitIndexed(ctx, nil)
	}()
	select {
	case err := <-done:
		t.Fatalf("AwaitIndexed returned %v before the ack", err)
	case <-time.After(20 * time.Millisecond):
	}
	b.Ack("s1", v)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b.Publish(&routing.ServedDelta{ServerID: "s1", Version: 2})
	if err := b.AwaitIndexed(ctx, []string{"s1"}); !errors.Is(err, context.Canceled) {
		t.Errorf("AwaitIndexed with version 2 unacknowledged = %v, want context.Canceled", err)
	}
}
