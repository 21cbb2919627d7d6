// Package consultest starts real Consul agents for tests: one dev-mode
// server per datacenter, every port a free loopback port, joined over the
// WAN so each datacenter answers ?dc= queries for the others.
//
// The binary is found through $MAGNETAR_CONSUL, then PATH, then
// $(go env GOPATH)/bin, and must be one of the MPL-2.0 releases
// v1.16.0-v1.16.3 (regions/discovery/consul/setup.sh builds v1.16.3 there).
// Without it a test is skipped with a message, unless
// MAGNETAR_REQUIRE_CONSUL=1, when it fails.
//
// Dev-mode agents keep their catalog in memory: a restarted agent comes
// back empty, like a Consul whose data was lost. With Options.ACL the
// agents deny by default and ManagementToken is a management token.
//
// A Cluster is owned by the test that started it and stopped at its
// cleanup; its methods are safe for concurrent use.
package consultest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/magnetar-dev/magnetar/internal/freeport"
)

// Version is the Consul release the tests are written against.
const Version = "v1.16.3"

// RequireEnv set to 1 makes a missing binary a failure instead of a skip.
const RequireEnv = "MAGNETAR_REQUIRE_CONSUL"

// BinaryEnv names a Consul binary to use.
const BinaryEnv = "MAGNETAR_CONSUL"

// startTimeout bounds an agent's start, leader election and WAN join; the
// machine may be busy with builds.
const startTimeout = 60 * time.Second

// usable matches the versions this package runs: the MPL-2.0 releases.
var usable = regexp.MustCompile(`^Consul v1\.16\.[0-3]\b`)

// Binary returns the Consul binary's path, or "" and why not.
func Binary() (string, string) {
	var candidates []string
	if p := os.Getenv(BinaryEnv); p != "" {
		candidates = append(candidates, p)
	} else {
		if p, err := exec.LookPath("consul"); err == nil {
			candidates = append(candidates, p)
		}
		if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
			for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
				candidates = append(candidates, filepath.Join(dir, "bin", "consul"))
			}
		}
	}
	why := "consul not found (set " + BinaryEnv + ", or run regions/discovery/consul/setup.sh to build " + Version + ")"
	for _, p := range candidates {
		st, err := os.Stat(p)
		if err != nil || st.IsDir() {
			continue
		}
		out, err := exec.Command(p, "version").Output()
		if err != nil {
			why = fmt.Sprintf("%s version: %v", p, err)
			continue
		}
		first, _, _ := strings.Cut(string(out), "\n")
		if !usable.MatchString(first) {
			why = fmt.Sprintf("%s is %q: only the MPL-2.0 releases v1.16.0-v1.16.3 are used (run regions/discovery/consul/setup.sh)", p, first)
			continue
		}
		return p, ""
	}
	return "", why
}

// Require returns the binary, or skips tb (fails it under RequireEnv=1).
func Require(tb testing.TB) string {
	tb.Helper()
	bin, why := Binary()
	if bin == "" {
		if os.Getenv(RequireEnv) == "1" {
			tb.Fatal(why)
		}
		tb.Skip(why)
	}
	return bin
}

// Options configures Start.
type Options struct {
	// Datacenters, one agent each; default dc1 and dc2. The first is the
	// primary datacenter.
	Datacenters []string
	// ACL turns on ACLs with default_policy deny; the management token is
	// Cluster.ManagementToken.
	ACL bool
}

// Cluster is a set of WAN-joined Consul agents.
type Cluster struct {
	// Agents, in the order of Options.Datacenters.
	Agents []*Agent
	// ManagementToken is a management token ("" without ACLs).
	ManagementToken string

	bin string
	tb  testing.TB
}

