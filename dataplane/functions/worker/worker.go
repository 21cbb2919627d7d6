package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
	"github.com/magnetar-dev/magnetar/dataplane/functions/fnconfig"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// Config configures a function worker.
type Config struct {
	// Metadata is the cluster's metadata store. Required.
	Metadata metadata.Store
	// Packages stores uploaded packages. Required.
	Packages PackageStore
	// Broker is the broker this worker runs in, or, for a worker of a
	// separate pool, a broker.Service that is never started and serves
	// only its metadata-backed parts: tenants and namespaces,
	// authentication and authorization, the internal credential of calls
	// between workers, and the usage counters the worker meters into.
	// Required.
	Broker *broker.Service
	// Subscriptions deletes a deleted function's or sink's subscriptions.
	// Default: Broker (which must then own, or be able to load, the
	// topics: the broker a worker runs in).
	Subscriptions SubscriptionDeleter
	// ID names the worker in assignments. Default: the broker's id.
	ID string
	// URL is this worker's admin URL, where other workers forward status
	// calls. Default: the broker's web service URL.
	URL string
	// ServiceURL is the brokers' pulsar:// URL instances connect to.
	// Default: the broker's.
	ServiceURL string
	// DataDir holds the package cache, instance logs and extracted NARs.
	// Required.
	DataDir string
	// Runtimes are the instance runtimes.
	Runtimes Runtimes
	// ConnectorsDir holds the builtin connectors (*.nar). Optional.
	ConnectorsDir string
	// State is where function state lives (nil: functions have no state;
	// their state calls fail with a clear error).
	State *StateStore
	// InstanceToken authenticates instances to the brokers when the
	// cluster requires authentication; InstanceTokenFile names a file
	// holding it instead, which instances read at every authentication
	// (the region agent renews it).
	InstanceToken, InstanceTokenFile string
	// TLSTrustCerts is the CA file instances trust for pulsar+ssl://.
	TLSTrustCerts string
	// MaxPackageSize bounds an uploaded package. Default 256 MiB.
	MaxPackageSize int64
	// SessionTTL is how long a worker that stopped renewing its session
	// keeps its instances assigned. Default 10s.
	SessionTTL time.Duration
	// SessionGrace is how long a worker that lost its session keeps its
	// instances running while it gets a new one. Default 30s.
	SessionGrace time.Duration
	// MaxConcurrentStarts bounds the instances starting at once (from
	// their process start until they answer a health check, at most 30 s),
	// so a worker given many instances at once does not starve itself and
	// the broker it runs in. Default 4.
	MaxConcurrentStarts int
	// Root is the metadata prefix. Default "/functions".
	Root   string
	Logger *slog.Logger
}

// SubscriptionDeleter deletes a subscription of a topic of the cluster
// (broker.Service does for the topics it serves).
type SubscriptionDeleter interface {
	DeleteSubscription(ctx context.Context, t broker.TopicName, name string, force bool) error
}

