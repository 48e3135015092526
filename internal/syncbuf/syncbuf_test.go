package syncbuf_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/mcpgw/aggregator/internal/syncbuf"
)

func TestBufferConcurrentWrites(t *testing.T) {
	tests := []struct {
		name    string
		writers int
		line    string
	}{
		{name: "one writer", writers: 1, line: "a\n"},
		{name: "many writers", writers: 16, line: "line\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b syncbuf.Buffer
			var wg sync.WaitGroup
			for range tc.writers {
				wg.Go(func() {
					for range 100 {
						if n, err := b.Write([]byte(tc.line)); err != nil || n != len(tc.line) {
							t.Errorf("Write: %d, %v", n, err)
						}
						_ = b.String()
					}
				})
			}
			wg.Wait()
			if got, want := b.String(), strings.Repeat(tc.line, tc.writers*100); got != want {
				t.Fatalf("got %d bytes, want %d", len(got), len(want))
			}
		})
	}
}
