package up

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/magnetar-dev/magnetar/regions/agent"
	"github.com/magnetar-dev/magnetar/regions/provisioner/process"
)

// Agent processes (Config.AgentProcesses). Each region's agent is a child
// `magnetar agent` in a process group of its own, so a signal to up's
// terminal does not reach it before up has decided the order of shutdown.
// A goroutine per region supervises it: when the process exits while up
// runs, it is started again after AgentRestartDelay. Its PID is recorded in
// regions/<id>/agent.pid; a later up stops an agent a crashed up left
// behind before it starts its own.

const agentPIDFile = "agent.pid"

// agentArgs are the command line of region's agent process.
func (e *Env) agentArgs(region, rdir string) []string {
	args := []string{"agent", "--region", region, "--control-plane", "http://" + e.srv.Addr().String(),
		"--api-key-file", e.keyFile, "--data-dir", rdir, "--binary", e.cfg.Binary, "--failover-listen", "127.0.0.1:0"}
	if d := e.cfg.PollTimeout; d > 0 {
		args = append(args, "--poll-timeout", d.String())
	}
	if d := e.cfg.ReconcileInterval; d > 0 {
		args = append(args, "--reconcile-interval", d.String())
	}
	if d := e.cfg.MeteringInterval; d > 0 {
		args = append(args, "--metering-interval", d.String())
	}
	if e.cfg.InsecureDataPlanes {
		args = append(args, "--insecure-data-planes")
	}
	// Always explicit: the command's default is on, Config's zero value off.
	args = append(args, fmt.Sprintf("--data-plane-auth=%t", e.cfg.DataPlaneAuth))
	return append(args, e.consulArgs(region)...)
}

// startAgentProcess stops an agent left behind for rdir, starts region's
// agent process and supervises it until ctx is done, then stops it.
func (e *Env) startAgentProcess(ctx context.Context, region, rdir string) error {
	if err := os.MkdirAll(rdir, 0o700); err != nil {
		return fmt.Errorf("up: %w", err)
	}
	stopStaleAgent(rdir, e.log)
	args := e.agentArgs(region, rdir)
	cmd, err := e.spawnAgent(region, rdir, args)
	if err != nil {
		return err
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.superviseAgent(ctx, region, rdir, args, cmd)
	}()
	return nil
}

func (e *Env) spawnAgent(region, rdir string, args []string) (*exec.Cmd, error) {
	logPath := filepath.Join(rdir, "agent.log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("up: %w", err)
	}
	defer lf.Close()
	os.Remove(filepath.Join(rdir, agent.FailoverAddrFileName))
	cmd := exec.Command(e.cfg.Binary, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if t := e.cfg.Consul.Token; t != "" && e.cfg.Discovery == "consul" {
		cmd.Env = append(os.Environ(), "CONSUL_HTTP_TOKEN="+t) // never on the command line
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("up: start the agent of region %s: %w", region, err)
	}
	pidFile := filepath.Join(rdir, agentPIDFile)
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600); err != nil {
		e.log.Warn("up: record the agent's PID", "region", region, "file", pidFile, "err", err)
	}
	e.log.Info("up: agent process started", "region", region, "pid", cmd.Process.Pid, "log", logPath)
	return cmd, nil
}

func (e *Env) superviseAgent(ctx context.Context, region, rdir string, args []string, cmd *exec.Cmd) {
	for {
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-ctx.Done():
			stopAgent(cmd, exited)
			os.Remove(filepath.Join(rdir, agentPIDFile))
			return
		case err := <-exited:
			e.log.Warn("up: agent process exited; starting it again", "region", region, "pid", cmd.Process.Pid,
				"status", exitStatus(err), "after", e.cfg.AgentRestartDelay)
		}
		for {
			t := time.NewTimer(e.cfg.AgentRestartDelay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			next, err := e.spawnAgent(region, rdir, args)
			if err == nil {
				cmd = next
				break
			}
			e.log.Error("up: agent process", "region", region, "err", err)
		}
	}
}

// stopAgent sends SIGTERM to the agent's process group and SIGKILL after
// agentStopGrace; it returns when the process has exited.
func stopAgent(cmd *exec.Cmd, exited <-chan error) {
	pid := cmd.Process.Pid
	syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-exited:
		return
	case <-time.After(agentStopGrace):
	}
	syscall.Kill(-pid, syscall.SIGKILL)
	<-exited
}

func exitStatus(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ProcessState.String()
	}
	if err != nil {
		return err.Error()
	}
	return "exit status 0"
}

// stopStaleAgent stops the agent process recorded in rdir's agent.pid when
// it still runs (an up that was SIGKILLed leaves it behind): two agents on
// one region's directory would run its clusters twice.
func stopStaleAgent(rdir string, log *slog.Logger) {
	raw, err := os.ReadFile(filepath.Join(rdir, agentPIDFile))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 0 || !isAgentOf(pid, rdir) {
		return
	}
	log.Warn("up: stopping the agent a previous run left behind", "pid", pid, "data_dir", rdir)
	if err := process.StopGroups(context.Background(), []int{pid}, agentStopGrace, log); err != nil {
		log.Error("up: the agent a previous run left behind", "pid", pid, "err", err)
	}
}

// isAgentOf reports whether pid is a live `magnetar agent --data-dir rdir`.
func isAgentOf(pid int, rdir string) bool {
	args, ok := process.Cmdline(pid)
	i := slices.Index(args, "--data-dir")
	return ok && len(args) > 1 && args[1] == "agent" && i > 0 && i+1 < len(args) && args[i+1] == rdir
}