func (c *Config) setDefaults() error {
	if c.Metadata == nil || c.Packages == nil || c.Broker == nil || c.DataDir == "" {
		return errors.New("worker: Metadata, Packages, Broker and DataDir are required")
	}
	if c.Subscriptions == nil {
		c.Subscriptions = c.Broker
	}
	if c.ID == "" {
		c.ID = c.Broker.BrokerID()
	}
	if c.URL == "" {
		c.URL = c.Broker.Config().WebServiceURL
	}
	if c.ServiceURL == "" {
		c.ServiceURL = c.Broker.ServiceURL()
	}
	if c.MaxPackageSize <= 0 {
		c.MaxPackageSize = 256 << 20
	}
	if c.SessionTTL <= 0 {
		c.SessionTTL = 10 * time.Second
	}
	if c.SessionGrace <= 0 {
		c.SessionGrace = 30 * time.Second
	}
	if c.MaxConcurrentStarts <= 0 {
		c.MaxConcurrentStarts = 4
	}
	if c.Root == "" {
		c.Root = "/functions"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Worker is a running function worker: it registers itself, campaigns to
// be the scheduler, and runs the instances assigned to it.
type Worker struct {
	cfg  Config
	md   metadata.Store
	recs records
	log  *slog.Logger
	env  *instanceEnv
	port ports
	// starting holds a token per instance that is starting
	// (MaxConcurrentStarts).
	starting chan struct{}
	// startSeconds is magnetar_functions_instance_start_seconds.
	startSeconds *prometheus.HistogramVec

	stop chan struct{}
	wg   sync.WaitGroup

	// poke wakes the loops after a change under Root (buffered, 1).
	pokeSched, pokeRun chan struct{}

	mu    sync.Mutex
	state *stateBackend // nil without Config.State

	running map[string]*running // instance key -> supervisor
	leader  bool
	// restartsGone keeps the restarts of supervisors that were stopped, so
	// the restart counter never goes down.
	restartsGone int64
	sess         metadata.Session // the live session (nil between sessions)
	lostAt       time.Time        // when the last session was lost (zero while one is live)
	assign       Assignment
	connector    map[string]Connector // builtin connectors by name, read at start
}

type running struct {
	sup     *supervisor
	version int64
	restart int64
}

// New returns a worker; Start runs it.
func New(cfg Config) (*Worker, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	for _, d := range []string{"packages", "logs", "nar"} {
		if err := os.MkdirAll(filepath.Join(cfg.DataDir, d), 0o755); err != nil {
			return nil, fmt.Errorf("worker: %w", err)
		}
	}
	var err error
	w := &Worker{
		cfg: cfg, md: cfg.Metadata, recs: records{md: cfg.Metadata, root: cfg.Root}, log: cfg.Logger,
		stop: make(chan struct{}), pokeSched: make(chan struct{}, 1), pokeRun: make(chan struct{}, 1),
		running: map[string]*running{}, starting: make(chan struct{}, cfg.MaxConcurrentStarts),
		startSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "magnetar_functions_instance_start_seconds",
			Help:    "Instance starts on this worker, from the process's exec to its first health answer, by runtime.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 1.5, 2, 2.5, 3, 4, 5, 7.5, 10, 15, 20, 30}}, []string{"runtime"}),
	}
	if cfg.State != nil {
		if w.state, err = startState(cfg.State); err != nil {
			return nil, err
		}
	}
	javaState := ""
	if w.state != nil {
		javaState = w.state.url()
	}
	w.env = &instanceEnv{
		ServiceURL: cfg.ServiceURL, WebServiceURL: cfg.URL, ClusterName: cfg.Broker.Config().ClusterName,
		JavaStateURL: javaState, Token: cfg.InstanceToken, TokenFile: cfg.InstanceTokenFile, TLSTrustCerts: cfg.TLSTrustCerts,
		HealthCheckInterval: 30, LogDir: filepath.Join(cfg.DataDir, "logs"), NarDir: filepath.Join(cfg.DataDir, "nar"),
	}
	conns, err := ScanConnectors(cfg.ConnectorsDir)
	if err != nil {
		cfg.Logger.Warn("functions: reading builtin connectors", "dir", cfg.ConnectorsDir, "err", err)
	}
	w.connector = conns
	return w, nil
}

// Packages returns the worker's package store.
func (w *Worker) Packages() PackageStore { return w.cfg.Packages }

// Start runs the worker's loops until Shutdown.
func (w *Worker) Start() {
	w.goRun(w.watchLoop)
	w.goRun(w.memberLoop)
	w.goRun(w.runLoop)
	w.goRun(w.meterLoop)
}

// meterInterval is how often running instances are metered.
const meterInterval = 10 * time.Second

// meterLoop counts the seconds each running instance ran into the
// broker's usage report (function_instance_seconds per namespace), every
// meterInterval and at shutdown: an instance counts while its process is
// up.
func (w *Worker) meterLoop() {
	last := time.Now()
	tick := time.NewTicker(meterInterval)
	defer tick.Stop()
	carry := map[[2]string]time.Duration{} // sub-second remainders per namespace
	meter := func() {
		now := time.Now()
		elapsed := now.Sub(last)
		last = now
		w.mu.Lock()
		for _, run := range w.running {
			st, _ := run.sup.snapshot()
			if !st.Running {
				continue
			}
			d := run.sup.launch.details
			k := [2]string{d.Tenant, d.Namespace}
			carry[k] += min(elapsed, now.Sub(st.StartedAt))
		}
		w.mu.Unlock()
		for k, d := range carry {
			if secs := int64(d / time.Second); secs > 0 {
				w.cfg.Broker.CountFunctionSeconds(k[0], k[1], secs)
				carry[k] = d - time.Duration(secs)*time.Second
			}
		}
	}
	for {
		select {
		case <-w.stop:
			meter()
			return
		case <-tick.C:
			meter()
		}
	}
}

func (w *Worker) goRun(fn func()) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		fn()
	}()
}

// Shutdown stops every instance of this worker and its loops.
func (w *Worker) Shutdown(ctx context.Context) error {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	done := make(chan struct{})
	go func() {
		w.wg.Wait()
		w.stopAll()
		if w.state != nil {
			w.state.close()
		}
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("worker: shutdown: %w", ctx.Err())
	}
}

