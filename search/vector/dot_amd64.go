//go:build amd64 && !purego

package vector

import "golang.org/x/sys/cpu"

// dotF16C is implemented in dot_amd64.s; it reads len(a) elements of b.
//
//go:noescape
func dotF16C(a []float32, b []uint16) float32

// dotSIMD bounds-checks b, then runs the F16C + FMA kernel.
func dotSIMD(a []float32, b []uint16) float32 {
	return dotF16C(a, b[:len(a)])
}

// dotFunc picks the fastest inner product this CPU supports. A search over
// 10,000 vectors is bound by it: F16C widens eight half-precision components
// in one instruction and FMA multiplies and adds them, several times faster
// than widening each one in Go.
func dotFunc() func(a []float32, b []uint16) float32 {
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C {
		return dotSIMD
	}
	return dotGeneric
}
