package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/magnetar-dev/magnetar/internal/freeport"
)

// clusterSystem is Magnetar as a region runs it: one `magnetar metadata`
// (etcd) member, three bookies and two brokers, ledgers E=3/Qw=3/Qa=2 (the
// brokers' default), driven through the Pulsar Go client with both brokers
// in the service URL. As a "peer" of the standalone its ratios are
// standalone / cluster on the same machine. W2's CPU column counts the first
// broker only.
type clusterSystem struct {
	root string
	bin  string
}

func (c *clusterSystem) name() string { return "magnetar-cluster" }

func (c *clusterSystem) prepare(ctx context.Context, dir string) error {
	c.bin = filepath.Join(dir, "magnetar")
	return goBuild(ctx, c.root, c.bin, "./cmd/magnetar")
}

func (c *clusterSystem) start(ctx context.Context, dir string, d durability) (_ server, err error) {
	addrs, err := freeport.Addrs(9)
	if err != nil {
		return nil, err
	}
	cs := &clusterServer{}
	defer func() {
		if err != nil {
			cs.stop()
		}
	}()
	md := "http://" + addrs[0]
	p, err := startProcess(dir, "metadata.log", c.bin, "metadata", "--name", "m1", "--data-dir", filepath.Join(dir, "m1"),
		"--listen-client-url", md, "--listen-peer-url", "http://"+addrs[1])
	if err != nil {
		return nil, err
	}
	cs.procs = append(cs.procs, p)
	if err := p.waitReady(ctx, func(ctx context.Context) error { return httpGet(ctx, md+"/health") }); err != nil {
		return nil, err
	}
	for i := range 3 {
		args := []string{"bookie", "--data-dir", filepath.Join(dir, fmt.Sprintf("b%d", i)), "--listen", addrs[2+i], "--metadata", md}
		if d == durOS {
			args = append(args, "--journal-sync=false")
		}
		p, err := startProcess(dir, fmt.Sprintf("bookie-%d.log", i), c.bin, args...)
		if err != nil {
			return nil, err
		}
		cs.procs = append(cs.procs, p)
	}
	var brokers []string
	var first *magnetarServer
	for i := range 2 {
		baddr, haddr := addrs[5+2*i], addrs[6+2*i]
		p, err := startProcess(dir, fmt.Sprintf("broker-%d.log", i), c.bin, "broker", "--metadata", md,
			"--broker-addr", baddr, "--http-addr", haddr, "--load-shedding=false")
		if err != nil {
			return nil, err
		}
		cs.procs = append(cs.procs, p)
		s := &magnetarServer{process: p, broker: baddr, http: haddr}
		if err := p.waitReady(ctx, func(ctx context.Context) error {
			return s.httpDo(ctx, http.MethodGet, "/admin/v2/brokers/health", "")
		}); err != nil {
			return nil, err
		}
		if first == nil {
			first = s
		}
		brokers = append(brokers, baddr)
	}
	// Clients know both brokers; admin calls go to the first.
	cs.magnetarServer = &magnetarServer{process: first.process, broker: strings.Join(brokers, ","), http: first.http}
	return cs, nil
}

func httpGet(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("streambench: GET %s: %s", url, resp.Status)
	}
	return nil
}

// clusterServer is every process of the cluster; pid is the first broker's.
type clusterServer struct {
	*magnetarServer
	procs []*process
}

func (s *clusterServer) newAdapter() adapter { return &pulsarAdapter{srv: s.magnetarServer} }

// stop stops brokers first and the metadata store last.
func (s *clusterServer) stop() error {
	var errs []error
	for i := len(s.procs) - 1; i >= 0; i-- {
		errs = append(errs, s.procs[i].stop())
	}
	return errors.Join(errs...)
}