func (w *Worker) stopping() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// loopContext is a context that ends at Shutdown.
func (w *Worker) loopContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-w.stop:
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx, cancel
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// watchLoop wakes the scheduler and the run loop on every change of the
// records, the workers and the assignment, and every 30 s in any case (a
// missed watch heals). State and packages, also under Root, are not
// watched: a counter a function increments per message must not wake
// the scheduler.
func (w *Worker) watchLoop() {
	ctx, cancel := w.loopContext()
	defer cancel()
	prefixes := []string{w.cfg.Root + "/records", w.cfg.Root + "/workers", w.cfg.Root + "/assignment"}
	for ctx.Err() == nil {
		poke(w.pokeSched)
		poke(w.pokeRun)
		wctx, stopWatches := context.WithCancel(ctx)
		changed := make(chan struct{}, 1)
		ended := make(chan struct{}, len(prefixes))
		var wg sync.WaitGroup
		for _, p := range prefixes {
			wa, err := w.md.Watch(wctx, p, 0)
			if err != nil {
				w.log.Warn("functions: watch failed", "prefix", p, "err", err)
				ended <- struct{}{}
				break
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer wa.Close()
				for range wa.Events() {
					poke(changed)
				}
				ended <- struct{}{}
			}()
		}
		tick := time.NewTicker(30 * time.Second)
	events:
		for {
			select {
			case <-ctx.Done():
				break events
			case <-ended:
				// A watch ended (or could not start): start them all over.
				sleepCtx(ctx, time.Second)
				break events
			case <-tick.C:
			case <-changed:
			}
			poke(w.pokeSched)
			poke(w.pokeRun)
		}
		tick.Stop()
		stopWatches()
		wg.Wait()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// memberLoop keeps this worker registered under a session and campaigns
// for the scheduler's leadership; when the session is lost, the worker's
// instances stop (the scheduler moves them elsewhere) until it has a new
// one.
func (w *Worker) memberLoop() {
	ctx, cancel := w.loopContext()
	defer cancel()
	host, portStr := "", ""
	if u, err := url.Parse(w.cfg.URL); err == nil {
		host, portStr, _ = net.SplitHostPort(u.Host)
	}
	port, _ := strconv.Atoi(portStr)
	info, _ := json.Marshal(WorkerInfo{ID: w.cfg.ID, URL: w.cfg.URL, Host: host, Port: port})
	for ctx.Err() == nil {
		sess, err := w.md.NewSession(ctx, w.cfg.SessionTTL)
		if err != nil {
			w.log.Warn("functions: worker session", "err", err)
			sleepCtx(ctx, time.Second)
			continue
		}
		key := w.cfg.Root + "/workers/" + url.PathEscape(w.cfg.ID)
		if _, err := sess.CreateEphemeral(ctx, key, info); err != nil {
			// The previous session's key may linger until its lease ends.
			w.log.Warn("functions: worker registration", "err", err)
			sess.Close()
			sleepCtx(ctx, time.Second)
			continue
		}
		w.log.Info("functions worker registered", "worker", w.cfg.ID)
		w.mu.Lock()
		w.sess, w.lostAt = sess, time.Time{}
		w.mu.Unlock()
		poke(w.pokeRun)
		w.campaign(ctx, sess)
		sess.Close()
		w.mu.Lock()
		w.leader, w.sess = false, nil
		w.mu.Unlock()
		if ctx.Err() == nil {
			// The instances keep running while the worker gets a new
			// session (a loaded machine can miss a lease renewal): the
			// scheduler may move them meanwhile, and the next reconcile
			// stops what moved. Without a session for SessionGrace, they
			// stop (another worker runs them by then).
			w.log.Warn("functions: worker session lost; instances stop unless it is renewed in time", "worker", w.cfg.ID, "grace", w.cfg.SessionGrace)
			w.mu.Lock()
			w.lostAt = time.Now()
			w.mu.Unlock()
			time.AfterFunc(w.cfg.SessionGrace, func() { poke(w.pokeRun) })
		}
	}
}

// campaign runs the scheduler while this worker leads, until the session
// ends.
func (w *Worker) campaign(ctx context.Context, sess metadata.Session) {
	for ctx.Err() == nil {
		select {
		case <-sess.Done():
			return
		default:
		}
		lead, err := sess.Elect(ctx, w.cfg.Root+"/leader", []byte(w.cfg.ID))
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("functions: scheduler election", "err", err)
			}
			return
		}
		w.mu.Lock()
		w.leader = true
		w.mu.Unlock()
		w.log.Info("functions scheduler elected", "worker", w.cfg.ID)
		w.schedule(ctx, lead)
		w.mu.Lock()
		w.leader = false
		w.mu.Unlock()
	}
}

