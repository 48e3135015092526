//go:build !unix

package search

import "time"

// processCPU is unavailable here; benchmarks then report no CPU figure.
func processCPU() time.Duration { return 0 }
