package proc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Process is a server subprocess with its output in a log file.
type Process struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	err     error         // Wait's result, set before done is closed
}

// Start runs bin with args, output to dir/<logName>.
func Start(dir, logName, bin string, args ...string) (*Process, error) {
	logPath := filepath.Join(dir, logName)
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("proc: %w", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("proc: start %s: %w", filepath.Base(bin), err)
	}
	p := &Process{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() { // owned by p: ends when the process exits
		p.err = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the subprocess's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Stop sends SIGTERM, waits up to 15 s, then SIGKILLs; it always waits for
// the process to be gone. A process that had already exited is an error.
func (p *Process) Stop() error {
	select {
	case <-p.done:
		return fmt.Errorf("proc: %s exited early: %v", filepath.Base(p.cmd.Path), p.err)
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(15 * time.Second)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("proc: %s did not stop on SIGTERM; killed", filepath.Base(p.cmd.Path))
	}
}

// WaitReady polls probe until it succeeds, the process exits or a minute
// passes.
func (p *Process) WaitReady(ctx context.Context, probe func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		err := probe(pctx)
		pcancel()
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("proc: %s exited before ready: %v; log tail:\n%s", filepath.Base(p.cmd.Path), p.err, p.LogTail())
		case <-ctx.Done():
			return fmt.Errorf("proc: %s not ready: %v; log tail:\n%s", filepath.Base(p.cmd.Path), err, p.LogTail())
		case <-tick.C:
		}
	}
}

// LogTail returns the last 15 lines of the process's output.
func (p *Process) LogTail() string {
	b, _ := os.ReadFile(p.logPath)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-15):], "\n")
}

// GoBuild builds pkg (a package path or module path) into out, from the
// module at root.
func GoBuild(ctx context.Context, root, out, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("proc: go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// ModuleRoot returns the directory of the main module's go.mod (the
// module the command runs in, for GoBuild).
func ModuleRoot() (string, error) {
	b, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("proc: go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(b))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("proc: not inside a Go module")
	}
	return filepath.Dir(gomod), nil
}
