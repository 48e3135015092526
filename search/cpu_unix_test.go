//go:build unix

package search

import (
	"syscall"
	"time"
)

// processCPU is the CPU time used by the process so far (all threads, GC included), so that benchmarks can report
// cost independently of other load on a shared machine.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
