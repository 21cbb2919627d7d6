package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// process is a server subprocess with its output in a log file.
type process struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	err     error         // Wait's result, set before done is closed
}

// startProcess runs bin with args, output to dir/<logName>.
func startProcess(dir, logName, bin string, args ...string) (*process, error) {
	logPath := filepath.Join(dir, logName)
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("streambench: %w", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("streambench: start %s: %w", filepath.Base(bin), err)
	}
	p := &process{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() { // owned by p: ends when the process exits
		p.err = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM, waits up to 15 s, then SIGKILLs; it always waits for
// the process to be gone.
func (p *process) stop() error {
	select {
	case <-p.done:
		return fmt.Errorf("streambench: %s exited early: %v", filepath.Base(p.cmd.Path), p.err)
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
		return fmt.Errorf("streambench: %s did not stop on SIGTERM; killed", filepath.Base(p.cmd.Path))
	}
}

// waitReady polls probe until it succeeds, the process exits or a minute
// passes.
func (p *process) waitReady(ctx context.Context, probe func(ctx context.Context) error) error {
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
			return fmt.Errorf("streambench: %s exited before ready: %v; log tail:\n%s", filepath.Base(p.cmd.Path), p.err, p.logTail())
		case <-ctx.Done():
			return fmt.Errorf("streambench: %s not ready: %v; log tail:\n%s", filepath.Base(p.cmd.Path), err, p.logTail())
		case <-tick.C:
		}
	}
}

func (p *process) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-15):], "\n")
}

// goBuild builds pkg (a package path or module path) into out, from the
// module at root.
func goBuild(ctx context.Context, root, out, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("streambench: go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

var errNotReady = errors.New("streambench: not ready")
