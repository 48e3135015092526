//go:build !race

package search

// raceEnabled is true when the tests run under the race detector (see race_test.go).
const raceEnabled = false
