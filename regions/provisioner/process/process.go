package process

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/magnetar-dev/magnetar/internal/freeport"
	"github.com/magnetar-dev/magnetar/internal/pki"
	"github.com/magnetar-dev/magnetar/regions/provisioner"
)

// Defaults of Config.
const (
	DefaultCheckInterval = time.Second
	DefaultStopGrace     = 10 * time.Second
)

const (
	maxRestarts    = 5
	minBackoff     = 500 * time.Millisecond
	maxBackoff     = 30 * time.Second
	stableAfter    = 10 * time.Second // healthy this long resets the restart count
	probeTimeout   = time.Second
	stateFile      = "state.json"
	clustersSubdir = "clusters"
)

// Config configures a Provisioner.
type Config struct {
	// DataDir holds every cluster, under DataDir/clusters. Required.
	DataDir string
	// Binary is the magnetar binary run for every process; default
	// os.Executable().
	Binary string
	// Logger; default slog.Default().
	Logger *slog.Logger
	// CheckInterval is how often the supervisor checks processes; default
	// DefaultCheckInterval.
	CheckInterval time.Duration
	// StopGrace is how long a stopped process has between SIGTERM and
	// SIGKILL; default DefaultStopGrace.
	StopGrace time.Duration
	// Offload, when its Bucket is set, gives every cluster's brokers tiered
	// storage in that bucket (see doc.go).
	Offload OffloadConfig
	// InsecureDataPlanes runs clusters without TLS: plain links between
	// brokers, bookies and the metadata store, and no TLS listeners on the
	// brokers. For development only. Default false: every internal link is
	// mutual TLS with certificates of the region CA, and brokers serve
	// pulsar+ssl:// and https:// beside their plain listeners (see doc.go).
	InsecureDataPlanes bool
}

// OffloadConfig is the tiered storage the provisioner gives its clusters:
// one bucket, each cluster under its own key prefix.
type OffloadConfig struct {
	// Driver ("aws-s3" or "s3"), Bucket, Region and Endpoint: as the
	// brokers' --managed-ledger-offload-driver and
	// --s3-managed-ledger-offload-* flags. Empty Bucket: no tiered storage.
	Driver, Bucket, Region, Endpoint string
	// Prefix is prepended to each cluster's prefix "<org>/<cluster>/".
	Prefix string
	// AccessKeyID and SecretAccessKey reach the brokers in their
	// environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), never on
	// their command line; both empty: the brokers use the standard AWS
	// chain of the provisioner's environment.
	AccessKeyID, SecretAccessKey string
}

