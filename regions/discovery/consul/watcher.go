package consul

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
)

// Watcher defaults.
const (
	DefaultWaitTime           = time.Minute
	DefaultDatacenterInterval = 30 * time.Second
)

// WatcherConfig configures a Watcher.
type WatcherConfig struct {
	// Consul is how to reach a Consul agent of the federation; its
	// Datacenter is ignored.
	Consul Config
	// WaitTime is the longest a blocking query waits for a change; default
	// DefaultWaitTime (Consul caps it at 10 minutes).
	WaitTime time.Duration
	// DatacenterInterval is how often the list of datacenters is read
	// again; default DefaultDatacenterInterval.
	DatacenterInterval time.Duration
	// MaxBackoff caps the wait between failed queries; default
	// DefaultMaxBackoff.
	MaxBackoff time.Duration
	// RequestTimeout bounds requests that do not block; default
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// OnChange, when set, is called when a cluster appears, changes status
	// or is deregistered (see ClusterEvent). Calls come one at a time from
	// the watcher's goroutines and must return quickly.
	OnChange func(ClusterEvent)
	// Logger; default slog.Default().
	Logger *slog.Logger
}

func (c *WatcherConfig) setDefaults() {
	if c.WaitTime <= 0 {
		c.WaitTime = DefaultWaitTime
	}
	if c.DatacenterInterval <= 0 {
		c.DatacenterInterval = DefaultDatacenterInterval
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

// ClusterEvent is a change of a cluster's health in Consul's catalog. No
// event is sent for a datacenter the watcher cannot read: its clusters
// keep their last status (see View.Stale).
type ClusterEvent struct {
	Cluster    ClusterKey
	Region     string
	Datacenter string
	// From is the previous status ("" when the cluster was not known) and
	// To the new one ("" when Removed).
	From, To Status
	// Removed: no instance of the cluster is registered any more (deleted,
	// or lost by a Consul that was wiped and not yet repaired by the
	// registrar); not a health verdict.
	Removed bool
	At      time.Time
}

// View is the watcher's picture of every datacenter.
type View struct {
	Datacenters []DatacenterView
	Regions     []RegionView
	Clusters    []ClusterView
	// Stale is true when the datacenter list or some datacenter could not
	// be read on the last attempt: their part of the view is older.
	Stale bool
	// LastRefresh is the oldest of the datacenters' last successful reads:
	// every part of the view is at least this recent (zero until every
	// datacenter has been read once).
	LastRefresh time.Time
	// Err is why the datacenter list could not be read ("" when it was).
	Err string
}

// DatacenterView is the state of one datacenter's watch.
type DatacenterView struct {
	Name        string
	Stale       bool
	LastRefresh time.Time
	// Err is the last error, or a warning such as answers filtered by ACLs.
	Err string
}

// RegionView is a region agent found in the catalog.
type RegionView struct {
	Region, Datacenter, Node, Address string
	Port                              int
	Status                            Status
	Output                            string
}

// ClusterView is a cluster's instances in one datacenter.
type ClusterView struct {
	Org, Name, Region, Datacenter string
	// Status: passing when every broker passes, critical when every
	// broker is critical, warning otherwise.
	Status                    Status
	ServiceURL, TLSServiceURL string
	Brokers                   []BrokerView
}

// BrokerView is one broker instance.
type BrokerView struct {
	ID, ServiceID, Node string
	Address             string
	Port                int
	// Status is the worst of the instance's checks, its node's included;
	// Output is its TTL check's output (what the region agent measured).
	Status                                         Status
	Output                                         string
	PulsarURL, PulsarTLSURL, AdminURL, AdminTLSURL string
}

// Cluster returns the view of a cluster (the first datacenter's if it is
// registered in several).
func (v View) Cluster(org, name string) (ClusterView, bool) {
	for _, c := range v.Clusters {
		if c.Org == org && c.Name == name {
			return c, true
		}
	}
	return ClusterView{}, false
}

// Region returns the view of a region agent.
func (v View) Region(name string) (RegionView, bool) {
	for _, r := range v.Regions {
		if r.Region == name {
			return r, true
		}
	}
	return RegionView{}, false
}

// Datacenter returns the state of a datacenter's watch.
func (v View) Datacenter(name string) (DatacenterView, bool) {
	for _, d := range v.Datacenters {
		if d.Name == name {
			return d, true
		}
	}
	return DatacenterView{}, false
}

// Watcher follows the Magnetar services of every datacenter of a
// WAN-federated Consul with blocking queries.
//
// Lock order: eventMu before mu.
type Watcher struct {
	cfg WatcherConfig
	log *slog.Logger
	c   *client

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	start  sync.Once

	eventMu sync.Mutex // serializes publishing and OnChange calls

	mu       sync.Mutex // guards the fields below
	dcs      map[string]*dcState
	listErr  string
	listedAt time.Time
}

// dcState is the last read of one datacenter.
type dcState struct {
	view     DatacenterView
	clusters map[ClusterKey]ClusterView
	regions  []RegionView
	cancel   context.CancelFunc // stops its watch; nil when not watched
}

// NewWatcher returns a watcher; Start starts it.
func NewWatcher(cfg WatcherConfig) (*Watcher, error) {
	cfg.setDefaults()
	c, err := cfg.Consul.newClient()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Watcher{
		cfg:    cfg,
		log:    cfg.Logger.With("component", "consul-watcher"),
		c:      c,
		ctx:    ctx,
		cancel: cancel,
		dcs:    map[string]*dcState{},
	}, nil
}

// Start launches the watcher's goroutines.
func (w *Watcher) Start() {
	w.start.Do(func() {
		w.wg.Add(1)
		go w.run()
	})
}

// Shutdown stops the watcher and waits for its goroutines.
func (w *Watcher) Shutdown(ctx context.Context) error {
	w.cancel()
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	defer w.c.close()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// View returns a copy of the current view.
func (w *Watcher) View() View {
	w.mu.Lock()
	defer w.mu.Unlock()
	v := View{Err: w.listErr, Stale: w.listErr != "" || w.listedAt.IsZero(), LastRefresh: w.listedAt}
	for _, name := range slices.Sorted(maps.Keys(w.dcs)) {
		st := w.dcs[name]
		v.Datacenters = append(v.Datacenters, st.view)
		v.Stale = v.Stale || st.view.Stale
		if st.view.LastRefresh.IsZero() || st.view.LastRefresh.Before(v.LastRefresh) {
			v.LastRefresh = st.view.LastRefresh
		}
		v.Regions = append(v.Regions, st.regions...)
		for _, c := range st.clusters {
			c.Brokers = slices.Clone(c.Brokers)
			v.Clusters = append(v.Clusters, c)
		}
	}
	slices.SortFunc(v.Clusters, func(a, b ClusterView) int {
		return cmp.Or(strings.Compare(a.Org, b.Org), strings.Compare(a.Name, b.Name), strings.Compare(a.Datacenter, b.Datacenter))
	})
	return v
}

// run lists the datacenters and keeps one watch per datacenter.
func (w *Watcher) run() {
	defer w.wg.Done()
	failures := 0
	for {
		wait := w.cfg.DatacenterInterval
		if err := w.listDatacenters(); err != nil {
			failures++
			wait = min(wait, backoff(failures, time.Second, w.cfg.MaxBackoff))
			w.log.Warn("cannot list consul datacenters; keeping the last view", "error", err, "retry_in", wait)
		} else {
			failures = 0
		}
		select {
		case <-w.ctx.Done():
			w.mu.Lock()
			for _, st := range w.dcs {
				if st.cancel != nil {
					st.cancel()
				}
			}
			w.mu.Unlock()
			return
		case <-time.After(wait):
		}
	}
}

// listDatacenters reads the federation's datacenters and starts a watch
// for each new one. A datacenter no longer listed keeps its last view,
// marked stale: leaving the federation is not a verdict on its clusters.
func (w *Watcher) listDatacenters() error {
	ctx, cancel := context.WithTimeout(w.ctx, w.cfg.RequestTimeout)
	defer cancel()
	var dcs []string
	_, err := w.c.api.Raw().Query("/v1/catalog/datacenters", &dcs, (&api.QueryOptions{}).WithContext(ctx))
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		err = w.c.wrap(err, "list datacenters", "none (any token Consul knows)")
		w.listErr = err.Error()
		return err
	}
	w.listErr, w.listedAt = "", time.Now()
	listed := map[string]bool{}
	for _, dc := range dcs {
		listed[dc] = true
		st := w.dcs[dc]
		if st == nil {
			st = &dcState{view: DatacenterView{Name: dc, Stale: true}}
			w.dcs[dc] = st
		}
		if st.cancel == nil {
			ctx, cancel := context.WithCancel(w.ctx)
			st.cancel = cancel
			w.wg.Add(1)
			go w.watch(ctx, dc)
		}
	}
	for dc, st := range w.dcs {
		if !listed[dc] && st.cancel != nil {
			st.cancel()
			st.cancel = nil
			st.view.Stale = true
			st.view.Err = "no longer listed by /v1/catalog/datacenters"
		}
	}
	return nil
}

// stateFilter selects the checks of Magnetar's instances and the nodes'
// own health: when a node fails, Consul turns its serfHealth check
// critical while the TTL checks of its services keep their last status
// (their agent is gone), so a node's health must wake the watch too.
var stateFilter = fmt.Sprintf("%q in ServiceTags or %q in ServiceTags or CheckID == %q", TagBroker, TagAgent, "serfHealth")

// serviceFilter selects Magnetar's instances of a service.
var serviceFilter = fmt.Sprintf("%q in Service.Tags or %q in Service.Tags", TagBroker, TagAgent)

// watch follows one datacenter: a blocking query on the health of
// Magnetar's checks, then, when it returns, a read of their services.
func (w *Watcher) watch(ctx context.Context, dc string) {
	defer w.wg.Done()
	var index uint64
	failures := 0
	for ctx.Err() == nil {
		next, err := w.refresh(ctx, dc, index)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			failures++
			wait := backoff(failures, 250*time.Millisecond, w.cfg.MaxBackoff)
			w.markStale(dc, err)
			w.log.Warn("cannot read consul datacenter; keeping its last view", "datacenter", dc, "error", err, "retry_in", wait)
			// A restarted Consul numbers its changes from scratch.
			index = 0
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			continue
		}
		if failures > 0 {
			w.log.Info("consul datacenter readable again", "datacenter", dc, "failed_reads", failures)
		}
		failures = 0
		// Consul's rules for blocking queries: an index that went back
		// starts over, and an index is never 0.
		switch {
		case next < index:
			index = 0
		default:
			index = max(next, 1)
		}
	}
}

// refresh runs one blocking query on dc after index and, if it returns,
// reads the services and publishes them. It returns the new index.
func (w *Watcher) refresh(ctx context.Context, dc string, index uint64) (uint64, error) {
	qctx, cancel := context.WithTimeout(ctx, w.cfg.WaitTime+w.cfg.WaitTime/16+w.cfg.RequestTimeout)
	defer cancel()
	q := &api.QueryOptions{Datacenter: dc, WaitIndex: index, WaitTime: w.cfg.WaitTime, Filter: stateFilter}
	checks, meta, err := w.c.api.Health().State(api.HealthAny, q.WithContext(qctx))
	if err != nil {
		return 0, w.c.wrap(err, "watch the health of datacenter "+dc, "service:read and node:read in "+dc)
	}
	if index != 0 && meta.LastIndex == index {
		w.touch(dc) // the wait ended without a change
		return index, nil
	}
	warn := ""
	if meta.ResultsFilteredByACLs {
		warn = "answers filtered by ACLs: the token lacks service:read or node:read on some of Magnetar's services"
	}
	names := map[string]bool{}
	for _, c := range checks {
		if c.ServiceName != "" {
			names[c.ServiceName] = true
		}
	}
	rctx, rcancel := context.WithTimeout(ctx, w.cfg.RequestTimeout)
	defer rcancel()
	var entries []*api.ServiceEntry
	for _, name := range slices.Sorted(maps.Keys(names)) {
		sq := &api.QueryOptions{Datacenter: dc, Filter: serviceFilter}
		es, smeta, err := w.c.api.Health().Service(name, "", false, sq.WithContext(rctx))
		if err != nil {
			return 0, w.c.wrap(err, "read service "+name+" in datacenter "+dc, `service:read on "`+name+`" and node:read in `+dc)
		}
		if smeta.ResultsFilteredByACLs {
			warn = "answers filtered by ACLs: the token lacks service:read or node:read on some of Magnetar's services"
		}
		entries = append(entries, es...)
	}
	clusters, regions := buildView(dc, entries)
	w.publish(dc, clusters, regions, warn)
	return meta.LastIndex, nil
}

// buildView groups a datacenter's instances into clusters and regions.
func buildView(dc string, entries []*api.ServiceEntry) (map[ClusterKey]ClusterView, []RegionView) {
	clusters := map[ClusterKey]ClusterView{}
	var regions []RegionView
	for _, e := range entries {
		s := e.Service
		if s == nil || e.Node == nil {
			continue
		}
		addr := cmp.Or(s.Address, e.Node.Address)
		status := Status(e.Checks.AggregatedStatus())
		output := ""
		for _, c := range e.Checks {
			if c.CheckID == checkID(s.ID) {
				output = c.Output
			}
		}
		switch {
		case s.Service == AgentService && slices.Contains(s.Tags, TagAgent):
			regions = append(regions, RegionView{
				Region: cmp.Or(s.Meta[MetaRegion], tagValue(s.Tags, tagRegion)), Datacenter: dc,
				Node: e.Node.Node, Address: addr, Port: s.Port, Status: status, Output: output,
			})
		case slices.Contains(s.Tags, TagBroker):
			k := ClusterKey{cmp.Or(s.Meta[MetaOrg], tagValue(s.Tags, tagOrg)), cmp.Or(s.Meta[MetaCluster], tagValue(s.Tags, tagCluster))}
			if k.Org == "" || k.Name == "" {
				continue
			}
			cv := clusters[k]
			cv.Org, cv.Name, cv.Datacenter = k.Org, k.Name, dc
			cv.Region = cmp.Or(cv.Region, s.Meta[MetaRegion], tagValue(s.Tags, tagRegion))
			cv.ServiceURL = cmp.Or(cv.ServiceURL, s.Meta[MetaServiceURL])
			cv.TLSServiceURL = cmp.Or(cv.TLSServiceURL, s.Meta[MetaServiceTLSURL])
			cv.Brokers = append(cv.Brokers, BrokerView{
				ID: s.Meta[MetaBroker], ServiceID: s.ID, Node: e.Node.Node, Address: addr, Port: s.Port,
				Status: status, Output: output,
				PulsarURL: s.Meta[MetaPulsarURL], PulsarTLSURL: s.Meta[MetaPulsarTLSURL],
				AdminURL: s.Meta[MetaAdminURL], AdminTLSURL: s.Meta[MetaAdminTLSURL],
			})
			clusters[k] = cv
		}
	}
	for k, cv := range clusters {
		slices.SortFunc(cv.Brokers, func(a, b BrokerView) int { return strings.Compare(a.ServiceID, b.ServiceID) })
		cv.Status = clusterStatus(cv.Brokers)
		clusters[k] = cv
	}
	slices.SortFunc(regions, func(a, b RegionView) int {
		return cmp.Or(strings.Compare(a.Region, b.Region), strings.Compare(a.Node, b.Node))
	})
	return clusters, regions
}

// clusterStatus rates a cluster from its brokers: passing when all pass,
// critical when all are critical (or in maintenance), warning otherwise.
func clusterStatus(brokers []BrokerView) Status {
	passing, critical := 0, 0
	for _, b := range brokers {
		switch b.Status {
		case StatusPassing:
			passing++
		case StatusWarning:
		default:
			critical++
		}
	}
	switch {
	case critical == len(brokers):
		return StatusCritical
	case passing == len(brokers):
		return StatusPassing
	default:
		return StatusWarning
	}
}

// clusterEvents compares two reads of a datacenter.
func clusterEvents(dc string, before, after map[ClusterKey]ClusterView, at time.Time) []ClusterEvent {
	var out []ClusterEvent
	for _, k := range slices.SortedFunc(maps.Keys(after), compareKeys) {
		a := after[k]
		b, had := before[k]
		if had && b.Status == a.Status {
			continue
		}
		out = append(out, ClusterEvent{Cluster: k, Region: a.Region, Datacenter: dc, From: b.Status, To: a.Status, At: at})
	}
	for _, k := range slices.SortedFunc(maps.Keys(before), compareKeys) {
		if _, ok := after[k]; !ok {
			b := before[k]
			out = append(out, ClusterEvent{Cluster: k, Region: b.Region, Datacenter: dc, From: b.Status, Removed: true, At: at})
		}
	}
	return out
}

// publish stores a datacenter's new read and sends the events it makes.
func (w *Watcher) publish(dc string, clusters map[ClusterKey]ClusterView, regions []RegionView, warn string) {
	w.eventMu.Lock()
	defer w.eventMu.Unlock()
	now := time.Now()
	w.mu.Lock()
	st := w.dcs[dc]
	if st == nil {
		w.mu.Unlock()
		return
	}
	events := clusterEvents(dc, st.clusters, clusters, now)
	st.clusters, st.regions = clusters, regions
	st.view = DatacenterView{Name: dc, LastRefresh: now, Err: warn}
	w.mu.Unlock()
	for _, e := range events {
		w.log.Info("consul cluster health changed", "datacenter", dc, "cluster", e.Cluster.String(),
			"from", string(e.From), "to", string(e.To), "removed", e.Removed)
		if w.cfg.OnChange != nil {
			w.cfg.OnChange(e)
		}
	}
}

// markStale records a failed read of dc; its last view stays.
func (w *Watcher) markStale(dc string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if st := w.dcs[dc]; st != nil {
		st.view.Stale = true
		st.view.Err = err.Error()
		if errors.Is(err, ErrACL) {
			w.log.Error("consul refused the watcher's token", "datacenter", dc, "error", err)
		}
	}
}

// touch records a read of dc that found no change.
func (w *Watcher) touch(dc string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if st := w.dcs[dc]; st != nil {
		if st.view.Stale {
			st.view.Err = ""
		}
		st.view.Stale = false
		st.view.LastRefresh = time.Now()
	}
}
