package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/internal/freeport"
)

// Binary builds the magnetar binary once per test binary and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "magnetar-e2e-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "magnetar")
		cmd := exec.Command("go", "build", "-o", binPath, "github.com/magnetar-dev/magnetar/cmd/magnetar")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// FreeAddr returns a loopback address with a port that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	a, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Process is one magnetar process that can be killed, paused and restarted
// with the same arguments.
type Process struct {
	t    testing.TB
	name string
	args []string

	mu  sync.Mutex
	cmd *exec.Cmd
	out *bytes.Buffer
	// exited is closed when the current incarnation exits.
	exited  chan struct{}
	exitErr error
}

func (p *Process) setExitErr(err error) {
	p.mu.Lock()
	p.exitErr = err
	p.mu.Unlock()
}

// Wait waits for the current incarnation to exit by itself and returns its
// exit error (nil for status 0).
func (p *Process) Wait(timeout time.Duration) error {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	select {
	case <-exited:
	case <-time.After(timeout):
		return fmt.Errorf("%s still running after %v", p.name, timeout)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

// Start runs `magnetar args...` and registers cleanup that kills it.
func Start(t testing.TB, name string, args ...string) *Process {
	t.Helper()
	p := &Process{t: t, name: name, args: args}
	p.start()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("%s output (last incarnation):\n%s", p.name, p.Output())
		}
	})
	return p
}

func (p *Process) start() {
	p.t.Helper()
	cmd := exec.Command(Binary(p.t), p.args...)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = lockedWriter{&p.mu, out}, lockedWriter{&p.mu, out}
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start %s: %v", p.name, err)
	}
	exited := make(chan struct{})
	go func() { p.setExitErr(cmd.Wait()); close(exited) }()
	p.mu.Lock()
	p.cmd, p.out, p.exited = cmd, out, exited
	p.mu.Unlock()
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(b)
}

// Pid returns the process id of the current incarnation.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// Output returns what the current incarnation printed.
func (p *Process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// Kill sends SIGKILL and waits for the process to exit.
func (p *Process) Kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGCONT) // a stopped process still dies, but be sure
	cmd.Process.Kill()
	<-exited
}

// Stop pauses the process with SIGSTOP; Cont resumes it.
func (p *Process) Stop() { p.signal(syscall.SIGSTOP) }
func (p *Process) Cont() { p.signal(syscall.SIGCONT) }

func (p *Process) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Errorf("signal %s: %v", p.name, err)
	}
}

// Terminate sends SIGTERM (a clean shutdown) and waits for the exit.
func (p *Process) Terminate() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		p.t.Errorf("%s did not exit within 60s of SIGTERM; killing it", p.name)
		p.Kill()
	}
}

// StartAgain starts an exited process again with the same arguments.
func (p *Process) StartAgain() { p.start() }

// Restart kills the process (if alive) and starts it again with the same arguments.
func (p *Process) Restart() {
	p.Kill()
	p.start()
}

// WaitListening polls until addr accepts TCP connections or the process exits.
func (p *Process) WaitListening(addr string, timeout time.Duration) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		p.mu.Lock()
		exited := p.exited
		p.mu.Unlock()
		select {
		case <-exited:
			p.t.Fatalf("%s exited before listening on %s:\n%s", p.name, addr, p.Output())
		case <-ctx.Done():
			p.t.Fatalf("%s not listening on %s after %v:\n%s", p.name, addr, timeout, p.Output())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