// Validate fills defaults and checks required fields.
func (c *Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("process: config: DataDir is required")
	}
	abs, err := filepath.Abs(c.DataDir)
	if err != nil {
		return fmt.Errorf("process: config: %w", err)
	}
	c.DataDir = abs
	if c.Binary == "" {
		if c.Binary, err = os.Executable(); err != nil {
			return fmt.Errorf("process: config: find own binary: %w", err)
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.CheckInterval <= 0 {
		c.CheckInterval = DefaultCheckInterval
	}
	if c.StopGrace <= 0 {
		c.StopGrace = DefaultStopGrace
	}
	return nil
}

// Provisioner runs clusters as local processes. See the package doc.
type Provisioner struct {
	cfg  Config
	log  *slog.Logger
	http *http.Client

	mu       sync.Mutex
	clusters map[string]*cluster // by resource name

	caMu sync.Mutex // guards ca; taken last (after cluster.mu)
	ca   *pki.CA    // loaded or created on first use (regionCA)

	stopping  chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

var _ provisioner.Provisioner = (*Provisioner)(nil)

type cluster struct {
	mu      sync.Mutex
	dir     string
	st      state
	deleted bool // removed from the provisioner; no more work
}

// state is the persisted record of a cluster (state.json).
type state struct {
	Name     string            `json:"name"`
	Size     provisioner.Size  `json:"size"`
	Revision int64             `json:"revision"`
	Auth     *provisioner.Auth `json:"auth,omitempty"`
	Metadata *member           `json:"metadata"`
	Bookies  []*member         `json:"bookies"`
	Brokers  []*member         `json:"brokers"`
}

// member is one process of a cluster.
type member struct {
	Role      string   `json:"role"`
	Index     int      `json:"index"`
	Addr      string   `json:"addr"`                 // metadata client, bookie or broker address
	PeerAddr  string   `json:"peer_addr,omitempty"`  // metadata
	HTTPAddr  string   `json:"http_addr,omitempty"`  // broker
	TLSAddr   string   `json:"tls_addr,omitempty"`   // broker's pulsar+ssl:// listener
	HTTPSAddr string   `json:"https_addr,omitempty"` // broker's https:// listener
	Args      []string `json:"args"`                 // arguments (after the binary) PID was started with
	PID       int      `json:"pid"`

	// Supervision, in memory only.
	started     bool // started or adopted by this provisioner at least once
	restarts    int  // restarts in a row without becoming stable
	nextStart   time.Time
	startedAt   time.Time
	lastErr     string
	certExpires time.Time // of its certificate, once ensureCert checked it
}

func (m *member) id() string { return m.Role + "-" + strconv.Itoa(m.Index) }

// New loads the clusters under cfg.DataDir, adopts their live processes and
// starts the supervisor, which restarts the dead ones.
func New(cfg Config) (*Provisioner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	root := filepath.Join(cfg.DataDir, clustersSubdir)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("process: %w", err)
	}
	p := &Provisioner{
		cfg: cfg, log: cfg.Logger, http: &http.Client{Timeout: probeTimeout},
		clusters: map[string]*cluster{}, stopping: make(chan struct{}),
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("process: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, e.Name())
		raw, err := os.ReadFile(filepath.Join(dir, stateFile))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("process: %w", err)
		}
		c := &cluster{dir: dir}
		if err := json.Unmarshal(raw, &c.st); err != nil {
			return nil, fmt.Errorf("process: %s: %w", filepath.Join(dir, stateFile), err)
		}
		for _, m := range c.members() {
			if alive(m.PID, m.Args) {
				m.started, m.startedAt = true, time.Now()
				p.log.Info("process: adopted", "cluster", c.st.Name, "process", m.id(), "pid", m.PID)
			} else if m.PID != 0 {
				p.log.Info("process: recorded process is gone", "cluster", c.st.Name, "process", m.id(), "pid", m.PID)
				m.PID = 0
			}
		}
		p.clusters[c.st.Name] = c
	}
	p.wg.Add(1)
	go p.supervise()
	return p, nil
}

// Close stops the supervisor and leaves every process running.
func (p *Provisioner) Close() error {
	p.closeOnce.Do(func() { close(p.stopping) })
	p.wg.Wait()
	return nil
}

// StopAll stops every process of every cluster, the clusters at once and
// each in the order of stopMembers, and keeps their data and state: a
// later Provisioner on the same DataDir starts them again. Call Close
// first, or the supervisor restarts them.
func (p *Provisioner) StopAll(ctx context.Context) error {
	clusters := p.snapshot()
	errs := make([]error, len(clusters))
	var wg sync.WaitGroup
	for i, c := range clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.mu.Lock()
			defer c.mu.Unlock()
			if _, err := os.Stat(c.dir); errors.Is(err, os.ErrNotExist) {
				return // deleted by another provisioner on the same directory
			}
			errs[i] = p.stopMembers(ctx, c, c.members())
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (p *Provisioner) snapshot() []*cluster {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*cluster, 0, len(p.clusters))
	for _, c := range p.clusters {
		out = append(out, c)
	}
	return out
}

func (p *Provisioner) supervise() {
	defer p.wg.Done()
	t := time.NewTicker(p.cfg.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stopping:
			return
		case <-t.C:
		}
		for _, c := range p.snapshot() {
			c.mu.Lock()
			if !c.deleted {
				p.repair(c)
			}
			c.mu.Unlock()
		}
	}
}

