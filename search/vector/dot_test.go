package vector

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/x448/float16"
)

// TestDotKernels checks the selected kernel against a float64 reference (of
// the query and the widened half-precision row) for every length around the
// unrolling boundaries and for unaligned slices.
func TestDotKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	buf := make([]float32, 1100)
	for i := range buf {
		buf[i] = float32(rng.NormFloat64())
	}
	half := make([]uint16, 1100)
	for i := range half {
		half[i] = float16.Fromfloat32(float32(rng.NormFloat64())).Bits()
	}
	kernels := map[string]func(a []float32, b []uint16) float32{"generic": dotGeneric, "selected": dotFunc()}
	for name, dot := range kernels {
		for n := 0; n <= 1030; n++ {
			if n > 80 && n%31 != 0 && n != 1024 {
				continue
			}
			for _, off := range []int{0, 1, 3} {
				a, b := buf[off:off+n], half[off:off+n]
				var want float64
				for i := range a {
					want += float64(a[i]) * float64(float16.Frombits(b[i]).Float32())
				}
				got := float64(dot(a, b))
				if math.Abs(got-want) > 1e-4*math.Max(1, math.Sqrt(float64(n))) {
					t.Fatalf("%s: n=%d off=%d: %v, want %v", name, n, off, got, want)
				}
			}
		}
	}
}

func TestDotPanicsOnShortSecondSlice(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for len(b) < len(a)")
		}
	}()
	dotFunc()(make([]float32, 16), make([]uint16, 8))
}
