//go:build race

package search

// raceEnabled is true when the tests run under the race detector, which makes the quality test on the larger
// fixture about twenty times slower, so there it measures the engine only, without the baselines.
const raceEnabled = true
