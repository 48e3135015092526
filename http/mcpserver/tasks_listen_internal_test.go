package mcpserver

import (
	"sync"
	"testing"
)

// TestTaskListenersAdmitHoldsTheCap: listens opened at once by one caller pass the cap no further than its bound
// (the count and the add are one step), another caller's are not counted against it, and a removed listen frees
// its place.
func TestTaskListenersAdmitHoldsTheCap(t *testing.T) {
	ls := newTaskListeners()
	const limit, tries = 16, 64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var admitted []*taskListener
	for range tries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := &taskListener{owner: "alice"}
			if ls.admit(l, limit) {
				mu.Lock()
				admitted = append(admitted, l)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(admitted) != limit {
		t.Fatalf("%d concurrent listens admitted %d, want the cap %d", tries, len(admitted), limit)
	}
	if !ls.admit(&taskListener{owner: "bob"}, limit) {
		t.Error("another caller's listen refused: alice's listens counted against bob")
	}
	if ls.admit(&taskListener{owner: "alice"}, limit) {
		t.Error("alice's listen past the cap admitted")
	}
	ls.remove(admitted[0])
	if !ls.admit(&taskListener{owner: "alice"}, limit) {
		t.Error("alice's listen refused after one of hers closed")
	}
	if !ls.admit(&taskListener{owner: ""}, 0) {
		t.Error("a listen with no bound refused")
	}
}
