package machine

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Load is the machine's load at one moment.
type Load struct {
	At          time.Time
	LoadAvg     string           // the first three fields of /proc/loadavg
	CPUPressure string           // /proc/pressure/cpu without the totals
	IOPressure  string           // /proc/pressure/io without the totals
	busy, total uint64           // /proc/stat jiffies, all CPUs
	cpus        int              // cpuN lines in /proc/stat
	procs       map[int]procStat // every process, for TopOthers
}

// Snapshot reads the machine's load now.
func Snapshot() Load {
	l := Load{
		At:          time.Now(),
		LoadAvg:     readFirstFields("/proc/loadavg", 3),
		CPUPressure: readPressure("/proc/pressure/cpu"),
		IOPressure:  readPressure("/proc/pressure/io"),
	}
	l.busy, l.total, l.cpus = cpuJiffies()
	l.procs = readAllStats()
	return l
}

// BusyCores returns how many CPUs were busy on average between a and b
// (all processes, from /proc/stat; steal excluded), or -1 when it is not
// known.
func BusyCores(a, b Load) float64 {
	if a.total == 0 || b.total <= a.total || b.cpus == 0 {
		return -1
	}
	return float64(b.busy-a.busy) / float64(b.total-a.total) * float64(b.cpus)
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// cpuJiffies returns the busy and total jiffies of the "cpu" line of
// /proc/stat (busy excludes idle, iowait and steal) and the number of CPUs.
func cpuJiffies() (busy, total uint64, cpus int) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, 0
	}
	lines := strings.Split(string(b), "\n")
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, "cpu") {
			cpus++
		}
	}
	f := strings.Fields(lines[0])
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, 0
	}
	for i, s := range f[1:] {
		v, _ := strconv.ParseUint(s, 10, 64)
		if i >= 8 { // guest and guest_nice are already in user and nice
			break
		}
		total += v
		if i != 3 && i != 4 && i != 7 { // idle, iowait, steal
			busy += v
		}
	}
	return busy, total, cpus
}

// CPUPressureAvg10 returns the "some avg10" value of /proc/pressure/cpu
// (percent of the last 10 s some task waited for a CPU), or -1.
func CPUPressureAvg10() float64 {
	b, err := os.ReadFile("/proc/pressure/cpu")
	if err != nil {
		return -1
	}
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(f, "avg10="); ok {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return -1
			}
			return x
		}
	}
	return -1
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

// GitCommit returns the short commit of the working tree (with "+dirty"
// when it has changes), or "unknown". It only reads the repository.
func GitCommit() string {
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
