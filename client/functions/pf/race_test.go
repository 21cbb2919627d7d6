//go:build race

package pf_test

// raceEnabled builds the function binaries of the integration tests with
// the race detector when the tests run with it.
const raceEnabled = true
