package journal

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// killWriterEnv makes the test binary run killWriter instead of the tests.
const killWriterEnv = "MAGNETAR_JOURNAL_KILL_WRITER_DIR"

func init() {
	beforeTests = func() {
		if dir := os.Getenv(killWriterEnv); dir != "" {
			killWriter(dir)
			os.Exit(0)
		}
	}
}

// killWriter appends records with every group written with O_DIRECT and
// prints the entry id of each acknowledged record, until it is killed.
func killWriter(dir string) {
	j, err := Open(Options{FS: vfs.Default, Dir: dir, MaxFileBytes: 4 << 20, DirectIO: true}, 0)
	if err != nil || j.dio == nil {
		fmt.Println("no-direct-io", err)
		return
	}
	j.directMin = 0
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	for i := 0; ; i++ {
		j.AppendEntry(1, int64(i), int64(i)-1, killPayload(i), func(err error) {
			if err != nil {
				return
			}
			mu.Lock()
			fmt.Fprintln(out, i)
			out.Flush()
			mu.Unlock()
		})
		j.WaitSpace()
	}
}

func killPayload(i int) []byte {
	return bytes.Repeat([]byte{byte(i), byte(i >> 8)}, 100+i%3000)
}

// TestDirectIOKill9: a process appending through O_DIRECT groups is killed
// with SIGKILL; every record it saw acknowledged replays intact, and the
// replay is a gap-free prefix of what it appended.
func TestDirectIOKill9(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), killWriterEnv+"="+dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	acked := -1
	for sc.Scan() {
		line := sc.Text()
		if n, err := strconv.Atoi(line); err == nil {
			acked = max(acked, n)
		} else {
			cmd.Process.Kill()
			cmd.Wait()
			t.Skipf("writer: %s", line)
		}
		if acked >= 20000 {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if acked < 20000 {
		t.Fatalf("the writer stopped after %d acknowledged records", acked+1)
	}
	next := int64(0)
	_, _, err = Replay(vfs.Default, dir, 0, func(_ uint64, r Record) error {
		if r.Entry != next {
			return fmt.Errorf("replayed entry %d, want %d", r.Entry, next)
		}
		if !bytes.Equal(r.Data, killPayload(int(next))) {
			return fmt.Errorf("entry %d: payload differs", next)
		}
		next++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if next <= int64(acked) {
		t.Fatalf("replayed %d records; %d were acknowledged", next, acked+1)
	}
	t.Logf("%d acknowledged before the kill, %d replayed", acked+1, next)
}