// dirName is the directory of a cluster: "<org>-<cluster>".
func dirName(name string) (string, error) {
	parts := strings.Split(name, "/")
	if len(parts) != 4 || parts[0] != "organizations" || parts[2] != "clusters" || parts[1] == "" || parts[3] == "" ||
		strings.ContainsAny(parts[1]+parts[3], `\.`) {
		return "", fmt.Errorf("%w: name %q is not organizations/{org}/clusters/{cluster}", provisioner.ErrInvalidSpec, name)
	}
	return parts[1] + "-" + parts[3], nil
}

// PulsarClusterName is the Pulsar cluster name the data plane of a cluster
// ("organizations/{org}/clusters/{cluster}") registers: "{org}-{cluster}",
// its directory's name ("" for a malformed name).
func PulsarClusterName(name string) string {
	dn, err := dirName(name)
	if err != nil {
		return ""
	}
	return dn
}

// Apply converges the cluster to spec and returns its status.
func (p *Provisioner) Apply(ctx context.Context, spec provisioner.ClusterSpec) (provisioner.ClusterStatus, error) {
	if err := spec.Validate(); err != nil {
		return provisioner.ClusterStatus{}, err
	}
	dn, err := dirName(spec.Name)
	if err != nil {
		return provisioner.ClusterStatus{}, err
	}
	p.mu.Lock()
	c, ok := p.clusters[spec.Name]
	if !ok {
		dir := filepath.Join(p.cfg.DataDir, clustersSubdir, dn)
		for _, o := range p.clusters {
			if o.dir == dir {
				p.mu.Unlock()
				return provisioner.ClusterStatus{}, fmt.Errorf("%w: %s and %s share the directory %s", provisioner.ErrInvalidSpec, spec.Name, o.st.Name, dir)
			}
		}
		c = &cluster{dir: dir, st: state{Name: spec.Name}}
		p.clusters[spec.Name] = c
	}
	p.mu.Unlock()

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deleted { // deleted concurrently: start over
		return p.Apply(ctx, spec)
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return provisioner.ClusterStatus{}, fmt.Errorf("process: %w", err)
	}
	if err := p.resize(ctx, c, spec); err != nil {
		return provisioner.ClusterStatus{}, err
	}
	p.repair(c)
	return p.status(c), nil
}

// resize records spec, adding members with fresh ports or stopping and
// removing the highest-numbered ones.
func (p *Provisioner) resize(ctx context.Context, c *cluster, spec provisioner.ClusterSpec) error {
	st := &c.st
	st.Size, st.Revision, st.Auth = spec.Size, spec.Revision, spec.Auth
	if st.Metadata == nil {
		ports, err := freeport.Addrs(2)
		if err != nil {
			return err
		}
		st.Metadata = &member{Role: "metadata", Addr: ports[0], PeerAddr: ports[1]}
	}
	for len(st.Bookies) < spec.Size.Bookies {
		ports, err := freeport.Addrs(1)
		if err != nil {
			return err
		}
		st.Bookies = append(st.Bookies, &member{Role: "bookie", Index: len(st.Bookies), Addr: ports[0]})
	}
	for len(st.Brokers) < spec.Size.Brokers {
		ports, err := freeport.Addrs(2)
		if err != nil {
			return err
		}
		st.Brokers = append(st.Brokers, &member{Role: "broker", Index: len(st.Brokers), Addr: ports[0], HTTPAddr: ports[1]})
	}
	if !p.cfg.InsecureDataPlanes {
		// Also for brokers recorded before TLS was on.
		for _, b := range st.Brokers {
			if b.TLSAddr != "" {
				continue
			}
			ports, err := freeport.Addrs(2)
			if err != nil {
				return err
			}
			b.TLSAddr, b.HTTPSAddr = ports[0], ports[1]
		}
	}
	var errs []error
	if n := spec.Size.Brokers; len(st.Brokers) > n {
		errs = append(errs, p.stopMembers(ctx, c, st.Brokers[n:]))
		st.Brokers = st.Brokers[:n]
	}
	if n := spec.Size.Bookies; len(st.Bookies) > n {
		removed := st.Bookies[n:]
		errs = append(errs, p.stopMembers(ctx, c, removed))
		st.Bookies = st.Bookies[:n]
		for _, m := range removed {
			p.log.Warn("process: bookie removed without draining its ledgers", "cluster", st.Name, "process", m.id())
			errs = append(errs, os.RemoveAll(filepath.Join(c.dir, m.id())))
		}
	}
	errs = append(errs, p.save(c))
	return errors.Join(errs...)
}

