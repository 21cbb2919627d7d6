package up

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/magnetar-dev/magnetar/internal/freeport"
	"github.com/magnetar-dev/magnetar/regions/discovery/consul"
)

// Consul for `magnetar up --discovery consul` (Config.Discovery):
//
//   - with an address (Config.Consul.Address or CONSUL_HTTP_ADDR), every
//     region's agent registers with that Consul agent and the control plane
//     watches its federation; up starts nothing;
//   - otherwise up starts one Consul dev agent per region, the region's id
//     as its datacenter, on free loopback ports, joins them over the WAN
//     (each to the first) and waits until the first lists every
//     datacenter. The binary is Config.ConsulBinary, else "consul" on PATH,
//     else $GOPATH/bin/consul (regions/discovery/consul/setup.sh builds it).
//     Each agent's files are under consul/<region>/: consul.log, consul.pid,
//     http.addr and dns.addr (host:port). Dev agents keep their catalog in
//     memory: a restarted one is empty until the region agent registers
//     again, which it does within its check interval.
//
// Shutdown stops the Consul agents last, after the region agents and
// their clusters: nothing is deregistered on the way down.

// consulStartTimeout bounds the dev agents' start and WAN join.
const consulStartTimeout = 60 * time.Second

// consulAgent is a Consul dev agent up runs.
type consulAgent struct {
	dc, dir   string
	http, dns string
	serfWAN   string
	cmd       *exec.Cmd
	exited    chan struct{}
	client    *api.Client
}

// consulBinary finds the consul binary ("" when there is none).
func consulBinary(explicit string) string {
	if explicit != "" {
		return explicit
	}
	if p, err := exec.LookPath("consul"); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		if home, err := os.UserHomeDir(); err == nil {
			gopath = filepath.Join(home, "go")
		}
	}
	if p := filepath.Join(gopath, "bin", "consul"); gopath != "" {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	return ""
}

// consulConfig is region's agent's Consul settings, and the control
// plane's (region "").
func (e *Env) consulConfig(region string) consul.Config {
	c := e.cfg.Consul
	for _, a := range e.consul {
		if a.dc == region || (region == "" && a == e.consul[0]) {
			c.Address, c.Datacenter = a.http, a.dc
			if region == "" {
				c.Datacenter = ""
			}
		}
	}
	return c
}

// startConsul starts and joins a dev agent per region, unless an address
// is given.
func (e *Env) startConsul(ctx context.Context) error {
	if e.cfg.Consul.Address != "" || os.Getenv(api.HTTPAddrEnvName) != "" {
		e.log.Info("up: consul: using the given agent", "address", cmpOr(e.cfg.Consul.Address, os.Getenv(api.HTTPAddrEnvName)))
		return nil
	}
	bin := consulBinary(e.cfg.ConsulBinary)
	if bin == "" {
		return errors.New("up: --discovery consul: no consul binary (build it with regions/discovery/consul/setup.sh, put it on PATH) and no CONSUL_HTTP_ADDR / --consul-http-addr")
	}
	ctx, cancel := context.WithTimeout(ctx, consulStartTimeout)
	defer cancel()
	for _, r := range e.cfg.Regions {
		a, err := e.startConsulAgent(bin, r)
		if err != nil {
			return err
		}
		e.consul = append(e.consul, a)
		if err := a.waitLeader(ctx); err != nil {
			return err
		}
	}
	first := e.consul[0]
	for _, a := range e.consul[1:] {
		if err := first.client.Agent().Join(a.serfWAN, true); err != nil {
			return fmt.Errorf("up: consul: join %s and %s over the WAN: %w", first.dc, a.dc, err)
		}
	}
	for {
		dcs, err := first.client.Catalog().Datacenters()
		if err == nil && len(dcs) >= len(e.cfg.Regions) && allIn(e.cfg.Regions, dcs) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("up: consul: datacenter %s lists %v, want every region's (%v)", first.dc, dcs, err)
		case <-time.After(100 * time.Millisecond): // polling the WAN membership
		}
	}
	for _, a := range e.consul {
		e.log.Info("up: consul agent running", "datacenter", a.dc, "http", a.http, "dns", a.dns, "pid", a.cmd.Process.Pid)
	}
	return nil
}

