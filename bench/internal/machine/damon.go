package machine

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// DAMONRoot is where the kernel lists its DAMON monitors (kdamonds) in
// sysfs.
const DAMONRoot = "/sys/kernel/mm/damon/admin/kdamonds"

// DAMON describes the kernel's running DAMON monitors under root (normally
// DAMONRoot): for each kdamond that is on, its address space, sampling and
// aggregation intervals and scheme actions, as in "kdamond 0: paddr,
// sampling every 500ms, aggregating every 5s, pageout". It returns "none"
// when none runs and "" when the kernel has no DAMON sysfs.
//
// It is reported with the machine's limits because on the machine the
// benchmarks were written on, a kdamond sampling physical memory every
// 500 ms with a pageout scheme stalls both CPUs for up to ~18 ms at that
// period, every process at once (docs/benchmarks.md, "Machine limits"):
// a tail latency under that size is out of reach there.
func DAMON(root string) string {
	ents, err := os.ReadDir(root)
	if err != nil {
		return ""
	}
	var out []string
	for _, e := range ents { // ReadDir and Glob both return names sorted
		if _, err := strconv.Atoi(e.Name()); err != nil || !e.IsDir() {
			continue // nr_kdamonds
		}
		kd := filepath.Join(root, e.Name())
		if readTrim(filepath.Join(kd, "state")) != "on" {
			continue
		}
		ctxs, _ := filepath.Glob(filepath.Join(kd, "contexts", "[0-9]*"))
		for _, c := range ctxs {
			parts := []string{cmp.Or(readTrim(filepath.Join(c, "operations")), "?")}
			iv := filepath.Join(c, "monitoring_attrs", "intervals")
			if d, ok := micros(readTrim(filepath.Join(iv, "sample_us"))); ok {
				parts = append(parts, "sampling every "+d.String())
			}
			if d, ok := micros(readTrim(filepath.Join(iv, "aggr_us"))); ok {
				parts = append(parts, "aggregating every "+d.String())
			}
			schemes, _ := filepath.Glob(filepath.Join(c, "schemes", "[0-9]*"))
			for _, s := range schemes {
				if a := readTrim(filepath.Join(s, "action")); a != "" {
					parts = append(parts, a)
				}
			}
			out = append(out, fmt.Sprintf("kdamond %s: %s", e.Name(), strings.Join(parts, ", ")))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func micros(s string) (time.Duration, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	return time.Duration(n) * time.Microsecond, true
}
