package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/bench/internal/machine"
)

// TestNoisyBlockNamesCulprit: a block during which a process that is
// neither the harness nor one of its servers keeps a core busy is flagged
// NOISY, and the load table names the busiest such processes with their
// cores. The busy process is started by a shell that exits at once, so that
// it is no descendant of the test's.
func TestNoisyBlockNamesCulprit(t *testing.T) {
	out, err := exec.Command("sh", "-c", "while :; do :; done >/dev/null 2>&1 </dev/null & echo $!").Output()
	if err != nil {
		t.Skip("no sh:", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("pid of the busy loop: %q", out)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })

	bl, self0 := startLoad(1, "magnetar")
	time.Sleep(700 * time.Millisecond)
	bl.finish(self0, 0)
	if !bl.noisy || bl.others <= noisyOthers {
		t.Fatalf("a block beside a busy loop is not noisy: others %.2f cores, busy %.2f, ours %.2f", bl.others, bl.busy, bl.ours)
	}
	if len(bl.topOthers) == 0 {
		t.Fatal("a noisy block names no other process")
	}
	// The loop is among the busiest others: named, or less busy than each
	// process named (other test binaries may run beside this one, so on 2
	// cores it may get little more than a tenth of one).
	var loop machine.ProcCores
	for _, p := range machine.TopOthers(bl.before, bl.after, os.Getpid(), 1000) {
		if p.Pid == pid {
			loop = p
		}
	}
	if loop.Comm != "sh" || loop.Cores < 0.1 {
		t.Fatalf("the busy loop %d used %.2f cores (%q), want a busy sh", pid, loop.Cores, loop.Comm)
	}
	if !slices.ContainsFunc(bl.topOthers, func(p machine.ProcCores) bool { return p.Pid == pid }) {
		for _, p := range bl.topOthers {
			if p.Cores < loop.Cores {
				t.Fatalf("the noisy block names %v, and not the busier loop %v", bl.topOthers, loop)
			}
		}
	}

	var text bytes.Buffer
	buildReport(defaultOptions(), &results{loads: []blockLoad{bl}}).writeText(&text)
	want := "NOISY"
	for _, p := range bl.topOthers {
		want += fmt.Sprintf(", %s[%d] %.2f", p.Comm, p.Pid, p.Cores)
	}
	if !strings.Contains(text.String(), want) {
		t.Fatalf("the load table does not flag the block %q:\n%s", want, text.String())
	}
}
