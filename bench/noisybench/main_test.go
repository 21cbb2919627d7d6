package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestShortRun runs the command in a smoke configuration against a real
// standalone and checks the report's structure: every case of the round
// has a row, B's messages were all acknowledged, and A published in the
// cases with a flood. It asserts no timing.
func TestShortRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs magnetar")
	}
	md := filepath.Join(t.TempDir(), "noisy.md")
	// The default quota (2,000 msg/s): A's entries carry up to 1,000
	// messages each and are charged whole, so a lower quota could admit
	// none inside a short window.
	cmd := exec.Command("go", "run", ".", "-rounds", "1", "-duration", "2s", "-warmup", "300ms",
		"-b-rate", "200", "-markdown", md, "-dir", t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("noisybench: %v\n%s", err, out)
	}
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, l := range strings.Split(string(b), "\n") {
		cells := strings.Split(strings.Trim(l, "| "), " | ")
		if len(cells) == 11 && cells[0] == "1" {
			rows[cells[1]] = cells
		}
	}
	for _, c := range []string{"alone", "ns quota", "group quota", "no quota"} {
		r, ok := rows[c]
		if !ok {
			t.Errorf("no row for case %q in:\n%s", c, b)
			continue
		}
		if r[7] != "100.0" {
			t.Errorf("%s: B acknowledged %s%%, want 100.0", c, r[7])
		}
		if flood := r[2] != "" && r[2] != "0"; flood != (c != "alone") {
			t.Errorf("%s: A published %q msg/s", c, r[2])
		}
	}
	if !strings.Contains(string(b), "Medians over rounds") {
		t.Errorf("no summary in:\n%s", b)
	}
}
