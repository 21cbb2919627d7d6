package up

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/apiserver"
	"github.com/magnetar-dev/magnetar/controlplane/store"
	"github.com/magnetar-dev/magnetar/controlplane/store/sqlstore"
	"github.com/magnetar-dev/magnetar/policy"
	"github.com/magnetar-dev/magnetar/regions/agent"
	"github.com/magnetar-dev/magnetar/regions/discovery/consul"
	"github.com/magnetar-dev/magnetar/regions/provisioner/process"
)

// DefaultRegions are the regions Start registers when Config.Regions is empty.
var DefaultRegions = []string{"local-a", "local-b"}

// Config configures Start.
type Config struct {
	// DataDir holds everything; default "./data/up".
	DataDir string
	// Listen is the control plane's gRPC and REST address; default
	// apiserver.DefaultListen.
	Listen string
	// Regions are the region ids to register and run; default DefaultRegions.
	Regions []string
	// Binary runs the data-plane processes; default os.Executable().
	Binary string
	// Logger; default slog.Default().
	Logger *slog.Logger
	// MeteringInterval of the agents' usage scrape; default
	// agent.DefaultMeteringInterval.
	MeteringInterval time.Duration
	// PollTimeout of the agents' watch; default agent.DefaultPollTimeout.
	PollTimeout time.Duration
	// ReconcileInterval of the agents' full reconcile; default
	// agent.DefaultReconcileInterval.
	ReconcileInterval time.Duration
	// AgentProcesses runs each region's agent as a child process
	// (`magnetar agent`, with its log in regions/<id>/agent.log and its PID
	// in regions/<id>/agent.pid), the way a region runs its agent beside
	// the control plane; killing that process and the region's clusters
	// loses the region until the agent is started again. Default false:
	// the agents run in this process.
	AgentProcesses bool
	// InsecureDataPlanes provisions clusters without TLS inside them and
	// without TLS listeners on their brokers
	// (process.Config.InsecureDataPlanes). Default false: TLS with
	// certificates of each region's CA.
	InsecureDataPlanes bool
	// AccessTokenTTL is the lifetime of the access tokens the control
	// plane issues (apiserver.Config.AccessTokenTTL); default that of
	// issuer.DefaultTokenTTL.
	AccessTokenTTL time.Duration
	// DataPlaneAuth turns on the agents' agent.Config.DataPlaneAuth:
	// brokers that require the control plane's tokens. Off when zero
	// (`magnetar up` turns it on by default).
	DataPlaneAuth bool
	// AgentRestartDelay is how long an agent process that exited waits
	// before it is started again, as a supervisor such as systemd would;
	// default DefaultAgentRestartDelay.
	AgentRestartDelay time.Duration
	// Discovery is "static" (default) or "consul": the regions' agents
	// register in Consul and the control plane watches it (consul.go).
	Discovery string
	// Consul is how to reach Consul with Discovery "consul"; an empty
	// Address (and no CONSUL_HTTP_ADDR) makes up start a Consul dev agent
	// per region, WAN-joined. Its Datacenter is ignored.
	Consul consul.Config
	// ConsulBinary is the consul binary of the dev agents; default
	// "consul" on PATH, else $GOPATH/bin/consul.
	ConsulBinary string
	// ConsulCheckInterval and ConsulCheckTTL are the agents' registrar's
	// (consul.RegistrarConfig Interval and TTL); default the package's.
	ConsulCheckInterval, ConsulCheckTTL time.Duration
}

// DefaultAgentRestartDelay is Config.AgentRestartDelay's default.
const DefaultAgentRestartDelay = 2 * time.Second

// agentStopGrace is the time between SIGTERM and SIGKILL of an agent
// process.
const agentStopGrace = 15 * time.Second