func (c *cluster) members() []*member {
	var out []*member
	if c.st.Metadata != nil {
		out = append(out, c.st.Metadata)
	}
	out = append(out, c.st.Bookies...)
	return append(out, c.st.Brokers...)
}

// secure reports whether the provisioner's clusters run with TLS.
func (p *Provisioner) secure() bool { return !p.cfg.InsecureDataPlanes }

func (p *Provisioner) args(c *cluster, m *member) []string {
	scheme := "http://"
	if p.secure() {
		scheme = "https://"
	}
	md := scheme + c.st.Metadata.Addr
	var args []string
	switch m.Role {
	case "metadata":
		args = []string{"metadata", "--name", "m0", "--data-dir", filepath.Join(c.dir, "metadata"),
			"--listen-client-url", md, "--listen-peer-url", scheme + m.PeerAddr}
	case "bookie":
		args = []string{"bookie", "--data-dir", filepath.Join(c.dir, m.id()), "--listen", m.Addr, "--metadata", md}
	default:
		e := min(3, c.st.Size.Bookies)
		args = []string{"broker", "--metadata", md, "--broker-addr", m.Addr, "--http-addr", m.HTTPAddr,
			"--cluster", filepath.Base(c.dir),
			"--ensemble", strconv.Itoa(e), "--write-quorum", strconv.Itoa(e), "--ack-quorum", strconv.Itoa(min(2, e))}
		args = append(args, p.offloadArgs(c)...)
		if a := c.st.Auth; a != nil {
			// The issuer's keys are kept under the broker's directory: a
			// broker restarted while the control plane is down still
			// accepts the tokens clients hold.
			args = append(args, "--auth-oidc-issuer", a.Issuer, "--auth-oidc-cache-dir", filepath.Join(c.dir, m.id(), "oidc"))
			for _, aud := range a.Audiences {
				args = append(args, "--auth-oidc-audience", aud)
			}
			args = append(args, "--authorization")
			if len(a.SuperuserRoles) > 0 {
				args = append(args, "--superuser-roles", strings.Join(a.SuperuserRoles, ","))
			}
			if a.FunctionsTokenFile != "" {
				args = append(args, "--functions-instance-token-file", a.FunctionsTokenFile)
			}
		}
	}
	if p.secure() {
		args = append(args, c.tlsArgs(m)...)
	}
	return args
}