// Agent is one dev-mode Consul server.
type Agent struct {
	Datacenter, Node string
	// HTTPAddr is the HTTP API's host:port, DNSAddr the DNS server's (UDP
	// and TCP), SerfWANAddr the WAN gossip address others join.
	HTTPAddr, DNSAddr, SerfWANAddr string
	// Dir holds the agent's configuration and log.
	Dir string

	c      *Cluster
	args   []string
	nodeID string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	out  *lockedBuffer
}

// Start starts one agent per datacenter, waits for their leaders, joins
// them over the WAN and waits until each lists every datacenter. The
// agents are stopped at tb's cleanup.
func Start(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	bin := Require(tb)
	if len(opts.Datacenters) == 0 {
		opts.Datacenters = []string{"dc1", "dc2"}
	}
	c := &Cluster{bin: bin, tb: tb}
	if opts.ACL {
		c.ManagementToken = uuid()
	}
	tb.Cleanup(c.Stop)
	for _, dc := range opts.Datacenters {
		a, err := c.newAgent(dc, opts.Datacenters[0], tb.TempDir())
		if err != nil {
			tb.Fatal(err)
		}
		c.Agents = append(c.Agents, a)
		if err := a.start(); err != nil {
			tb.Fatal(err)
		}
	}
	for _, a := range c.Agents {
		if err := a.waitLeader(); err != nil {
			tb.Fatal(err)
		}
	}
	if err := c.joinWAN(nil); err != nil {
		tb.Fatal(err)
	}
	for _, a := range c.Agents {
		if err := a.waitNode(); err != nil {
			tb.Fatal(err)
		}
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			for _, a := range c.Agents {
				tb.Logf("consul %s output (last 4 KiB):\n%s", a.Datacenter, a.Output(4096))
			}
		}
	})
	return c
}

func (c *Cluster) newAgent(dc, primary, dir string) (*Agent, error) {
	ports := make([]int, 7)
	for i := range ports {
		p, err := freeport.Port()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	host := "127.0.0.1"
	a := &Agent{
		Datacenter:  dc,
		Node:        "consul-" + dc,
		HTTPAddr:    net.JoinHostPort(host, strconv.Itoa(ports[0])),
		DNSAddr:     net.JoinHostPort(host, strconv.Itoa(ports[1])),
		SerfWANAddr: net.JoinHostPort(host, strconv.Itoa(ports[3])),
		Dir:         dir,
		c:           c,
		nodeID:      uuid(),
	}
	// Dev mode binds 127.0.0.1:8503 for gRPC over TLS unless told
	// otherwise, so two agents would collide without -grpc-tls-port.
	a.args = []string{"agent", "-dev",
		"-node", a.Node, "-node-id", a.nodeID, "-datacenter", dc,
		"-bind", host, "-client", host,
		"-http-port", strconv.Itoa(ports[0]), "-dns-port", strconv.Itoa(ports[1]),
		"-serf-lan-port", strconv.Itoa(ports[2]), "-serf-wan-port", strconv.Itoa(ports[3]),
		"-server-port", strconv.Itoa(ports[4]), "-grpc-port", strconv.Itoa(ports[5]),
		"-grpc-tls-port", strconv.Itoa(ports[6]),
		"-log-level", "info",
	}
	if c.ManagementToken != "" {
		cfg := map[string]any{
			"primary_datacenter": primary,
			"acl": map[string]any{
				"enabled":                  true,
				"default_policy":           "deny",
				"down_policy":              "extend-cache",
				"enable_token_persistence": true,
				"enable_token_replication": true,
				"tokens": map[string]string{
					"initial_management": c.ManagementToken,
					"agent":              c.ManagementToken,
					"replication":        c.ManagementToken,
				},
			},
		}
		b, err := json.Marshal(cfg)
		if err != nil {
			return nil, err
		}
		path := filepath.Join(dir, "acl.json")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return nil, err
		}
		a.args = append(a.args, "-config-file", path)
	}
	return a, nil
}

