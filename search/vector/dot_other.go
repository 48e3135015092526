//go:build !amd64 || purego

package vector

// dotFunc returns the portable inner product on CPUs without a kernel here.
func dotFunc() func(a []float32, b []uint16) float32 {
	return dotGeneric
}
