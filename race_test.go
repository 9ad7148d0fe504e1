//go:build race

package dlock_test

// raceEnabled tells that the race detector is on (it allocates).
const raceEnabled = true
