package main

import (
	"context"

	"github.com/magnetar-dev/magnetar/bench/internal/proc"
)

// process is a server subprocess (proc.Process) under the names the
// server interface uses.
type process struct{ *proc.Process }

// startProcess runs bin with args, output to dir/<logName>.
func startProcess(dir, logName, bin string, args ...string) (*process, error) {
	p, err := proc.Start(dir, logName, bin, args...)
	if err != nil {
		return nil, err
	}
	return &process{p}, nil
}

func (p *process) pid() int    { return p.Pid() }
func (p *process) stop() error { return p.Stop() }

func (p *process) waitReady(ctx context.Context, probe func(ctx context.Context) error) error {
	return p.WaitReady(ctx, probe)
}

func goBuild(ctx context.Context, root, out, pkg string) error {
	return proc.GoBuild(ctx, root, out, pkg)
}

func moduleRoot() (string, error) { return proc.ModuleRoot() }