// Validate fills defaults.
func (c *Config) Validate() error {
	if c.DataDir == "" {
		c.DataDir = "./data/up"
	}
	if c.Listen == "" {
		c.Listen = apiserver.DefaultListen
	}
	if len(c.Regions) == 0 {
		c.Regions = DefaultRegions
	}
	for _, r := range c.Regions {
		if r == "" || strings.Contains(r, "/") {
			return fmt.Errorf("up: config: region id %q must be a bare id", r)
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch c.Discovery {
	case "":
		c.Discovery = "static"
	case "static", "consul":
	default:
		return fmt.Errorf("up: config: discovery %q: want static or consul", c.Discovery)
	}
	if c.AgentRestartDelay <= 0 {
		c.AgentRestartDelay = DefaultAgentRestartDelay
	}
	if c.AgentProcesses && c.Binary == "" {
		bin, err := os.Executable()
		if err != nil {
			return fmt.Errorf("up: config: the agent processes' binary: %w", err)
		}
		c.Binary = bin
	}
	return nil
}

// Env is a running control plane and its region agents.
type Env struct {
	cfg     Config
	log     *slog.Logger
	store   store.Store
	srv     *apiserver.Server
	dir     string
	keyFile string
	provs   []*process.Provisioner // in-process agents' provisioners
	consul  []*consulAgent         // the Consul dev agents up runs (consul.go)
	watcher *consul.Watcher        // the control plane's catalog watch

	cancel   context.CancelFunc // stops the agents
	wg       sync.WaitGroup     // the agents
	served   chan struct{}      // closed when Serve returns; serveErr set
	serveErr error
	shutOnce sync.Once
	shutErr  error
}

// Start starts the control plane, registers the regions and starts one
// agent per region.
func Start(ctx context.Context, cfg Config) (_ *Env, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("up: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("up: %w", err)
	}
	e := &Env{cfg: cfg, log: cfg.Logger, dir: dir, keyFile: filepath.Join(dir, "bootstrap.key"), served: make(chan struct{})}
	agentsCtx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	defer func() {
		if err != nil {
			sctx, c := context.WithTimeout(context.Background(), 30*time.Second)
			defer c()
			e.Shutdown(sctx)
		}
	}()

	if e.store, err = sqlstore.Open(ctx, "sqlite://"+filepath.Join(dir, "controlplane.db")); err != nil {
		return nil, err
	}
	engine, err := policy.New()
	if err != nil {
		return nil, err
	}
	scfg := apiserver.Config{Listen: cfg.Listen, Store: e.store, Authorizer: engine,
		Logger: cfg.Logger, BootstrapKeyFile: e.keyFile, AccessTokenTTL: cfg.AccessTokenTTL}
	if cfg.Discovery == "consul" {
		if err := e.startConsul(ctx); err != nil {
			return nil, err
		}
		if e.watcher, err = consul.NewWatcher(consul.WatcherConfig{Consul: e.consulConfig(""), Logger: cfg.Logger}); err != nil {
			return nil, err
		}
		e.watcher.Start()
		scfg.Discovery = e.watcher
	}
	if e.srv, err = apiserver.New(scfg); err != nil {
		return nil, err
	}
	go func() {
		defer close(e.served)
		e.serveErr = e.srv.Serve(context.Background())
	}()

	raw, err := os.ReadFile(e.keyFile)
	if err != nil {
		return nil, fmt.Errorf("up: the operator key of this data directory is gone (%w); start with an empty --data-dir", err)
	}
	key := strings.TrimSpace(string(raw))
	if err := e.setUp(ctx, key); err != nil {
		return nil, err
	}

	for _, r := range cfg.Regions {
		rdir := filepath.Join(dir, "regions", r)
		if cfg.AgentProcesses {
			if err := e.startAgentProcess(agentsCtx, r, rdir); err != nil {
				return nil, err
			}
			continue
		}
		os.Remove(filepath.Join(rdir, agent.FailoverAddrFileName)) // a stale address would be taken for the new one
		prov, err := process.New(process.Config{DataDir: rdir, Binary: cfg.Binary, Logger: cfg.Logger.With("region", r),
			InsecureDataPlanes: cfg.InsecureDataPlanes})
		if err != nil {
			return nil, err
		}
		e.provs = append(e.provs, prov)
		a, err := agent.New(agent.Config{Region: r, ControlPlaneURL: "http://" + e.srv.Addr().String(), APIKey: key,
			Provisioner: prov, PulsarClusterName: process.PulsarClusterName, Logger: cfg.Logger, PollTimeout: cfg.PollTimeout,
			ReconcileInterval: cfg.ReconcileInterval,
			MeteringDir:       filepath.Join(rdir, "metering"), MeteringInterval: cfg.MeteringInterval,
			FailoverListen: "127.0.0.1:0", FailoverCacheFile: filepath.Join(rdir, "failover-cache.json"),
			FailoverAddrFile: filepath.Join(rdir, agent.FailoverAddrFileName), DataPlaneAuth: cfg.DataPlaneAuth,
			PeerCredentialsDir: filepath.Join(rdir, "peers"), Consul: e.registrarConfig(r)})
		if err != nil {
			return nil, err
		}
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			a.Run(agentsCtx)
		}()
	}
	return e, nil
}

// setUp registers the regions and, in a control plane without price
// books, creates the development one.
func (e *Env) setUp(ctx context.Context, key string) error {
	conn, err := grpc.NewClient(e.srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("up: %w", err)
	}
	defer conn.Close()
	regions := cpv1.NewRegionsClient(conn)
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
	for _, r := range e.cfg.Regions {
		_, err := regions.CreateRegion(ctx, &cpv1.CreateRegionRequest{RegionId: r, Region: &cpv1.Region{DisplayName: r + " (magnetar up)"}})
		if err != nil && status.Code(err) != codes.AlreadyExists {
			return fmt.Errorf("up: register region %s: %w", r, err)
		}
	}
	return ensurePriceBook(ctx, conn)
}

// Addr is the control plane's address (gRPC and REST).
func (e *Env) Addr() string { return e.srv.Addr().String() }

// KeyFile is the file holding the bootstrap operator API key.
func (e *Env) KeyFile() string { return e.keyFile }

// Regions are the region names run.
func (e *Env) Regions() []string {
	out := make([]string, len(e.cfg.Regions))
	for i, r := range e.cfg.Regions {
		out[i] = "regions/" + r
	}
	return out
}

// Done is closed when the API server stops (on its own or by Shutdown).
func (e *Env) Done() <-chan struct{} { return e.served }

// FailoverAddr is the address of region's agent's failover endpoint, ""
// until it listens (and while an agent process is down).
func (e *Env) FailoverAddr(region string) string {
	raw, err := os.ReadFile(filepath.Join(e.dir, "regions", region, agent.FailoverAddrFileName))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(raw))
}