// schedule recomputes the assignment after every change while leading.
func (w *Worker) schedule(ctx context.Context, lead metadata.Leadership) {
	for {
		select {
		case <-ctx.Done():
			lead.Resign(context.WithoutCancel(ctx))
			return
		case <-lead.Lost():
			return
		case <-w.pokeSched:
		}
		if err := w.scheduleOnce(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("functions: scheduling failed", "err", err)
			sleepCtx(ctx, time.Second)
			poke(w.pokeSched)
		}
	}
}

func (w *Worker) scheduleOnce(ctx context.Context) error {
	recs, err := w.recs.all(ctx)
	if err != nil {
		return err
	}
	workerKeys, err := w.md.Children(ctx, w.cfg.Root+"/workers")
	if err != nil {
		return err
	}
	workers := make([]string, 0, len(workerKeys))
	for _, k := range workerKeys {
		if id, err := url.PathUnescape(k); err == nil {
			workers = append(workers, id)
		}
	}
	var instances []string
	for _, r := range recs {
		for i := range r.Parallelism() {
			instances = append(instances, InstanceKey(r.Kind, r.Tenant, r.Namespace, r.Name, i))
		}
	}
	prev, version, err := w.readAssignment(ctx)
	if err != nil {
		return err
	}
	next := Assignment{Instances: Schedule(prev.Instances, instances, workers)}
	if version != metadata.NotExists && mapsEqual(prev.Instances, next.Instances) {
		return nil
	}
	b, _ := json.Marshal(next)
	if _, err := w.md.Put(ctx, w.cfg.Root+"/assignment", b, version); err != nil {
		return err
	}
	w.log.Info("functions assignment written", "instances", len(instances), "workers", len(workers))
	return nil
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// runLoop makes the set of running instances match the assignment.
func (w *Worker) runLoop() {
	ctx, cancel := w.loopContext()
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.pokeRun:
		}
		if err := w.reconcile(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("functions: reconcile failed", "err", err)
			sleepCtx(ctx, time.Second)
			poke(w.pokeRun)
		}
	}
}

// readAssignment reads the scheduler's assignment and its version
// (NotExists, and an empty assignment, before the first one is written).
func (w *Worker) readAssignment(ctx context.Context) (Assignment, metadata.Version, error) {
	var a Assignment
	kv, err := w.md.Get(ctx, w.cfg.Root+"/assignment")
	if errors.Is(err, metadata.ErrNotFound) {
		return a, metadata.NotExists, nil
	}
	if err != nil {
		return a, 0, err
	}
	if err := json.Unmarshal(kv.Value, &a); err != nil {
		return a, 0, fmt.Errorf("worker: assignment: %w", err)
	}
	return a, kv.Version, nil
}

func (w *Worker) reconcile(ctx context.Context) error {
	a, _, err := w.readAssignment(ctx)
	if err != nil {
		return err
	}
	w.mu.Lock()
	live, lostAt := w.sess != nil, w.lostAt
	w.mu.Unlock()
	if !live {
		if !lostAt.IsZero() && time.Since(lostAt) >= w.cfg.SessionGrace {
			w.log.Warn("functions: no worker session within the grace; stopping its instances", "worker", w.cfg.ID)
			w.stopAll()
		}
		return nil // instances stay as they are until a session is back or the grace ends
	}
	registered := false
	if _, err := w.md.Get(ctx, w.cfg.Root+"/workers/"+url.PathEscape(w.cfg.ID)); err == nil {
		registered = true
	}
	w.mu.Lock()
	w.assign = a
	w.mu.Unlock()
	type want struct {
		rec   *Record
		index int
	}
	wanted := map[string]want{}
	cache := map[string]*Record{}
	for inst, owner := range a.Instances {
		if owner != w.cfg.ID || !registered {
			continue
		}
		kind, t, ns, n, i, ok := parseInstanceKey(inst)
		if !ok {
			continue
		}
		ck := string(kind) + "/" + t + "/" + ns + "/" + n
		r, seen := cache[ck]
		if !seen {
			var err error
			r, _, err = w.recs.get(ctx, kind, t, ns, n)
			if errors.Is(err, metadata.ErrNotFound) {
				r = nil
			} else if err != nil {
				return err
			}
			cache[ck] = r
		}
		if r == nil || i >= r.Parallelism() || r.isStopped(i) {
			continue
		}
		wanted[inst] = want{r, i}
	}
	w.mu.Lock()
	var stop []*supervisor
	for inst, run := range w.running {
		wt, ok := wanted[inst]
		if !ok || wt.rec.Version != run.version || wt.rec.Restarts[wt.index] != run.restart {
			stop = append(stop, run.sup)
			st, _ := run.sup.snapshot()
			w.restartsGone += st.Restarts
			delete(w.running, inst)
		}
	}
	w.mu.Unlock()
	stopParallel(stop)
	for inst, wt := range wanted {
		w.mu.Lock()
		_, ok := w.running[inst]
		w.mu.Unlock()
		if ok {
			continue
		}
		sup, err := w.newSupervisor(inst, wt.rec, wt.index)
		if err != nil {
			w.log.Warn("functions: cannot run instance", "instance", inst, "err", err)
			continue
		}
		sup.start()
		w.mu.Lock()
		w.running[inst] = &running{sup: sup, version: wt.rec.Version, restart: wt.rec.Restarts[wt.index]}
		w.mu.Unlock()
	}
	return nil
}

