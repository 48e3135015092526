package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPickOutsideEphemeralRange: a picked port is below the kernel's ephemeral range (where no outgoing connection
// can take it) and can be listened on.
func TestPickOutsideEphemeralRange(t *testing.T) {
	lo := ephemeralLow()
	for range 20 {
		p, err := Pick()
		if err != nil {
			t.Fatal(err)
		}
		if lo-lowest >= 1000 && (p < lowest || p >= lo) {
			t.Fatalf("Pick() = %d, want within [%d, %d)", p, lowest, lo)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("listen on picked port %d: %v", p, err)
		}
		_ = l.Close()
	}
}

// TestFreeSeesListener: a port something listens on is not free.
func TestFreeSeesListener(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if free(l.Addr().(*net.TCPAddr).Port) {
		t.Fatal("free() = true for a port in use")
	}
}

func ExamplePick() {
	p, err := Pick()
	if err != nil {
		panic(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		panic(err)
	}
	defer l.Close()
	// Output:
}
