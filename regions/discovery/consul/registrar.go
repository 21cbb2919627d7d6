package consul

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
)

// Registrar defaults.
const (
	DefaultInterval       = 2 * time.Second
	DefaultTTL            = 30 * time.Second
	DefaultMaxBackoff     = 30 * time.Second
	DefaultRequestTimeout = 10 * time.Second
)

// Check is one measured status and what explains it.
type Check struct {
	Status Status
	Output string
}

// HealthFunc measures a cluster's brokers: a Check per Broker.ID. It is
// called from the registrar's goroutine every Interval with a context that
// ends after Interval; a broker it leaves out is critical.
type HealthFunc func(ctx context.Context, c Cluster) map[string]Check

// RegistrarConfig configures a Registrar.
type RegistrarConfig struct {
	// Consul is how to reach the region's Consul agent.
	Consul Config
	// Region is the region's name (required).
	Region string
	// AgentAddress and AgentPort are what the region agent's own service
	// advertises (its failover endpoint, say); empty and 0: the node's
	// address and no port.
	AgentAddress string
	AgentPort    int
	// Health measures the clusters (required).
	Health HealthFunc
	// Interval is how often the registrar measures, renews the TTL checks
	// and repairs what Consul lost; default DefaultInterval.
	Interval time.Duration
	// TTL is the checks' TTL: how long after the last renewal an instance
	// turns critical; default DefaultTTL, at least twice Interval.
	TTL time.Duration
	// MaxBackoff caps the wait between failed passes; default
	// DefaultMaxBackoff.
	MaxBackoff time.Duration
	// RequestTimeout bounds each pass's Consul requests; default
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

func (c *RegistrarConfig) setDefaults() {
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.TTL <= 0 {
		c.TTL = max(DefaultTTL, 2*c.Interval)
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks a defaulted config.
func (c RegistrarConfig) Validate() error {
	if !idPart.MatchString(c.Region) {
		return fmt.Errorf("consul: region %q: want 1-128 letters, digits, '.', '_' or '-'", c.Region)
	}
	if c.Health == nil {
		return errors.New("consul: the registrar needs a HealthFunc")
	}
	if c.TTL < 2*c.Interval {
		return fmt.Errorf("consul: TTL %s is under twice the interval %s: checks would expire between renewals", c.TTL, c.Interval)
	}
	return c.Consul.Validate()
}

// RegistrarStatus is how the registrar's last passes went.
type RegistrarStatus struct {
	// LastSync is when Consul was last seen holding the whole desired
	// state with fresh checks (zero: never).
	LastSync time.Time
	// Stale is true while the last pass failed: Consul may hold an older
	// state or none.
	Stale bool
	// Err is the last pass's error (nil when it succeeded).
	Err error
	// Failures counts consecutive failed passes.
	Failures int
	// Registrations and Deregistrations count the service registrations
	// made (repairs included) and removed since start.
	Registrations, Deregistrations int
}

// Registrar keeps a region agent and its clusters registered in Consul.
type Registrar struct {
	cfg RegistrarConfig
	log *slog.Logger
	c   *client

	kick   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	start  sync.Once

	mu       sync.Mutex // guards the fields below
	clusters map[ClusterKey]Cluster
	deleted  map[ClusterKey]bool
	status   RegistrarStatus

	// Owned by the run goroutine.
	force     map[string]bool // service IDs whose check went missing
	dcChecked bool
}

// NewRegistrar returns a registrar; Start starts it.
func NewRegistrar(cfg RegistrarConfig) (*Registrar, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c, err := cfg.Consul.newClient()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Registrar{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "consul-registrar", "region", cfg.Region),
		c:        c,
		kick:     make(chan struct{}, 1),
		ctx:      ctx,
		cancel:   cancel,
		done:     make(chan struct{}),
		clusters: map[ClusterKey]Cluster{},
		deleted:  map[ClusterKey]bool{},
		force:    map[string]bool{},
		status:   RegistrarStatus{Stale: true},
	}, nil
}

// Start launches the registrar's goroutine; it registers at once.
func (r *Registrar) Start() {
	r.start.Do(func() { go r.run() })
}

// Shutdown stops the registrar and waits for it. It deregisters nothing:
// the checks expire after TTL unless a new registrar renews them.
func (r *Registrar) Shutdown(ctx context.Context) error {
	r.cancel()
	r.start.Do(func() { close(r.done) }) // never started
	defer r.c.close()
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SetCluster registers c (or updates its registration) on the next pass,
// which it starts now if c changed; setting an unchanged cluster again
// costs nothing. Brokers c no longer lists are deregistered.
func (r *Registrar) SetCluster(c Cluster) error {
	n, err := c.normalize()
	if err != nil {
		return err
	}
	r.mu.Lock()
	old, had := r.clusters[n.Key()]
	changed := !had || !sameCluster(old, n)
	r.clusters[n.Key()] = n
	delete(r.deleted, n.Key())
	r.mu.Unlock()
	if !changed {
		return nil
	}
	if !had && !DNSResolvable(n.Org, n.Name) {
		r.log.Warn("cluster name not resolvable through Consul DNS", "org", n.Org, "cluster", n.Name)
	}
	r.Refresh()
	return nil
}

// sameCluster reports whether two normalized clusters register the same.
func sameCluster(a, b Cluster) bool {
	return a.Org == b.Org && a.Name == b.Name && a.ServiceURL == b.ServiceURL &&
		a.TLSServiceURL == b.TLSServiceURL && slices.Equal(a.Brokers, b.Brokers)
}

// DeleteCluster deregisters the cluster's instances on the next pass, and
// on later ones until Consul confirms. Only a deleted cluster is ever
// deregistered wholesale.
func (r *Registrar) DeleteCluster(org, name string) {
	k := ClusterKey{org, name}
	r.mu.Lock()
	delete(r.clusters, k)
	r.deleted[k] = true
	r.mu.Unlock()
	r.Refresh()
}

// Refresh starts a pass now: measure, register, renew.
func (r *Registrar) Refresh() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Status returns how the last passes went.
func (r *Registrar) Status() RegistrarStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

func (r *Registrar) run() {
	defer close(r.done)
	timer := time.NewTimer(0)
	defer timer.Stop()
	failures := 0
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-timer.C:
		case <-r.kick:
		}
		regs, deregs, err := r.pass(r.ctx)
		if r.ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		r.status.Registrations += regs
		r.status.Deregistrations += deregs
		r.status.Err = err
		if err == nil {
			r.status.LastSync = time.Now()
			r.status.Stale = false
			r.status.Failures = 0
		} else {
			r.status.Stale = true
			r.status.Failures++
		}
		r.mu.Unlock()
		if err == nil {
			if failures > 0 {
				r.log.Info("consul registrations in sync again", "failed_passes", failures)
			}
			failures = 0
			timer.Reset(r.cfg.Interval)
			continue
		}
		failures++
		wait := backoff(failures, min(r.cfg.Interval, time.Second), r.cfg.MaxBackoff)
		r.log.Warn("consul registration pass failed; keeping the last state", "error", err, "failures", failures, "retry_in", wait)
		timer.Reset(wait)
	}
}

// backoff is the wait after n consecutive failures: base doubling up to
// limit, with up to 20% taken off at random so agents do not retry in step.
func backoff(n int, base, limit time.Duration) time.Duration {
	d := base
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}

// pass measures every cluster, makes the agent's services match, and
// renews every check. It returns how many services it registered and
// deregistered.
func (r *Registrar) pass(ctx context.Context) (regs, deregs int, err error) {
	r.mu.Lock()
	clusters := slices.Collect(maps.Values(r.clusters))
	deleted := maps.Clone(r.deleted)
	r.mu.Unlock()
	slices.SortFunc(clusters, func(a, b Cluster) int {
		return compareKeys(a.Key(), b.Key())
	})

	// Measure before talking to Consul: the measurement does not depend on
	// it, and a Consul that comes back gets fresh statuses at once.
	ttl := r.cfg.TTL.String()
	type renewal struct {
		id    string
		check Check
	}
	renewals := []renewal{{agentServiceID(r.cfg.Region), Check{StatusPassing, "region agent running, " + strconv.Itoa(len(clusters)) + " clusters"}}}
	desired := []*api.AgentServiceRegistration{agentRegistration(r.cfg.Region, r.cfg.AgentAddress, r.cfg.AgentPort, ttl)}
	owned := make(map[ClusterKey]bool, len(clusters))
	for _, c := range clusters {
		owned[c.Key()] = true
		measured := r.measure(ctx, c)
		for _, reg := range brokerRegistrations(r.cfg.Region, c, ttl) {
			chk := measured[reg.Meta[MetaBroker]]
			reg.Check.Status = string(chk.Status)
			desired = append(desired, reg)
			renewals = append(renewals, renewal{reg.ID, chk})
		}
	}

	rctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	q := (&api.QueryOptions{}).WithContext(rctx)
	agent := r.c.api.Agent()

	if !r.dcChecked && r.cfg.Consul.Datacenter != "" {
		if err := r.checkDatacenter(); err != nil {
			return 0, 0, err
		}
		r.dcChecked = true
	}

	current, err := agent.ServicesWithFilterOpts(`Meta.`+MetaRegion+` == "`+r.cfg.Region+`"`, q)
	if err != nil {
		return 0, 0, r.c.wrap(err, "list the agent's services", `service:read on "`+AgentService+`" and on each organization's service`)
	}
	p := makePlan(desired, current, owned, deleted, r.force)

	for _, id := range p.deregister {
		if err := agent.ServiceDeregisterOpts(id, q); err != nil {
			return regs, deregs, r.c.wrap(err, "deregister "+id, `service:write on "`+current[id].Service+`"`)
		}
		deregs++
		r.log.Info("deregistered from consul", "service_id", id)
	}
	// Every instance of the deleted clusters is gone now.
	r.mu.Lock()
	for k := range deleted {
		if r.deleted[k] {
			delete(r.deleted, k)
		}
	}
	r.mu.Unlock()

	for _, reg := range p.register {
		opts := api.ServiceRegisterOpts{ReplaceExistingChecks: true}.WithContext(rctx)
		if err := agent.ServiceRegisterOpts(reg, opts); err != nil {
			return regs, deregs, r.c.wrap(err, "register "+reg.ID, `service:write on "`+reg.Name+`"`)
		}
		delete(r.force, reg.ID)
		regs++
		r.log.Info("registered in consul", "service", reg.Name, "service_id", reg.ID)
	}

	var first error
	for _, rn := range renewals {
		cid := checkID(rn.id)
		if err := agent.UpdateTTLOpts(cid, rn.check.Output, string(rn.check.Status), q); err != nil {
			if checkGone(err) {
				r.force[rn.id] = true
			}
			if first == nil {
				first = r.c.wrap(err, "update check "+cid, `service:write on the check's service`)
			}
		}
	}
	return regs, deregs, first
}

// checkDatacenter checks that the agent is in the configured datacenter.
// Reading the agent's configuration needs agent:read, which a registrar
// does not otherwise need: without it the check is skipped with a warning.
func (r *Registrar) checkDatacenter() error {
	self, err := r.c.api.Agent().Self()
	if err != nil {
		err = r.c.wrap(err, "read the agent's configuration", `agent:read on the agent's node`)
		if errors.Is(err, ErrACL) {
			r.log.Warn("cannot check the consul agent's datacenter", "error", err)
			return nil
		}
		return err
	}
	dc, _ := self["Config"]["Datacenter"].(string)
	if dc != r.cfg.Consul.Datacenter {
		return fmt.Errorf("consul: the agent at %s is in datacenter %q, not %q (--consul-datacenter)", r.cfg.Consul.Address, dc, r.cfg.Consul.Datacenter)
	}
	return nil
}

// measure runs the health function on c, bounded by Interval; brokers it
// leaves out, or reports with an unknown status, are critical.
func (r *Registrar) measure(ctx context.Context, c Cluster) map[string]Check {
	hctx, cancel := context.WithTimeout(ctx, r.cfg.Interval)
	defer cancel()
	got := r.cfg.Health(hctx, c)
	out := make(map[string]Check, len(c.Brokers))
	for _, b := range c.Brokers {
		chk, ok := got[b.ID]
		switch {
		case !ok:
			chk = Check{StatusCritical, "not measured by the region agent"}
		case chk.Status != StatusPassing && chk.Status != StatusWarning && chk.Status != StatusCritical:
			chk = Check{StatusCritical, fmt.Sprintf("unknown status %q: %s", chk.Status, chk.Output)}
		}
		out[b.ID] = chk
	}
	return out
}

func compareKeys(a, b ClusterKey) int {
	return cmp.Or(strings.Compare(a.Org, b.Org), strings.Compare(a.Name, b.Name))
}