func stopParallel(sups []*supervisor) {
	var wg sync.WaitGroup
	for _, s := range sups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.stop()
		}()
	}
	wg.Wait()
}

func (w *Worker) stopAll() {
	w.mu.Lock()
	var stop []*supervisor
	for inst, run := range w.running {
		stop = append(stop, run.sup)
		st, _ := run.sup.snapshot()
		w.restartsGone += st.Restarts
		delete(w.running, inst)
	}
	w.mu.Unlock()
	stopParallel(stop)
}

func parseInstanceKey(inst string) (kind fnconfig.Kind, tenant, ns, name string, index int, ok bool) {
	parts := strings.SplitN(inst, "/", 5)
	if len(parts) != 5 {
		return
	}
	idx, err := strconv.Atoi(parts[4])
	if err != nil {
		return
	}
	return fnconfig.Kind(parts[0]), parts[1], parts[2], parts[3], idx, true
}

// newSupervisor prepares an instance: its details and package.
func (w *Worker) newSupervisor(inst string, r *Record, index int) (*supervisor, error) {
	d, err := r.FunctionDetails()
	if err != nil {
		return nil, err
	}
	s := &supervisor{
		key: inst, rt: &w.cfg.Runtimes, env: w.env, ports: &w.port, log: w.log, starting: w.starting, started: w.startSeconds,
		output: filepath.Join(w.env.LogDir, r.Tenant, r.Namespace, r.Name, fmt.Sprintf("%s-%d.out", r.Name, index)),
		launch: launch{details: d, index: index, workerID: w.cfg.ID},
	}
	s.prepare = func(ctx context.Context) (string, error) { return w.localPackage(ctx, r) }
	return s, nil
}

// localPackage returns the path of a record's package on this worker,
// fetching it from the package store into the cache on first use.
func (w *Worker) localPackage(ctx context.Context, r *Record) (string, error) {
	p := r.Package
	if p.Builtin != "" {
		c, ok := w.connector[p.Builtin]
		if !ok {
			return "", fmt.Errorf("builtin connector %q is not installed on worker %s", p.Builtin, w.cfg.ID)
		}
		return c.Path, nil
	}
	if p.Digest == "" {
		return "", errors.New("no package")
	}
	dir := filepath.Join(w.cfg.DataDir, "packages", p.Digest)
	name := filepath.Base(p.FileName)
	if name == "" || name == "." || name == "/" {
		name = "package"
	}
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, ".fetch-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if err := w.cfg.Packages.Get(ctx, p.Digest, tmp); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp.Name(), 0o755); err != nil { // Go functions are executables
		return "", err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", err
	}
	return path, nil
}

// owners returns the assignment as this worker last read it.
func (w *Worker) owner(inst string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.assign.Instances[inst]
}

// liveWorkers reads the registered workers.
func (w *Worker) liveWorkers(ctx context.Context) ([]WorkerInfo, error) {
	keys, err := w.md.Children(ctx, w.cfg.Root+"/workers")
	if err != nil {
		return nil, err
	}
	var out []WorkerInfo
	for _, k := range keys {
		kv, err := w.md.Get(ctx, w.cfg.Root+"/workers/"+k)
		if err != nil {
			continue
		}
		var wi WorkerInfo
		if json.Unmarshal(kv.Value, &wi) == nil {
			out = append(out, wi)
		}
	}
	slices.SortFunc(out, func(a, b WorkerInfo) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