func (p *Provisioner) save(c *cluster) error {
	raw, err := json.MarshalIndent(&c.st, "", "  ")
	if err != nil {
		return fmt.Errorf("process: %w", err)
	}
	tmp := filepath.Join(c.dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return fmt.Errorf("process: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, stateFile)); err != nil {
		return fmt.Errorf("process: %w", err)
	}
	return nil
}

// repair starts the processes that are not running (metadata first;
// bookies and brokers once it answers), restarts those whose arguments
// changed, and records new PIDs. Called with c.mu held.
func (p *Provisioner) repair(c *cluster) {
	// Reap every member that exited, also those this pass does not reach
	// (the members after a metadata store that is down): an exited child
	// stays a zombie until it is waited for.
	for _, m := range c.members() {
		reap(m.PID)
	}
	changed := false
	now := time.Now()
	mdUp := false
	for _, m := range c.members() {
		if m.Role != "metadata" && !mdUp {
			break
		}
		want := p.args(c, m)
		if p.secure() {
			// Issues a missing certificate, renews one near its expiry
			// (a running process re-reads it).
			if err := p.ensureCert(c, m); err != nil {
				m.lastErr = err.Error()
				p.log.Error("process: certificate", "cluster", c.st.Name, "process", m.id(), "err", err)
				continue
			}
		}
		live := m.PID != 0 && alive(m.PID, m.Args)
		if live && !slices.Equal(m.Args, want) {
			// Running with outdated flags (a broker's quorum after a bookie
			// count change): restart it, not counted as a failure.
			p.log.Info("process: restarting with new arguments", "cluster", c.st.Name, "process", m.id(), "pid", m.PID)
			if err := p.stopPIDs(context.Background(), []int{m.PID}); err != nil {
				p.log.Error("process: stop", "cluster", c.st.Name, "process", m.id(), "err", err)
				continue
			}
			live, m.started, m.restarts, m.PID, m.nextStart = false, false, 0, 0, now
		}
		if live {
			if m.restarts > 0 && now.Sub(m.startedAt) > stableAfter && p.healthy(m) {
				m.restarts = 0
			}
		} else if now.After(m.nextStart) || now.Equal(m.nextStart) {
			if m.started {
				m.restarts++
				p.log.Warn("process: restarting", "cluster", c.st.Name, "process", m.id(), "old_pid", m.PID, "restarts", m.restarts)
			}
			m.PID, m.Args = 0, want
			if err := p.start(c, m); err != nil {
				m.lastErr = err.Error()
				p.log.Error("process: start failed", "cluster", c.st.Name, "process", m.id(), "err", err)
			} else {
				m.lastErr = ""
			}
			m.started, m.startedAt = true, now
			m.nextStart = now.Add(min(minBackoff<<min(m.restarts, 10), maxBackoff))
			changed = true
		}
		if m.Role == "metadata" {
			mdUp = m.PID != 0 && p.healthy(m)
		}
	}
	if changed {
		if err := p.save(c); err != nil {
			p.log.Error("process: save state", "cluster", c.st.Name, "err", err)
		}
	}
}

func (p *Provisioner) start(c *cluster, m *member) error {
	logPath := filepath.Join(c.dir, m.id()+".log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("process: %w", err)
	}
	defer lf.Close()
	cmd := exec.Command(p.cfg.Binary, m.Args...)
	cmd.Dir = c.dir
	if o := p.cfg.Offload; m.Role == "broker" && o.Bucket != "" && o.AccessKeyID != "" {
		cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+o.AccessKeyID, "AWS_SECRET_ACCESS_KEY="+o.SecretAccessKey)
	}
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // own group: survives the agent, killed as a group
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("process: start %s: %w", m.id(), err)
	}
	m.PID = cmd.Process.Pid
	// Reaped by alive (wait4 WNOHANG): no goroutine waits for it, so it
	// can outlive this provisioner.
	cmd.Process.Release()
	p.log.Info("process: started", "cluster", c.st.Name, "process", m.id(), "pid", m.PID, "log", logPath)
	return nil
}

// reap waits for pid if it is an exited child of this process, without
// blocking; it does nothing for any other pid.
func reap(pid int) {
	if pid > 0 {
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	}
}

// alive reports whether pid is a live process running the magnetar binary
// with args. It reaps pid if it is an exited child of this process.
func alive(pid int, args []string) bool {
	if pid <= 0 {
		return false
	}
	var ws syscall.WaitStatus
	if wpid, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); wpid == pid {
		return false // our child, exited: now reaped
	}
	if !isZombieFree(pid) {
		return false
	}
	cmdline, ok := Cmdline(pid)
	return ok && len(cmdline) >= 1 && slices.Equal(cmdline[1:], args)
}

// Cmdline returns the command line of process pid; false when there is
// none (no such process, or a zombie, whose command line is empty).
func Cmdline(pid int) ([]string, bool) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(raw) == 0 {
		return nil, false
	}
	return strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00"), true
}

// isZombieFree reports whether pid exists and is not a zombie.
func isZombieFree(pid int) bool {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last ')'.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 || i+2 >= len(raw) {
		return false
	}
	s := raw[i+2]
	return s != 'Z' && s != 'X'
}

