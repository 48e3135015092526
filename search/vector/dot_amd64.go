//go:build amd64 && !purego

package vector

import "golang.org/x/sys/cpu"

// dotAVX2 is implemented in dot_amd64.s; it reads len(a) elements of b.
//
//go:noescape
func dotAVX2(a, b []float32) float32

// dotSIMD bounds-checks b, then runs the AVX2 kernel.
func dotSIMD(a, b []float32) float32 {
	return dotAVX2(a, b[:len(a)])
}

// dotFunc picks the fastest inner product this CPU supports. A search over
// 10,000 vectors is bound by it: AVX2 with FMA roughly halves the scan time
// of the portable loop.
func dotFunc() func(a, b []float32) float32 {
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		return dotSIMD
	}
	return dotGeneric
}