// start launches the agent's process.
func (a *Agent) start() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd != nil {
		select {
		case <-a.done:
		default:
			return fmt.Errorf("consultest: agent %s is running", a.Datacenter)
		}
	}
	if a.out == nil {
		a.out = &lockedBuffer{}
	}
	cmd := exec.Command(a.c.bin, a.args...)
	cmd.Stdout, cmd.Stderr = a.out, a.out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("consultest: start consul %s: %w", a.Datacenter, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	a.cmd, a.done = cmd, done
	return nil
}

// waitLeader waits until the agent's datacenter has a leader.
func (a *Agent) waitLeader() error {
	return a.poll("leader", func(ctx context.Context, cl *api.Client) error {
		leader, err := cl.Status().LeaderWithQueryOptions((&api.QueryOptions{}).WithContext(ctx))
		if err == nil && leader == "" {
			err = errors.New("no leader yet")
		}
		return err
	})
}

// waitNode waits until the agent's node is in its catalog. With ACLs, a
// secondary datacenter gets there only once it reaches the primary over
// the WAN, so this comes after joinWAN.
func (a *Agent) waitNode() error {
	return a.poll("node in the catalog", func(ctx context.Context, cl *api.Client) error {
		node, _, err := cl.Catalog().Node(a.Node, (&api.QueryOptions{}).WithContext(ctx))
		if err == nil && node == nil {
			err = errors.New("node not yet in the catalog")
		}
		return err
	})
}

// poll calls cond until it returns nil, the agent exits or startTimeout
// passes.
func (a *Agent) poll(what string, cond func(context.Context, *api.Client) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	cl := a.apiClient(a.c.ManagementToken)
	for {
		err := cond(ctx, cl)
		if err == nil {
			return nil
		}
		select {
		case <-a.exited():
			return fmt.Errorf("consultest: consul %s exited: %s", a.Datacenter, a.Output(4096))
		case <-ctx.Done():
			return fmt.Errorf("consultest: consul %s: no %s after %s: %v\n%s", a.Datacenter, what, startTimeout, err, a.Output(4096))
		case <-time.After(50 * time.Millisecond): // polling the agent's status
		}
	}
}