func (p *Provisioner) healthy(m *member) bool {
	switch m.Role {
	case "broker":
		resp, err := p.http.Get("http://" + m.HTTPAddr + "/admin/v2/brokers/health")
		if err != nil {
			return false
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	default:
		conn, err := net.DialTimeout("tcp", m.Addr, probeTimeout)
		if err != nil {
			return false
		}
		conn.Close()
		return true
	}
}

// status probes every process. Called with c.mu held.
func (p *Provisioner) status(c *cluster) provisioner.ClusterStatus {
	st := provisioner.ClusterStatus{Name: c.st.Name, Size: c.st.Size, Revision: c.st.Revision}
	var waiting, failed []string
	for _, m := range c.members() {
		ph := provisioner.ProcessHealth{Role: m.Role, Index: m.Index, PID: m.PID, Addr: m.Addr, HTTPAddr: m.HTTPAddr, Restarts: m.restarts, Message: m.lastErr}
		if p.secure() {
			ph.HTTPSAddr = m.HTTPSAddr
		}
		ph.Alive = m.PID != 0 && alive(m.PID, m.Args)
		ph.Healthy = ph.Alive && p.healthy(m)
		if !ph.Healthy {
			waiting = append(waiting, m.id())
			if m.restarts >= maxRestarts || m.lastErr != "" {
				msg := fmt.Sprintf("%s failed %d times in a row", m.id(), m.restarts)
				if m.lastErr != "" {
					msg += ": " + m.lastErr
				} else if tail := logTail(filepath.Join(c.dir, m.id()+".log")); tail != "" {
					msg += "; log ends: " + tail
				}
				failed = append(failed, msg)
			}
		}
		st.Processes = append(st.Processes, ph)
	}
	switch {
	case len(failed) > 0:
		st.State, st.Message = provisioner.StateFailed, strings.Join(failed, "; ")
	case len(waiting) > 0:
		st.State, st.Message = provisioner.StateProgressing, "waiting for "+strings.Join(waiting, ", ")
	default:
		st.State = provisioner.StateReady
		addrs := make([]string, len(c.st.Brokers))
		for i, b := range c.st.Brokers {
			addrs[i] = b.Addr
		}
		st.ServiceURL = "pulsar://" + strings.Join(addrs, ",")
		st.AdminURL = "http://" + c.st.Brokers[0].HTTPAddr
		if p.secure() {
			for i, b := range c.st.Brokers {
				addrs[i] = b.TLSAddr
			}
			st.TLSServiceURL = "pulsar+ssl://" + strings.Join(addrs, ",")
			st.TLSAdminURL = "https://" + c.st.Brokers[0].HTTPSAddr
			if ca, err := p.regionCA(); err == nil {
				st.CACertPEM = string(ca.CertPEM)
			}
		}
	}
	return st
}

func logTail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const n = 300
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		f.Seek(fi.Size()-n, io.SeekStart)
	}
	raw, _ := io.ReadAll(f)
	return strings.TrimSpace(string(raw))
}

