package machine

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestReadProcSelf(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	a, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for i := range 20_000_000 { // burn some CPU so the counter moves
		x += i
	}
	_ = x
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := ReadProc(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if d := b.Sub(a); d.CPUSeconds > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU time did not move: %+v then %+v", a, b)
		}
		for i := range 20_000_000 {
			x += i
		}
	}
	if _, err := ReadProc(-1); err == nil {
		t.Fatal("ReadProc(-1) succeeded")
	}
}

func TestLimits(t *testing.T) {
	ctx := context.Background()
	bps, err := FsyncAppend(ctx, t.TempDir(), 4<<10, 50*time.Millisecond)
	if err != nil || bps <= 0 {
		t.Fatalf("FsyncAppend = %v, %v", bps, err)
	}
	h, err := LoopbackRTT(ctx, 50*time.Millisecond)
	if err != nil || h.Count() == 0 {
		t.Fatalf("LoopbackRTT: %v (count %d)", err, h.Count())
	}
}

func TestSnapshot(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	a := Snapshot()
	if a.LoadAvg == "n/a" || a.total == 0 {
		t.Fatalf("snapshot: %+v", a)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b := Snapshot()
		if c := BusyCores(a, b); c >= 0 && b.total >= a.total+uint64(10*b.cpus) {
			if c > float64(b.cpus) {
				t.Fatalf("busy cores %v on %d CPUs", c, runtime.NumCPU())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("/proc/stat did not move")
		}
		time.Sleep(20 * time.Millisecond) // waiting for the kernel's tick, not for another goroutine
	}
}

func TestGroupCommitAtRate(t *testing.T) {
	h, n, err := GroupCommitAtRate(t.TempDir(), 1024, 2000, 50*time.Millisecond, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if n < 300 || h.Count() != n {
		t.Fatalf("measured %d entries, histogram holds %d; want about 400 and equal", n, h.Count())
	}
	if p := h.Quantile(0.5); p <= 0 {
		t.Fatalf("p50 %v", p)
	}
}

// BenchmarkGroupCommitAtRate is the disk's floor at the rate of the storage
// and ledger open-loop benchmarks (50,000 x 1 KiB/s), to run beside them:
// the disks here change speed from minute to minute. b.N is ignored; one
// iteration is a 1 s warm-up and 10 s measured.
func BenchmarkGroupCommitAtRate(b *testing.B) {
	for b.Loop() {
		h, _, err := GroupCommitAtRate(b.TempDir(), 1<<10, 50_000, time.Second, 10*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		ms := func(p float64) float64 { return float64(h.Quantile(p).Microseconds()) / 1000 }
		b.ReportMetric(ms(0.5), "p50-ms")
		b.ReportMetric(ms(0.99), "p99-ms")
		b.ReportMetric(ms(0.999), "p99.9-ms")
	}
}

// TestTopOthers: a busy process shows up among the others, unless it
// descends from self.
func TestTopOthers(t *testing.T) {
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Skip("no sh:", err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	pid := cmd.Process.Pid
	a := Snapshot()
	time.Sleep(500 * time.Millisecond)
	b := Snapshot()
	find := func(top []ProcCores) (ProcCores, bool) {
		for _, p := range top {
			if p.Pid == pid {
				return p, true
			}
		}
		return ProcCores{}, false
	}
	p, ok := find(TopOthers(a, b, -1, 5))
	if !ok || p.Cores < 0.2 || p.Comm != "sh" {
		t.Fatalf("busy child %d not among the top others of a foreign self: %v %v", pid, p, ok)
	}
	if p, ok := find(TopOthers(a, b, os.Getpid(), 5)); ok {
		t.Fatalf("our own child counted among the others: %v", p)
	}
}

// TestTopOthersOrder: over two made-up snapshots, the busiest others come
// first, at most n of them, leaving out self and its descendants and the
// processes not running at both.
func TestTopOthersOrder(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := Load{At: t0, procs: map[int]procStat{
		1: {comm: "init", ticks: 0}, 10: {comm: "self", ppid: 1, ticks: 0}, 11: {comm: "server", ppid: 10, ticks: 0},
		20: {comm: "light", ppid: 1, ticks: 0}, 21: {comm: "heavy", ppid: 1, ticks: 0}, 22: {comm: "middle", ppid: 1, ticks: 0},
		23: {comm: "gone", ppid: 1, ticks: 0},
	}}
	b := Load{At: t0.Add(2 * time.Second), procs: map[int]procStat{
		1: {comm: "init", ticks: 0}, 10: {comm: "self", ppid: 1, ticks: 190}, 11: {comm: "server", ppid: 10, ticks: 180},
		20: {comm: "light", ppid: 1, ticks: 10}, 21: {comm: "heavy", ppid: 1, ticks: 150}, 22: {comm: "middle", ppid: 1, ticks: 60},
		24: {comm: "new", ppid: 1, ticks: 170},
	}}
	got := TopOthers(a, b, 10, 2)
	want := []ProcCores{{"heavy", 21, 150.0 / clockTicks / 2}, {"middle", 22, 60.0 / clockTicks / 2}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("TopOthers = %v, want %v", got, want)
	}
}

// TestDAMON reads a sysfs tree laid out as the kernel's: only kdamonds that
// are on are described, with their intervals and scheme actions.
func TestDAMON(t *testing.T) {
	root := t.TempDir()
	write := func(rel, v string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("nr_kdamonds", "2")
	write("0/state", "on")
	write("0/contexts/nr_contexts", "1")
	write("0/contexts/0/operations", "paddr")
	write("0/contexts/0/monitoring_attrs/intervals/sample_us", "500000")
	write("0/contexts/0/monitoring_attrs/intervals/aggr_us", "5000000")
	write("0/contexts/0/schemes/nr_schemes", "1")
	write("0/contexts/0/schemes/0/action", "pageout")
	write("1/state", "off")
	write("1/contexts/0/operations", "vaddr")
	if got, want := DAMON(root), "kdamond 0: paddr, sampling every 500ms, aggregating every 5s, pageout"; got != want {
		t.Errorf("DAMON = %q, want %q", got, want)
	}
	write("0/state", "off")
	if got := DAMON(root); got != "none" {
		t.Errorf("with every kdamond off: %q, want none", got)
	}
	if got := DAMON(filepath.Join(root, "absent")); got != "" {
		t.Errorf("without DAMON sysfs: %q, want empty", got)
	}
}

func TestLoopbackCopy(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	ctx := context.Background()
	for _, withTLS := range []bool{false, true} {
		c, err := LoopbackCopy(ctx, 64<<10, withTLS, 100*time.Millisecond)
		if err != nil {
			t.Fatalf("TLS %v: %v", withTLS, err)
		}
		if c.Bytes <= 0 || c.Bytes%(64<<10) != 0 || c.Elapsed < 100*time.Millisecond || c.CPUSeconds < 0 {
			t.Errorf("TLS %v: %+v: want whole frames moved over at least 100ms", withTLS, c)
		}
		if withTLS != strings.HasPrefix(c.Cipher, "TLS 1.3 ") {
			t.Errorf("TLS %v: cipher %q", withTLS, c.Cipher)
		}
	}
}