// joinWAN joins the agents over the WAN (only the agent only, when set)
// and waits until each running agent lists every datacenter. The join is
// asked of the primary datacenter's agent where it can be: with ACLs a
// secondary cannot check the management token before it reaches the
// primary.
func (c *Cluster) joinWAN(only *Agent) error {
	if len(c.Agents) < 2 {
		return nil
	}
	join := func(from, to *Agent) error {
		if err := from.apiClient(c.ManagementToken).Agent().Join(to.SerfWANAddr, true); err != nil {
			return fmt.Errorf("consultest: join %s and %s over the WAN: %w", from.Datacenter, to.Datacenter, err)
		}
		return nil
	}
	primary := c.Agents[0]
	switch {
	case only == nil:
		for _, a := range c.Agents[1:] {
			if err := join(primary, a); err != nil {
				return err
			}
		}
	case only == primary:
		for _, a := range c.Agents[1:] {
			if a.Running() {
				if err := join(primary, a); err != nil {
					return err
				}
				break
			}
		}
	case primary.Running():
		if err := join(primary, only); err != nil {
			return err
		}
	default:
		for _, a := range c.Agents {
			if a != only && a.Running() {
				if err := join(only, a); err != nil {
					return err
				}
				break
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for _, a := range c.Agents {
		if !a.Running() {
			continue
		}
		for {
			dcs, err := a.apiClient(c.ManagementToken).Catalog().Datacenters()
			if err == nil && c.allListed(dcs) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("consultest: %s lists datacenters %v after %s, want all of them (%v)", a.Datacenter, dcs, startTimeout, err)
			case <-time.After(50 * time.Millisecond): // polling the WAN membership
			}
		}
	}
	return nil
}

func (c *Cluster) allListed(dcs []string) bool {
	have := map[string]bool{}
	for _, d := range dcs {
		have[d] = true
	}
	for _, a := range c.Agents {
		if a.Running() && !have[a.Datacenter] {
			return false
		}
	}
	return true
}

// Agent returns the agent of datacenter dc.
func (c *Cluster) Agent(dc string) *Agent {
	for _, a := range c.Agents {
		if a.Datacenter == dc {
			return a
		}
	}
	c.tb.Fatalf("consultest: no datacenter %q", dc)
	return nil
}

// Stop stops every agent.
func (c *Cluster) Stop() {
	for _, a := range c.Agents {
		a.Stop()
	}
}

// CreateToken creates, in the primary datacenter, a policy of rules (HCL)
// and a token holding it, and returns the token's secret.
func (c *Cluster) CreateToken(tb testing.TB, name, rules string) string {
	tb.Helper()
	if c.ManagementToken == "" {
		tb.Fatal("consultest: CreateToken needs Options.ACL")
	}
	cl := c.Agents[0].apiClient(c.ManagementToken)
	p, _, err := cl.ACL().PolicyCreate(&api.ACLPolicy{Name: name, Rules: rules}, nil)
	if err != nil {
		tb.Fatalf("consultest: create policy %s: %v", name, err)
	}
	t, _, err := cl.ACL().TokenCreate(&api.ACLToken{Description: name, Policies: []*api.ACLTokenPolicyLink{{ID: p.ID}}}, nil)
	if err != nil {
		tb.Fatalf("consultest: create token %s: %v", name, err)
	}
	return t.SecretID
}

// Client returns an API client of the agent with token ("" for none).
func (a *Agent) Client(token string) *api.Client { return a.apiClient(token) }

func (a *Agent) apiClient(token string) *api.Client {
	cfg := api.DefaultNonPooledConfig()
	cfg.Address = a.HTTPAddr
	cfg.Scheme = "http"
	cfg.Token = token
	cfg.TokenFile = ""
	cfg.TLSConfig = api.TLSConfig{}
	cfg.HttpClient = &http.Client{Transport: cfg.Transport, Timeout: 10 * time.Second}
	cl, err := api.NewClient(cfg)
	if err != nil {
		panic(err) // only a malformed address fails, and this one is ours
	}
	return cl
}

// Running reports whether the agent's process runs.
func (a *Agent) Running() bool {
	select {
	case <-a.exited():
		return false
	default:
		return true
	}
}

func (a *Agent) exited() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return a.done
}

// Kill kills the agent with SIGKILL and waits for it to exit.
func (a *Agent) Kill() {
	a.mu.Lock()
	cmd, done := a.cmd, a.done
	a.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	<-done
}

// Stop stops the agent with SIGTERM (SIGKILL after 10 s) and waits.
func (a *Agent) Stop() {
	a.mu.Lock()
	cmd, done := a.cmd, a.done
	a.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	cmd.Process.Signal(os.Interrupt)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// Restart starts a stopped or killed agent again on the same ports and
// node ID, waits for its leader and joins it to the running agents over
// the WAN. Dev mode keeps nothing: it comes back with an empty catalog.
func (a *Agent) Restart(tb testing.TB) {
	tb.Helper()
	if a.Running() {
		tb.Fatalf("consultest: agent %s is running", a.Datacenter)
	}
	if err := a.start(); err != nil {
		tb.Fatal(err)
	}
	if err := a.waitLeader(); err != nil {
		tb.Fatal(err)
	}
	if err := a.c.joinWAN(a); err != nil {
		tb.Fatal(err)
	}
	if err := a.waitNode(); err != nil {
		tb.Fatal(err)
	}
}

// Output returns the last max bytes the agent printed.
func (a *Agent) Output(max int) string {
	a.mu.Lock()
	out := a.out
	a.mu.Unlock()
	if out == nil {
		return ""
	}
	return out.tail(max)
}

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) tail(max int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.b.Bytes()
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// uuid returns a random UUID, the form Consul wants for node IDs and
// tokens.
func uuid() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
