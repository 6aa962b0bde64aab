//go:build race

package proof

// raceEnabled: the tests run with the race detector, and so does the baton
// binary they build.
const raceEnabled = true