// Status returns the cluster's status.
func (p *Provisioner) Status(ctx context.Context, name string) (provisioner.ClusterStatus, error) {
	p.mu.Lock()
	c, ok := p.clusters[name]
	p.mu.Unlock()
	if !ok {
		return provisioner.ClusterStatus{}, fmt.Errorf("%w: %s", provisioner.ErrNotFound, name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deleted {
		return provisioner.ClusterStatus{}, fmt.Errorf("%w: %s", provisioner.ErrNotFound, name)
	}
	return p.status(c), nil
}

// List returns the names of the clusters, sorted.
func (p *Provisioner) List(ctx context.Context) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.clusters))
	for n := range p.clusters {
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

// Delete stops the cluster's processes and removes its directory.
func (p *Provisioner) Delete(ctx context.Context, name string) error {
	p.mu.Lock()
	c, ok := p.clusters[name]
	p.mu.Unlock()
	if !ok {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deleted {
		return nil
	}
	// Brokers first, then bookies, then the metadata store.
	ms := c.members()
	slices.Reverse(ms)
	if err := p.stopMembers(ctx, c, ms); err != nil {
		return err
	}
	if err := os.RemoveAll(c.dir); err != nil {
		return fmt.Errorf("process: delete %s: %w", name, err)
	}
	c.deleted = true
	p.mu.Lock()
	delete(p.clusters, name)
	p.mu.Unlock()
	p.log.Info("process: cluster deleted", "cluster", name)
	return nil
}

// stopOrder is the order in which a cluster's processes are stopped:
// brokers first, which close their topics' ledgers on the bookies and
// record them in the metadata store; then the bookies, which end their
// sessions in the metadata store; the metadata store last.
var stopOrder = []string{"broker", "bookie", "metadata"}

// stopMembers stops the live processes among ms, one role after the other
// in stopOrder (each role's processes at once, and gone, or killed after
// StopGrace, before the next role's get SIGTERM), and clears their PIDs.
func (p *Provisioner) stopMembers(ctx context.Context, c *cluster, ms []*member) error {
	var errs []error
	for _, role := range stopOrder {
		var pids []int
		for _, m := range ms {
			if m.Role == role && m.PID != 0 && alive(m.PID, m.Args) {
				pids = append(pids, m.PID)
			}
		}
		errs = append(errs, p.stopPIDs(ctx, pids))
	}
	err := errors.Join(errs...)
	for _, m := range ms {
		m.PID = 0
		m.nextStart = time.Now().Add(maxBackoff) // not restarted by a concurrent pass
	}
	if c.deleted {
		return err
	}
	return errors.Join(err, p.save(c))
}

// stopPIDs stops the process groups of pids within StopGrace (StopGroups).
func (p *Provisioner) stopPIDs(ctx context.Context, pids []int) error {
	return StopGroups(ctx, pids, p.cfg.StopGrace, p.log)
}

// StopGroups sends SIGTERM to the process group of each of pids, waits up
// to grace (less if ctx ends), then SIGKILLs the groups still alive and
// waits for them to go. The processes need not be children of this one.
func StopGroups(ctx context.Context, pids []int, grace time.Duration, log *slog.Logger) error {
	if len(pids) == 0 {
		return nil
	}
	for _, pid := range pids {
		syscall.Kill(-pid, syscall.SIGTERM)
	}
	gone := func() bool {
		for _, pid := range pids {
			if stillThere(pid) {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(grace)
	for !gone() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			deadline = time.Now()
		case <-time.After(50 * time.Millisecond):
		}
	}
	for _, pid := range pids {
		if stillThere(pid) {
			log.Warn("process: SIGKILL after the grace period", "pid", pid)
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
	deadline = time.Now().Add(10 * time.Second)
	for !gone() {
		if time.Now().After(deadline) {
			return fmt.Errorf("process: processes %v did not exit after SIGKILL", pids)
		}
		time.Sleep(20 * time.Millisecond) // polling /proc: a process we may not own has no other exit signal
	}
	return nil
}

// stillThere reports whether pid exists and is not a zombie, reaping it if
// it is our exited child.
func stillThere(pid int) bool {
	var ws syscall.WaitStatus
	if wpid, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); wpid == pid {
		return false
	}
	return isZombieFree(pid)
}

// offloadArgs are a cluster's brokers' tiered-storage flags: the
// provisioner's bucket, under the cluster's own key prefix.
func (p *Provisioner) offloadArgs(c *cluster) []string {
	o := p.cfg.Offload
	if o.Bucket == "" {
		return nil
	}
	prefix := o.Prefix + clusterPrefix(c.st.Name)
	args := []string{"--s3-managed-ledger-offload-bucket", o.Bucket, "--managed-ledger-offload-prefix", prefix}
	if o.Driver != "" {
		args = append(args, "--managed-ledger-offload-driver", o.Driver)
	}
	if o.Region != "" {
		args = append(args, "--s3-managed-ledger-offload-region", o.Region)
	}
	if o.Endpoint != "" {
		args = append(args, "--s3-managed-ledger-offload-service-endpoint", o.Endpoint)
	}
	return args
}

// clusterPrefix is the key prefix of a cluster's offloaded ledgers,
// "<org>/<cluster>/" of "organizations/<org>/clusters/<cluster>".
func clusterPrefix(name string) string {
	parts := strings.Split(name, "/")
	if len(parts) != 4 {
		return name + "/"
	}
	return parts[1] + "/" + parts[3] + "/"
}
