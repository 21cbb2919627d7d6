//go:build !race

package pf_test

const raceEnabled = false
