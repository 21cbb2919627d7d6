package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// procInfo is what the benchmark reads of one process in /proc.
type procInfo struct {
	pid, ppid int
	// ticks is utime + stime + cutime + cstime (fields 14-17 of
	// /proc/<pid>/stat): the process's own CPU and that of its children it
	// has waited for, so an instance that exited and was reaped still
	// counts in its parent's.
	ticks  uint64
	rssKiB uint64 // VmRSS of /proc/<pid>/status
	// cmdline is /proc/<pid>/cmdline with NULs as spaces (instances are
	// told apart by the function name in --function_details).
	cmdline string
}

// parseStat parses /proc/<pid>/stat into pid, ppid and ticks.
func parseStat(s string) (procInfo, error) {
	i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if i < 0 || j < i {
		return procInfo{}, fmt.Errorf("bad stat %q", s)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(s[:i]))
	if err != nil {
		return procInfo{}, fmt.Errorf("bad stat %q", s)
	}
	f := strings.Fields(s[j+1:]) // f[0] is field 3 (state)
	if len(f) < 15 {
		return procInfo{}, fmt.Errorf("short stat %q", s)
	}
	p := procInfo{pid: pid}
	if p.ppid, err = strconv.Atoi(f[1]); err != nil {
		return procInfo{}, fmt.Errorf("bad stat %q", s)
	}
	for _, k := range []int{11, 12, 13, 14} { // fields 14-17
		v, err := strconv.ParseInt(f[k], 10, 64)
		if err != nil {
			return procInfo{}, fmt.Errorf("bad stat %q", s)
		}
		p.ticks += uint64(max(v, 0))
	}
	return p, nil
}

// parseVmRSS returns VmRSS in KiB from /proc/<pid>/status (0 for a zombie
// or a kernel thread).
func parseVmRSS(status string) uint64 {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseUint(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// readProc reads one process; an error when it is gone.
func readProc(pid int) (procInfo, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procInfo{}, err
	}
	p, err := parseStat(string(b))
	if err != nil {
		return procInfo{}, err
	}
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		p.rssKiB = parseVmRSS(string(st))
	}
	if cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil {
		p.cmdline = strings.ReplaceAll(string(cl), "\x00", " ")
	}
	return p, nil
}

// tree is a server process and its descendants at one moment.
type tree struct {
	root  procInfo
	descs []procInfo // every descendant (the function instances)
}

// readTree reads root and all of its descendants.
func readTree(root int) (tree, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return tree{}, err
	}
	children := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		p, err := parseStat(string(b))
		if err != nil {
			continue
		}
		children[p.ppid] = append(children[p.ppid], pid)
	}
	r, err := readProc(root)
	if err != nil {
		return tree{}, fmt.Errorf("functionsbench: server process %d: %w", root, err)
	}
	t := tree{root: r}
	queue := append([]int{}, children[root]...)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if p, err := readProc(pid); err == nil {
			t.descs = append(t.descs, p)
		}
		queue = append(queue, children[pid]...)
	}
	return t, nil
}

// cpuSeconds is the CPU of the root alone and of its descendants.
func (t tree) cpuSeconds() (server, instances float64) {
	server = float64(t.root.ticks) / clockTicks
	for _, d := range t.descs {
		instances += float64(d.ticks) / clockTicks
	}
	return server, instances
}

// rssMiB is the resident memory of the root alone and of its descendants
// (summed VmRSS: pages shared between processes count in each).
func (t tree) rssMiB() (server, instances float64) {
	server = float64(t.root.rssKiB) / 1024
	for _, d := range t.descs {
		instances += float64(d.rssKiB) / 1024
	}
	return server, instances
}

// instanceOf returns the descendants whose command line carries the
// function name name in its FunctionDetails JSON.
func (t tree) instanceOf(name string) []procInfo {
	var out []procInfo
	key := `"name":"` + name + `"`
	for _, d := range t.descs {
		if strings.Contains(d.cmdline, key) {
			out = append(out, d)
		}
	}
	return out
}

// usage is a tree's CPU at one moment, for deltas.
type usage struct{ server, instances float64 }

func (t tree) usage() usage {
	s, i := t.cpuSeconds()
	return usage{s, i}
}

// cpuDelta is the CPU seconds root's tree used between two readings.
// Instances that started in between count from zero.
func cpuDelta(a, b usage) usage {
	return usage{server: b.server - a.server, instances: max(0, b.instances-a.instances)}
}
