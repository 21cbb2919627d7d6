package kubenode

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// proc is one of the node's processes. Its goroutine waits for the process
// and closes done; err is set before that.
type proc struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// startProc runs bin with args in a process group of its own, its output
// appended to logFile. The kernel kills it if the thread that started it
// exits (Pdeathsig), so a test binary that dies does not leave it running.
func startProc(name, logFile string, env []string, bin string, args ...string) (*proc, error) {
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kubenode: %w", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("kubenode: starting %s: %w", name, err)
	}
	p := &proc{name: name, log: logFile, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, SIGKILL after grace, and waits.
// A process that had already exited on its own is reported as an error.
func (p *proc) stop(grace time.Duration) error {
	if p.exited() {
		return fmt.Errorf("kubenode: %s had exited: %v\n%s", p.name, p.err, p.tail(2048))
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("kubenode: %s (pid %d) did not exit after SIGKILL", p.name, pgid)
	}
}

// tail returns the last n bytes of the process's log.
func (p *proc) tail(n int64) string {
	return tailFile(p.log, n)
}

// tailFile returns the last n bytes of file, starting at a line.
func tailFile(file string, n int64) string {
	f, err := os.Open(file)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	off := st.Size() - n
	if off < 0 {
		off = 0
	}
	b, err := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	if err != nil && !errors.Is(err, io.EOF) {
		return err.Error()
	}
	if off > 0 {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}
