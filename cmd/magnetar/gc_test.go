package main

import (
	"runtime/debug"
	"testing"
)

func TestApplyServerGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)

	if !applyServerGC(func(string) string { return "" }) {
		t.Fatal("GOGC unset: the server default was not applied")
	}
	if got := debug.SetGCPercent(100); got != serverGCPercent {
		t.Fatalf("GC percent = %d, want %d", got, serverGCPercent)
	}
	env := map[string]string{"GOGC": "200"}
	if applyServerGC(func(k string) string { return env[k] }) {
		t.Fatal("GOGC set: the server default overrode it")
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GC percent = %d after GOGC was set, want it untouched (100)", got)
	}
}
