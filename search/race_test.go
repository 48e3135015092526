//go:build race

package search

// raceEnabled is true when the tests run under the race detector, which makes the quality test on the larger
// fixture about twenty times slower without checking anything more (ranking a query is single-threaded).
const raceEnabled = true