// Shutdown stops the agents, every data-plane process (data is kept; each
// cluster's brokers first, its metadata store last) and the control plane.
func (e *Env) Shutdown(ctx context.Context) error {
	e.shutOnce.Do(func() {
		e.cancel()
		e.wg.Wait()
		var errs []error
		provs := e.provs
		if e.cfg.AgentProcesses {
			// The agents have exited and left their clusters running, as an
			// agent does; stop those through the state they recorded.
			for _, r := range e.cfg.Regions {
				p, err := process.New(process.Config{DataDir: filepath.Join(e.dir, "regions", r), Binary: e.cfg.Binary,
					Logger: e.log.With("region", r)})
				if err != nil {
					errs = append(errs, err)
					continue
				}
				provs = append(provs, p)
			}
		}
		// Every region's clusters at once; each cluster's brokers, then
		// bookies, then metadata store (process.Provisioner.StopAll).
		stopErrs := make([]error, len(provs))
		var wg sync.WaitGroup
		for i, p := range provs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.Close()
				stopErrs[i] = p.StopAll(ctx)
			}()
		}
		wg.Wait()
		errs = append(errs, stopErrs...)
		if e.srv != nil {
			errs = append(errs, e.srv.Shutdown(ctx))
			select {
			case <-e.served:
				errs = append(errs, e.serveErr)
			case <-ctx.Done():
				errs = append(errs, ctx.Err())
			}
		}
		if e.store != nil {
			errs = append(errs, e.store.Close())
		}
		if e.watcher != nil {
			errs = append(errs, e.watcher.Shutdown(ctx))
		}
		for _, a := range e.consul {
			a.stop()
		}
		e.shutErr = errors.Join(errs...)
	})
	return e.shutErr
}
