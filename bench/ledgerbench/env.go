package main

import (
	"os"
	"os/exec"
	"strings"
	"time"
)

// envSnapshot is the machine's load at one moment.
type envSnapshot struct {
	at       time.Time
	loadavg  string
	cpuPress string
	ioPress  string
}

func snapshotEnv() envSnapshot {
	return envSnapshot{
		at:       time.Now(),
		loadavg:  readFirstFields("/proc/loadavg", 3),
		cpuPress: readPressure("/proc/pressure/cpu"),
		ioPress:  readPressure("/proc/pressure/io"),
	}
}

func readFirstFields(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "n/a"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(n, len(f))], " ")
}

// readPressure returns a PSI file's lines joined with "; ", without the
// cumulative totals.
func readPressure(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "n/a"
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var keep []string
		for _, f := range strings.Fields(l) {
			if !strings.HasPrefix(f, "total=") {
				keep = append(keep, f)
			}
		}
		lines = append(lines, strings.Join(keep, " "))
	}
	return strings.Join(lines, "; ")
}

// gitCommit returns the short commit of the working tree (with "+dirty"
// when it has changes), or "unknown". It only reads the repository.
func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	st, err := exec.Command("git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no").Output()
	if err == nil && len(strings.TrimSpace(string(st))) > 0 {
		c += "+dirty"
	}
	return c
}
