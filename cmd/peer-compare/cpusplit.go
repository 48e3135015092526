package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// cpuSplit is -split: the processes of a run on two disjoint halves of the CPUs this program may use. The load
// generator (this process) and the backend get the first half; the daemon and every peer and floor the second,
// as a gateway runs in production, on CPUs of its own. Without it every process shares every CPU, and a path's
// ratio to direct's calls/s measures the CPU the whole path costs (client, gateway and backend together); with it
// the ratio measures whether the gateway, given its own CPUs, holds back what the client and backend can do.
type cpuSplit struct {
	load, gateway unix.CPUSet
}

// newCPUSplit halves the CPUs this process may run on (its affinity mask): the first half for the load, the rest
// for the gateways. It needs at least two.
func newCPUSplit() (*cpuSplit, error) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return nil, fmt.Errorf("-split: read this process's CPUs: %w", err)
	}
	return halveCPUs(all)
}

// halveCPUs gives the first half of the CPUs in all (rounded down) to the load and the rest to the gateways.
func halveCPUs(all unix.CPUSet) (*cpuSplit, error) {
	n := all.Count()
	if n < 2 {
		return nil, fmt.Errorf("-split needs at least 2 CPUs, this process may use %d", n)
	}
	s := &cpuSplit{}
	seen := 0
	for cpu := 0; seen < n; cpu++ {
		if !all.IsSet(cpu) {
			continue
		}
		if seen < n/2 {
			s.load.Set(cpu)
		} else {
			s.gateway.Set(cpu)
		}
		seen++
	}
	return s, nil
}

// onLoad moves this process to the load's CPUs and sizes its scheduler to them, as if it had started there. On a
// nil split (no -split) it does nothing.
func (s *cpuSplit) onLoad() error {
	if s == nil {
		return nil
	}
	if err := pinProcess(&s.load); err != nil {
		return err
	}
	runtime.GOMAXPROCS(s.load.Count())
	return nil
}

// onGateway moves this process to the gateways' CPUs: processes it starts until the next onLoad inherit them (a
// child starts with the CPUs of the thread that forked it), and their runtimes size themselves to them. On a nil
// split it does nothing.
func (s *cpuSplit) onGateway() error {
	if s == nil {
		return nil
	}
	return pinProcess(&s.gateway)
}

// describe names both halves for the table's header.
func (s *cpuSplit) describe() string {
	return fmt.Sprintf("load generator and backend on %s, daemon and peers on %s (-split)", cpuNames(s.load), cpuNames(s.gateway))
}

// cpuNames is "CPU 3" or "CPUs 2,3".
func cpuNames(set unix.CPUSet) string {
	if set.Count() == 1 {
		return "CPU " + cpuList(set)
	}
	return "CPUs " + cpuList(set)
}

// pinProcess sets the CPUs of every thread of this process. A thread the runtime starts meanwhile inherits the
// CPUs of the thread that started it, which may not have been moved yet, so it goes over the threads again until
// a pass moves none.
func pinProcess(set *unix.CPUSet) error {
	for pass := 0; pass < 20; pass++ {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("-split: list this process's threads: %w", err)
		}
		moved := 0
		for _, task := range tasks {
			tid, err := strconv.Atoi(task.Name())
			if err != nil {
				continue
			}
			var cur unix.CPUSet
			if err := unix.SchedGetaffinity(tid, &cur); err != nil {
				continue // the thread ended
			}
			if cur == *set {
				continue
			}
			if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("-split: move thread %d: %w", tid, err)
			}
			moved++
		}
		if moved == 0 {
			return nil
		}
	}
	return errors.New("-split: this process's threads kept moving off their CPUs")
}

// cpuList writes a set as a comma-separated list of CPU numbers.
func cpuList(set unix.CPUSet) string {
	var b []byte
	for cpu, seen := 0, 0; seen < set.Count(); cpu++ {
		if set.IsSet(cpu) {
			if seen > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(cpu), 10)
			seen++
		}
	}
	return string(b)
}
