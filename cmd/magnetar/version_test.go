package main

import (
	"strings"
	"testing"
)

func TestVersionString(t *testing.T) {
	v := versionString()
	for _, want := range []string{"revision: ", "time: ", "dirty: ", "go: go"} {
		if !strings.Contains(v, want) {
			t.Fatalf("version %q lacks %q", v, want)
		}
	}
}
