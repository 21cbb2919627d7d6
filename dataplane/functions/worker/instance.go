package worker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/emptypb"

	pb "github.com/magnetar-dev/magnetar/api/pulsarfunctions"
)

// Restart backoff of a failing instance: from minBackoff, doubled after each
// exit that came sooner than stableRun after its start, up to maxBackoff.
const (
	minBackoff  = time.Second
	maxBackoff  = time.Minute
	stableRun   = time.Minute
	stopGrace   = 10 * time.Second
	tailLines   = 20
	healthEvery = 10 * time.Second
	startHold   = 30 * time.Second
	// startPoll is how often a starting instance is asked for its health
	// until it first answers (a loopback call: the poll's period is part
	// of create → running).
	startPoll = 100 * time.Millisecond
)

// ports hands out loopback ports so that no two live instances of this
// worker are ever given the same one: a port is probed free, then held in
// the set until its instance exits.
type ports struct {
	mu   sync.Mutex
	held map[int]bool
}

func (p *ports) take() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held = map[int]bool{}
	}
	for range 64 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !p.held[port] {
			p.held[port] = true
			return port, nil
		}
	}
	return 0, errors.New("worker: no free port")
}

func (p *ports) release(ps ...int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, port := range ps {
		delete(p.held, port)
	}
}

// instanceStatus is what the supervisor knows of one instance.
type instanceStatus struct {
	Running   bool
	Restarts  int64
	LastError string // why the last run ended, with the tail of its output
	Port      int    // InstanceControl port of the live process (0: none)
	Metrics   int
	StartedAt time.Time
}

// supervisor runs one instance as a child process: it starts it, keeps
// the tail of its output, restarts it with exponential backoff when it
// exits, checks its health over gRPC, and stops it with SIGTERM, then
// SIGKILL after stopGrace. One goroutine (run) owns the process; status is
// read under mu.
type supervisor struct {
	key    string
	rt     *Runtimes
	env    *instanceEnv
	launch launch // ports are filled per start
	ports  *ports
	// starting is the worker's start slots: one is held from the process
	// start until the instance first answers a health check (at most
	// startHold).
	starting chan struct{}
	// started observes, per runtime, how long each start took from the
	// process's exec to its first health answer (nil: not observed).
	started *prometheus.HistogramVec
	log     *slog.Logger
	output  string // file the instance's stdout and stderr are appended to
	// prepare returns the local path of the instance's package (fetched
	// before each start, so a fetch failure backs off like a crash).
	prepare func(ctx context.Context) (string, error)

	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	status instanceStatus
	tail   []string
	conn   *grpc.ClientConn
}

func (s *supervisor) start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		s.run(ctx)
	}()
}

// stop ends the instance and waits for it.
func (s *supervisor) stop() {
	s.cancel()
	<-s.done
}

