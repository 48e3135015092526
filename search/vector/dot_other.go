//go:build !amd64 || purego

package vector

// dotFunc returns the portable inner product on CPUs without a kernel here.
func dotFunc() func(a, b []float32) float32 {
	return dotGeneric
}
