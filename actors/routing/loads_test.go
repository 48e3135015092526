package routing

import (
	"slices"
	"testing"
)

func keys(runs []Run) []string {
	out := make([]string, 0, len(runs))
	for _, r := range runs {
		out = append(out, r.Key)
	}
	return out
}

func TestLoadsBoundsRunsAndQueuesTheRest(t *testing.T) {
	l := NewLoads(2)
	var started []Run
	for i, k := range []string{"a", "b", "c", "d"} {
		started = append(started, l.Request(k, k, false, uint64(i+1))...)
	}
	if got := keys(started); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("started %v, want [a b] (limit 2)", got)
	}
	if next, ok := l.Finish("a", started[0].Token); !ok || len(next) != 0 {
		t.Fatalf("Finish(a) = %v, %v; want no next run, ok", next, ok)
	}
	if got := keys(l.Done()); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("Done started %v, want [c]", got)
	}
	if got := l.Oldest(99); got != 2 {
		t.Fatalf("Oldest = %d, want 2 (b's change is not applied yet)", got)
	}
}

func TestLoadsOweAnotherReadAfterAChangeDuringOne(t *testing.T) {
	tests := []struct {
		name         string
		registration []bool // the registration flag of each request after the first
		wantAgain    bool
		wantReg      bool
	}{
		{name: "no change meanwhile"},
		{name: "a tools change", registration: []bool{false}, wantAgain: true},
		{name: "a registration among changes", registration: []bool{false, true, false}, wantAgain: true, wantReg: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLoads(4)
			first := l.Request("s", "s", false, 1)
			if len(first) != 1 || first[0].Registration {
				t.Fatalf("first request started %+v, want one run without registration", first)
			}
			for i, reg := range tt.registration {
				if runs := l.Request("s", "s", reg, uint64(i+2)); len(runs) != 0 {
					t.Fatalf("a request during a run started %v", runs)
				}
			}
			again, ok := l.Current("s", first[0].Token)
			if !ok || again != tt.wantAgain {
				t.Fatalf("Current = again %v ok %v, want again %v ok true", again, ok, tt.wantAgain)
			}
			if _, ok := l.Current("s", first[0].Token+100); ok {
				t.Fatal("a superseded token is current")
			}
			next, ok := l.Finish("s", first[0].Token)
			if !ok {
				t.Fatal("Finish of the current run: not ok")
			}
			l.Done()
			if (len(next) == 1) != tt.wantAgain {
				t.Fatalf("next runs %v, want one: %v", next, tt.wantAgain)
			}
			if tt.wantAgain {
				if next[0].Registration != tt.wantReg || next[0].Token == first[0].Token {
					t.Fatalf("next run %+v, want registration %v and a new token", next[0], tt.wantReg)
				}
				if got := l.Oldest(99); got != 2 {
					t.Fatalf("Oldest = %d, want 2 (the first change after the run started)", got)
				}
			} else if l.Pending("s") {
				t.Fatal("s still pending after its only run finished")
			}
		})
	}
}

func TestLoadsDropAndReset(t *testing.T) {
	l := NewLoads(1)
	a := l.Request("a", "a", false, 1)
	l.Request("b", "b", true, 2) // queued
	l.Drop("a")
	if _, ok := l.Finish("a", a[0].Token); ok {
		t.Fatal("a dropped run finished ok")
	}
	if got := l.Done(); len(got) != 1 || got[0].Key != "b" || !got[0].Registration {
		t.Fatalf("Done after a's result = %+v, want b's run with registration", got)
	}
	l.Reset()
	if l.Pending("b") || l.Oldest(7) != 7 {
		t.Fatal("Reset kept a read")
	}
}
