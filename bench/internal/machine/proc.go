package machine

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ErrNoProc is returned when a process's /proc files cannot be read (not
// Linux, or the process is gone).
var ErrNoProc = errors.New("machine: /proc of the process not readable")

// ProcUsage is one process's cumulative CPU time and disk writes.
type ProcUsage struct {
	CPUSeconds float64 // utime + stime, /proc/<pid>/stat
	WriteBytes uint64  // bytes the process caused to be written to storage, /proc/<pid>/io
}

// Sub returns u - o.
func (u ProcUsage) Sub(o ProcUsage) ProcUsage {
	return ProcUsage{CPUSeconds: u.CPUSeconds - o.CPUSeconds, WriteBytes: u.WriteBytes - o.WriteBytes}
}

// ReadProc reads pid's cumulative usage. WriteBytes is 0 when
// /proc/<pid>/io is not readable (it needs the same user or root).
func ReadProc(pid int) (ProcUsage, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ProcUsage{}, fmt.Errorf("%w: %v", ErrNoProc, err)
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ProcUsage{}, fmt.Errorf("%w: bad stat %q", ErrNoProc, s)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return ProcUsage{}, fmt.Errorf("%w: short stat %q", ErrNoProc, s)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64) // field 14
	st, err2 := strconv.ParseUint(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return ProcUsage{}, fmt.Errorf("%w: bad stat %q", ErrNoProc, s)
	}
	u := ProcUsage{CPUSeconds: float64(ut+st) / clockTicks}
	if io, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid)); err == nil {
		for _, l := range strings.Split(string(io), "\n") {
			if v, ok := strings.CutPrefix(l, "write_bytes:"); ok {
				u.WriteBytes, _ = strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			}
		}
	}
	return u, nil
}
