package dirlock

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestAcquireRelease(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	// flock locks belong to the open file description: a second Acquire in
	// this process is refused too.
	_, err = Acquire(dir)
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "PID "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second Acquire: %v, want ErrInUse naming PID %d", err, os.Getpid())
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l2, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	l2.Release()
}

// TestHeldByAnotherProcess: flock(1) holds the lock from another process;
// Acquire fails at once; when that process is killed, Acquire succeeds.
func TestHeldByAnotherProcess(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("flock(1) not on PATH")
	}
	dir := t.TempDir()
	cmd := exec.Command("flock", "-x", dir+"/"+FileName, "-c", "echo locked; exec sleep 60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its sleep holds the descriptor too
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	buf := make([]byte, 6)
	if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "locked" {
		t.Fatalf("flock(1): %q %v", buf, err)
	}
	start := time.Now()
	if _, err := Acquire(dir); !errors.Is(err, ErrInUse) {
		t.Fatalf("Acquire while another process holds the lock: %v, want ErrInUse", err)
	} else {
		t.Logf("refused in %v: %v", time.Since(start), err)
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
	// The group's other member (sleep) exits a moment later.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		l, err := Acquire(dir)
		if err == nil {
			l.Release()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Acquire after the holder was killed: %v", err)
		}
	}
}