func (s *supervisor) run(ctx context.Context) {
	backoff := minBackoff
	for ctx.Err() == nil {
		started := time.Now()
		err := s.runOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		s.status.Restarts++
		s.status.LastError = s.describeExit(err)
		s.mu.Unlock()
		s.log.Warn("function instance exited", "instance", s.key, "err", err, "restart_in", backoff)
		if time.Since(started) >= stableRun {
			backoff = minBackoff
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

func (s *supervisor) describeExit(err error) string {
	msg := "instance exited"
	if err != nil {
		msg = err.Error()
	}
	if len(s.tail) > 0 {
		msg += ":\n" + strings.Join(s.tail, "\n")
	}
	return msg
}

// runOnce starts the process with fresh ports and returns when it exits
// (its error) or ctx ends (after stopping it).
func (s *supervisor) runOnce(ctx context.Context) error {
	pkg, err := s.prepare(ctx)
	if err != nil {
		return fmt.Errorf("package: %w", err)
	}
	port, err := s.ports.take()
	if err != nil {
		return err
	}
	metrics, err := s.ports.take()
	if err != nil {
		s.ports.release(port)
		return err
	}
	defer s.ports.release(port, metrics)
	l := s.launch
	l.port, l.metrics, l.pkgPath = port, metrics, pkg
	argv, err := s.rt.command(s.env, &l)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(s.output), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(s.output, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	if st, err := out.Stat(); err == nil && st.Size() > 16<<20 {
		out.Truncate(0) // the file keeps the recent runs, not all of them
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "PYTHONUNBUFFERED=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	s.mu.Lock()
	s.tail = s.tail[:0]
	s.mu.Unlock()
	// Take a start slot: released once the instance answers a health
	// check, exits, or startHold passes.
	select {
	case s.starting <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { <-s.starting }) }
	defer release()
	var copyDone sync.WaitGroup
	copyDone.Add(1)
	go func() {
		defer copyDone.Done()
		s.copyOutput(pr, out)
	}()
	if err := cmd.Start(); err != nil {
		pw.Close()
		copyDone.Wait()
		return fmt.Errorf("start %s: %w", argv[0], err)
	}
	execAt := time.Now()
	s.log.Info("function instance started", "instance", s.key, "pid", cmd.Process.Pid, "port", port, "metrics_port", metrics)
	conn, _ := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", port), grpc.WithTransportCredentials(insecure.NewCredentials()))
	s.mu.Lock()
	s.status.Running, s.status.Port, s.status.Metrics, s.status.StartedAt = true, port, metrics, time.Now()
	s.conn = conn
	s.mu.Unlock()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	health := time.NewTicker(healthEvery)
	defer health.Stop()
	// Until it first answers, the instance is polled quickly: that ends
	// its start (the slot goes to the next instance).
	ready := time.NewTicker(startPoll)
	defer ready.Stop()
	holdEnd := time.After(startHold)
	var werr error
loop:
	for {
		select {
		case werr = <-exited:
			break loop
		case <-holdEnd:
			release()
			ready.Stop()
		case <-ready.C:
			if conn != nil {
				hctx, cancel := context.WithTimeout(ctx, time.Second)
				_, err := pb.NewInstanceControlClient(conn).HealthCheck(hctx, &emptypb.Empty{})
				cancel()
				if err == nil {
					release()
					ready.Stop()
					if s.started != nil {
						s.started.WithLabelValues(s.launch.details.GetRuntime().String()).Observe(time.Since(execAt).Seconds())
					}
				}
			}
		case <-health.C:
			if conn != nil {
				hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				pb.NewInstanceControlClient(conn).HealthCheck(hctx, &emptypb.Empty{})
				cancel()
			}
		case <-ctx.Done():
			syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
			select {
			case werr = <-exited:
			case <-time.After(stopGrace):
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				werr = <-exited
			}
			break loop
		}
	}
	// Children the instance left in its group go with it.
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	pw.Close()
	copyDone.Wait()
	s.mu.Lock()
	s.status.Running, s.status.Port, s.status.Metrics = false, 0, 0
	s.conn = nil
	s.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
	return werr
}

// copyOutput appends the instance's output to its file, keeps the last
// tailLines lines for status, and passes lines to the worker's log.
func (s *supervisor) copyOutput(r io.Reader, out io.Writer) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		io.WriteString(out, line+"\n")
		s.mu.Lock()
		if len(s.tail) == tailLines {
			copy(s.tail, s.tail[1:])
			s.tail = s.tail[:tailLines-1]
		}
		s.tail = append(s.tail, line)
		s.mu.Unlock()
		s.log.Debug("function output", "instance", s.key, "line", line)
	}
	io.Copy(io.Discard, r)
}

// snapshot returns the supervisor's view and a client of the live
// instance (nil when none).
func (s *supervisor) snapshot() (instanceStatus, pb.InstanceControlClient) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	if s.conn == nil {
		return st, nil
	}
	return st, pb.NewInstanceControlClient(s.conn)
}
