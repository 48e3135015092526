package supervision

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

type boom struct{}
type ping struct{}

// crashy counts its starts and panics on boom.
type crashy struct{ starts *atomic.Int32 }

func (c *crashy) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		c.starts.Add(1)
	case *boom:
		panic("boom")
	case *ping:
		ctx.Respond("pong")
	}
}

func TestStrategyRestartsOnlyTheFailedChildAfterBackoff(t *testing.T) {
	system := actor.NewActorSystem()
	defer system.Shutdown()

	var mu sync.Mutex
	var delays []time.Duration
	strategy := NewStrategy(Backoff{Initial: 50 * time.Millisecond, Max: time.Second, Multiplier: 2}, nil,
		func(_ *actor.PID, _ int, d time.Duration, _ any) { mu.Lock(); delays = append(delays, d); mu.Unlock() })

	var aStarts, bStarts atomic.Int32
	children := make(chan [2]*actor.PID, 1)
	parent := actor.PropsFromFunc(func(ctx actor.Context) {
		if _, ok := ctx.Message().(*actor.Started); ok {
			a := ctx.Spawn(actor.PropsFromProducer(func() actor.Actor { return &crashy{starts: &aStarts} }))
			b := ctx.Spawn(actor.PropsFromProducer(func() actor.Actor { return &crashy{starts: &bStarts} }))
			children <- [2]*actor.PID{a, b}
		}
	}, actor.WithSupervisor(strategy))
	system.Root.Spawn(parent)
	pids := <-children

	for i := 0; i < 3; i++ {
		system.Root.Send(pids[0], &boom{})
		// While the failed child waits out its backoff, its sibling keeps answering.
		if _, err := system.Root.RequestFuture(pids[1], &ping{}, time.Second).Result(); err != nil {
			t.Fatalf("sibling did not answer while the other child was failing: %v", err)
		}
		deadline := time.Now().Add(3 * time.Second)
		for aStarts.Load() < int32(i+2) {
			if time.Now().After(deadline) {
				t.Fatalf("child was not restarted after failure %d (starts=%d)", i+1, aStarts.Load())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if got := bStarts.Load(); got != 1 {
		t.Fatalf("sibling restarted %d times, want never", got-1)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}
	if len(delays) != len(want) {
		t.Fatalf("delays = %v, want %v", delays, want)
	}
	for i := range want {
		if delays[i] != want[i] {
			t.Fatalf("delay %d = %v, want %v (exponential)", i, delays[i], want[i])
		}
	}
}
