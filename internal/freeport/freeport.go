// Package freeport picks a loopback TCP port for a process that will listen on it a moment later (a test's
// daemon, a peer server).
//
// A port found free by listening on 127.0.0.1:0 comes from the kernel's ephemeral range, the same range it takes
// the source port of every outgoing connection from: between the check and the child's bind, any connection of a
// busy machine (an HTTP client, a database pool, another test) may take it, and the child fails with "bind: address
// already in use". Pick chooses at random among the ports below that range instead, which the kernel never hands
// out by itself, and checks that nothing listens on the one it chose; only processes that pick ports the same way
// can still meet, and with thousands of candidates that is rare.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowest is the lowest port Pick chooses (below it sit well-known and registered services).
const lowest = 10000

// Pick returns a loopback TCP port on which nothing listens now, outside the kernel's ephemeral port range. When
// that range leaves no room below it (an unusual configuration), it falls back to a port the kernel picks.
func Pick() (int, error) {
	lo := ephemeralLow()
	if lo-lowest >= 1000 {
		for range 200 {
			p := lowest + rand.IntN(lo-lowest)
			if free(p) {
				return p, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// free reports whether a listener can be opened on 127.0.0.1:p (and closes it).
func free(p int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// ephemeralLow is the lowest port of the kernel's ephemeral range (Linux: /proc/sys/net/ipv4/ip_local_port_range;
// elsewhere, or unreadable, 32768, the common default's floor and IANA's 49152 being higher).
func ephemeralLow() int {
	raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(raw))
	if len(f) != 2 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo <= 0 {
		return 32768
	}
	return lo
}
