package machine

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
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
	st, err := readStat(pid)
	if err != nil {
		return ProcUsage{}, err
	}
	u := ProcUsage{CPUSeconds: float64(st.ticks) / clockTicks}
	if io, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid)); err == nil {
		for _, l := range strings.Split(string(io), "\n") {
			if v, ok := strings.CutPrefix(l, "write_bytes:"); ok {
				u.WriteBytes, _ = strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			}
		}
	}
	return u, nil
}

// procStat is what the load record needs of /proc/<pid>/stat.
type procStat struct {
	comm  string // the command name (field 2)
	ppid  int    // field 4
	ticks uint64 // utime + stime (fields 14 and 15), in clockTicks
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, fmt.Errorf("%w: %v", ErrNoProc, err)
	}
	// The command name is in parentheses and may hold spaces.
	s := string(b)
	i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if i < 0 || j < i {
		return procStat{}, fmt.Errorf("%w: bad stat %q", ErrNoProc, s)
	}
	f := strings.Fields(s[j+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return procStat{}, fmt.Errorf("%w: short stat %q", ErrNoProc, s)
	}
	ppid, err0 := strconv.Atoi(f[1])             // field 4
	ut, err1 := strconv.ParseUint(f[11], 10, 64) // field 14
	st, err2 := strconv.ParseUint(f[12], 10, 64) // field 15
	if err0 != nil || err1 != nil || err2 != nil {
		return procStat{}, fmt.Errorf("%w: bad stat %q", ErrNoProc, s)
	}
	return procStat{comm: s[i+1 : j], ppid: ppid, ticks: ut + st}, nil
}

// readAllStats reads every process's stat (those gone meanwhile are
// skipped); nil where /proc cannot be listed.
func readAllStats() map[int]procStat {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	m := make(map[int]procStat, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readStat(pid); err == nil {
			m[pid] = st
		}
	}
	return m
}

// ProcCores is one process's average CPU use over an interval.
type ProcCores struct {
	Comm  string
	Pid   int
	Cores float64
}

func (p ProcCores) String() string { return fmt.Sprintf("%s[%d] %.2f", p.Comm, p.Pid, p.Cores) }

// TopOthers returns the n processes that used the most CPU between a and
// b (running at both), leaving out self and its descendants (a benchmark
// and the servers it started): who made a block noisy.
func TopOthers(a, b Load, self, n int) []ProcCores {
	secs := b.At.Sub(a.At).Seconds()
	if secs <= 0 {
		return nil
	}
	ours := func(pid int) bool {
		for range 64 { // a bounded walk up the ppid chain
			if pid == self {
				return true
			}
			st, ok := b.procs[pid]
			if !ok || pid <= 1 {
				return false
			}
			pid = st.ppid
		}
		return false
	}
	var top []ProcCores
	for pid, sb := range b.procs {
		sa, ok := a.procs[pid]
		if !ok || sb.ticks <= sa.ticks || ours(pid) {
			continue
		}
		top = append(top, ProcCores{Comm: sb.comm, Pid: pid, Cores: float64(sb.ticks-sa.ticks) / clockTicks / secs})
	}
	slices.SortFunc(top, func(x, y ProcCores) int { return cmp.Compare(y.Cores, x.Cores) })
	return top[:min(n, len(top))]
}
