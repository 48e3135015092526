package main

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func cpuSet(cpus ...int) unix.CPUSet {
	var s unix.CPUSet
	for _, c := range cpus {
		s.Set(c)
	}
	return s
}

func TestHalveCPUs(t *testing.T) {
	for _, tc := range []struct {
		name          string
		all           unix.CPUSet
		load, gateway string
		named         string // the load's CPUs as describe names them
		fails         bool
	}{
		{name: "two", all: cpuSet(0, 1), load: "0", gateway: "1", named: "CPU 0, daemon and peers on CPU 1"},
		{name: "odd: the gateways get the extra one", all: cpuSet(0, 1, 2), load: "0", gateway: "1,2", named: "CPU 0, daemon and peers on CPUs 1,2"},
		{name: "gaps in the mask", all: cpuSet(2, 5, 7, 9), load: "2,5", gateway: "7,9", named: "CPUs 2,5, daemon and peers on CPUs 7,9"},
		{name: "high numbers", all: cpuSet(64, 65, 130, 131), load: "64,65", gateway: "130,131", named: "CPUs 64,65,"},
		{name: "one CPU", all: cpuSet(3), fails: true},
		{name: "none", all: cpuSet(), fails: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := halveCPUs(tc.all)
			if tc.fails {
				if err == nil {
					t.Fatalf("halveCPUs = %s, %s; want an error", cpuList(s.load), cpuList(s.gateway))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cpuList(s.load); got != tc.load {
				t.Errorf("load on %q, want %q", got, tc.load)
			}
			if got := cpuList(s.gateway); got != tc.gateway {
				t.Errorf("gateways on %q, want %q", got, tc.gateway)
			}
			if got, want := s.describe(), "load generator and backend on "+tc.named; !strings.HasPrefix(got, want) {
				t.Errorf("describe() = %q, want it to start %q", got, want)
			}
		})
	}
}

// TestNoSplitMovesNothing: without -split (a nil split) this process keeps its CPUs.
func TestNoSplitMovesNothing(t *testing.T) {
	var before, after unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		t.Fatal(err)
	}
	var s *cpuSplit
	if err := s.onGateway(); err != nil {
		t.Fatal(err)
	}
	if err := s.onLoad(); err != nil {
		t.Fatal(err)
	}
	if err := unix.SchedGetaffinity(0, &after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("CPUs %s before, %s after", cpuList(before), cpuList(after))
	}
}

// TestCPUSplitPlacesProcesses: a process started while on the gateways' CPUs runs there, and afterwards every
// thread of this process is back on the load's CPUs with its scheduler sized to them.
func TestCPUSplitPlacesProcesses(t *testing.T) {
	var orig unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		t.Fatal(err)
	}
	if orig.Count() < 2 {
		t.Skipf("needs 2 CPUs, this process may use %d", orig.Count())
	}
	procs := runtime.GOMAXPROCS(0)
	t.Cleanup(func() {
		if err := pinProcess(&orig); err != nil {
			t.Error(err)
		}
		runtime.GOMAXPROCS(procs)
	})
	s, err := newCPUSplit()
	if err != nil {
		t.Fatal(err)
	}
	childCPUs := func() unix.CPUSet {
		t.Helper()
		out, err := exec.Command("sh", "-c", "grep Cpus_allowed_list /proc/self/status").Output()
		if err != nil {
			t.Fatal(err)
		}
		return parseCPUList(t, strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "Cpus_allowed_list:")))
	}

	if err := s.onGateway(); err != nil {
		t.Fatal(err)
	}
	if got := childCPUs(); got != s.gateway {
		t.Errorf("a process started on the gateways' side runs on %s, want %s", cpuList(got), cpuList(s.gateway))
	}
	if err := s.onLoad(); err != nil {
		t.Fatal(err)
	}
	if got := childCPUs(); got != s.load {
		t.Errorf("a process started on the load's side runs on %s, want %s", cpuList(got), cpuList(s.load))
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		var cur unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &cur); err == nil && cur != s.load {
			t.Errorf("thread %d runs on %s, want %s", tid, cpuList(cur), cpuList(s.load))
		}
	}
	if got := runtime.GOMAXPROCS(0); got != s.load.Count() {
		t.Errorf("GOMAXPROCS %d on the load's side, want %d", got, s.load.Count())
	}
}

// parseCPUList reads the kernel's list form ("0-2,5").
func parseCPUList(t *testing.T, list string) unix.CPUSet {
	t.Helper()
	var s unix.CPUSet
	for _, part := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			t.Fatalf("CPU list %q: %v", list, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				t.Fatalf("CPU list %q: %v", list, err)
			}
		}
		for c := a; c <= b; c++ {
			s.Set(c)
		}
	}
	return s
}
