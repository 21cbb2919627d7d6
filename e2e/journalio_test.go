package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestJournalBufferedWritesFlag: the journal of a standalone and of a
// bookie is written with O_DIRECT by default, and through the page cache
// with --journal-buffered-writes. It reads the open flags of the
// process's journal files from /proc/PID/fdinfo, so it checks the flag all
// the way from the command line to the open(2).
func TestJournalBufferedWritesFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	c := newStorageCluster(t, 0) // its etcd, for the bookies
	for _, buffered := range []bool{false, true} {
		var extra []string
		if buffered {
			extra = []string{"--journal-buffered-writes"}
		}
		t.Run("standalone/buffered="+strconv.FormatBool(buffered), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			sp := startStandaloneProc(t, dir, extra...)
			checkJournalIO(t, sp.Process, dir, buffered)
		})
		t.Run("bookie/buffered="+strconv.FormatBool(buffered), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "bookie")
			addr := FreeAddr(t)
			p := Start(t, "bookie", append([]string{"bookie", "--data-dir", dir, "--listen", addr,
				"--metadata", c.etcdURL, "--session-ttl", "2s"}, extra...)...)
			p.WaitListening(addr, 30*time.Second)
			checkJournalIO(t, p, dir, buffered)
		})
	}
}

// checkJournalIO checks that p holds its journal under dir open with
// O_DIRECT (buffered false) or never with it (buffered true).
func checkJournalIO(t *testing.T, p *Process, dir string, buffered bool) {
	t.Helper()
	direct, plain := journalFDs(t, p.Pid(), dir)
	t.Logf("journal descriptors: %d with O_DIRECT, %d without", direct, plain)
	switch {
	case plain == 0:
		t.Fatalf("no journal file open under %s", dir)
	case buffered && direct > 0:
		t.Fatalf("--journal-buffered-writes: %d journal descriptors opened with O_DIRECT", direct)
	case !buffered && direct == 0:
		// The journal falls back to buffered writes where the file
		// system refuses O_DIRECT, and says so.
		if strings.Contains(p.Output(), "not with O_DIRECT") {
			t.Skipf("this file system refuses O_DIRECT: %s", p.Output())
		}
		t.Fatal("no journal descriptor opened with O_DIRECT by default")
	}
}

// journalFDs counts the descriptors process pid holds on files under dir
// in a "journal" directory, opened with O_DIRECT and without.
func journalFDs(t *testing.T, pid int, dir string) (direct, plain int) {
	t.Helper()
	proc := "/proc/" + strconv.Itoa(pid)
	ents, err := os.ReadDir(proc + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		target, err := os.Readlink(proc + "/fd/" + e.Name())
		if err != nil || !strings.HasPrefix(target, dir) || !strings.Contains(target, "/journal/") {
			continue
		}
		info, err := os.ReadFile(proc + "/fdinfo/" + e.Name())
		if err != nil {
			continue // closed since
		}
		for line := range strings.Lines(string(info)) {
			v, ok := strings.CutPrefix(line, "flags:")
			if !ok {
				continue
			}
			flags, err := strconv.ParseInt(strings.TrimSpace(v), 8, 64)
			if err != nil {
				t.Fatalf("fdinfo flags %q: %v", v, err)
			}
			if flags&unix.O_DIRECT != 0 {
				direct++
			} else {
				plain++
			}
		}
	}
	return direct, plain
}