func allIn(want, have []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (e *Env) startConsulAgent(bin, dc string) (*consulAgent, error) {
	dir := filepath.Join(e.dir, "consul", dc)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("up: %w", err)
	}
	stopStaleConsul(dir)
	ports := make([]string, 7)
	for i := range ports {
		p, err := freeport.Port()
		if err != nil {
			return nil, fmt.Errorf("up: consul: %w", err)
		}
		ports[i] = strconv.Itoa(p)
	}
	host := "127.0.0.1"
	a := &consulAgent{dc: dc, dir: dir, http: net.JoinHostPort(host, ports[0]), dns: net.JoinHostPort(host, ports[1]),
		serfWAN: net.JoinHostPort(host, ports[3]), exited: make(chan struct{})}
	// Dev mode binds 8503 for gRPC over TLS unless told otherwise: two
	// agents need -grpc-tls-port too.
	args := []string{"agent", "-dev", "-node", "consul-" + dc, "-datacenter", dc, "-bind", host, "-client", host,
		"-http-port", ports[0], "-dns-port", ports[1], "-serf-lan-port", ports[2], "-serf-wan-port", ports[3],
		"-server-port", ports[4], "-grpc-port", ports[5], "-grpc-tls-port", ports[6], "-log-level", "info"}
	lf, err := os.OpenFile(filepath.Join(dir, "consul.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("up: %w", err)
	}
	defer lf.Close()
	a.cmd = exec.Command(bin, args...)
	a.cmd.Stdout, a.cmd.Stderr = lf, lf
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := a.cmd.Start(); err != nil {
		return nil, fmt.Errorf("up: start consul for region %s: %w", dc, err)
	}
	go func() { a.cmd.Wait(); close(a.exited) }()
	for name, v := range map[string]string{"consul.pid": strconv.Itoa(a.cmd.Process.Pid), "http.addr": a.http, "dns.addr": a.dns} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o600); err != nil {
			a.stop()
			return nil, fmt.Errorf("up: %w", err)
		}
	}
	cfg := api.DefaultConfig()
	cfg.Address = a.http
	if a.client, err = api.NewClient(cfg); err != nil {
		a.stop()
		return nil, fmt.Errorf("up: consul: %w", err)
	}
	return a, nil
}

// waitLeader waits for the dev agent to elect itself.
func (a *consulAgent) waitLeader(ctx context.Context) error {
	for {
		if l, err := a.client.Status().Leader(); err == nil && l != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("up: consul of region %s has no leader (log: %s)", a.dc, filepath.Join(a.dir, "consul.log"))
		case <-a.exited:
			return fmt.Errorf("up: consul of region %s exited (log: %s)", a.dc, filepath.Join(a.dir, "consul.log"))
		case <-time.After(50 * time.Millisecond): // polling the leader election
		}
	}
}

// stop terminates the agent, killing it after 10 s.
func (a *consulAgent) stop() {
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(10 * time.Second):
		a.cmd.Process.Kill()
		<-a.exited
	}
	os.Remove(filepath.Join(a.dir, "consul.pid"))
}

// stopStaleConsul kills a dev agent a SIGKILLed up left behind in dir.
func stopStaleConsul(dir string) {
	raw, err := os.ReadFile(filepath.Join(dir, "consul.pid"))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(string(trimNL(raw)))
	if err != nil || pid <= 0 {
		return
	}
	if exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); err == nil && filepath.Base(exe) == "consul" {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	os.Remove(filepath.Join(dir, "consul.pid"))
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

// registrarConfig is region's agent's Consul registration (nil without
// Consul).
func (e *Env) registrarConfig(region string) *consul.RegistrarConfig {
	if e.cfg.Discovery != "consul" {
		return nil
	}
	return &consul.RegistrarConfig{Consul: e.consulConfig(region), Interval: e.cfg.ConsulCheckInterval, TTL: e.cfg.ConsulCheckTTL}
}

// consulArgs are the flags of region's agent process that say the same.
// The token and TLS settings reach it through the environment
// (CONSUL_HTTP_TOKEN, ...) or these flags; a token is never put on a
// command line.
func (e *Env) consulArgs(region string) []string {
	if e.cfg.Discovery != "consul" {
		return nil
	}
	c := e.consulConfig(region)
	args := []string{"--discovery", "consul"}
	for _, f := range []struct{ flag, v string }{
		{"--consul-http-addr", c.Address}, {"--consul-datacenter", c.Datacenter}, {"--consul-token-file", c.TokenFile},
		{"--consul-ca-file", c.CAFile}, {"--consul-ca-path", c.CAPath}, {"--consul-client-cert", c.ClientCert},
		{"--consul-client-key", c.ClientKey}, {"--consul-tls-server-name", c.TLSServerName},
	} {
		if f.v != "" {
			args = append(args, f.flag, f.v)
		}
	}
	if d := e.cfg.ConsulCheckInterval; d > 0 {
		args = append(args, "--consul-check-interval", d.String())
	}
	if d := e.cfg.ConsulCheckTTL; d > 0 {
		args = append(args, "--consul-check-ttl", d.String())
	}
	return args
}

// ConsulAgent is a Consul dev agent `up` runs for a region.
type ConsulAgent struct {
	Datacenter string
	// HTTPAddr and DNSAddr are host:port.
	HTTPAddr, DNSAddr string
	PID               int
}

// ConsulAgents are the Consul dev agents up runs, in region order (none
// with static discovery or a given Consul address).
func (e *Env) ConsulAgents() []ConsulAgent {
	out := make([]ConsulAgent, len(e.consul))
	for i, a := range e.consul {
		out[i] = ConsulAgent{Datacenter: a.dc, HTTPAddr: a.http, DNSAddr: a.dns, PID: a.cmd.Process.Pid}
	}
	return out
}
