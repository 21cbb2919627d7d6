// Package procstatus reads the size fields of a Linux process's
// /proc/PID/status (VmRSS, RssAnon, RssFile, ...) and the process's CPU
// time, for the benchmarks and tests that measure resident memory and CPU.
package procstatus

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Self is the pid that reads the calling process.
const Self = 0

// Bytes returns the size fields of process pid (Self: this process), in
// bytes, in the order of fields ("VmRSS", "RssFile", ...: names without the
// colon). A field the kernel does not report is an error.
func Bytes(pid int, fields ...string) ([]int64, error) {
	path := "/proc/self/status"
	if pid != Self {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("procstatus: %w", err)
	}
	out := make([]int64, len(fields))
	found := make([]bool, len(fields))
	for line := range strings.Lines(string(raw)) {
		name, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		for i, f := range fields {
			if f != name {
				continue
			}
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("procstatus: %s %q: %w", name, v, err)
			}
			out[i], found[i] = kb<<10, true
		}
	}
	for i, f := range fields {
		if !found[i] {
			return nil, fmt.Errorf("procstatus: no %s in %s", f, path)
		}
	}
	return out, nil
}

// Field returns one size field of process pid, in bytes.
func Field(pid int, field string) (int64, error) {
	v, err := Bytes(pid, field)
	if err != nil {
		return 0, err
	}
	return v[0], nil
}

// CPUTime returns the user and system CPU time this process has used
// (getrusage(2)), for benchmarks that report CPU per operation.
func CPUTime() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("procstatus: getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
