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
}

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
	return nil
}

// Env is a running control plane and its region agents.
type Env struct {
	cfg     Config
	log     *slog.Logger
	store   store.Store
	srv     *apiserver.Server
	keyFile string
	provs   []*process.Provisioner

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
	e := &Env{cfg: cfg, log: cfg.Logger, keyFile: filepath.Join(dir, "bootstrap.key"), served: make(chan struct{})}
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
	if e.srv, err = apiserver.New(apiserver.Config{Listen: cfg.Listen, Store: e.store, Authorizer: engine,
		Logger: cfg.Logger, BootstrapKeyFile: e.keyFile}); err != nil {
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
	if err := e.registerRegions(ctx, key); err != nil {
		return nil, err
	}

	for _, r := range cfg.Regions {
		prov, err := process.New(process.Config{DataDir: filepath.Join(dir, "regions", r), Binary: cfg.Binary,
			Logger: cfg.Logger.With("region", r)})
		if err != nil {
			return nil, err
		}
		e.provs = append(e.provs, prov)
		a, err := agent.New(agent.Config{Region: r, ControlPlaneURL: "http://" + e.srv.Addr().String(), APIKey: key,
			Provisioner: prov, PulsarClusterName: process.PulsarClusterName, Logger: cfg.Logger, PollTimeout: cfg.PollTimeout,
			MeteringDir: filepath.Join(dir, "regions", r, "metering"), MeteringInterval: cfg.MeteringInterval})
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

func (e *Env) registerRegions(ctx context.Context, key string) error {
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
	return nil
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

// Shutdown stops the agents, every data-plane process (data is kept) and
// the control plane.
func (e *Env) Shutdown(ctx context.Context) error {
	e.shutOnce.Do(func() {
		e.cancel()
		e.wg.Wait()
		var errs []error
		for _, p := range e.provs {
			p.Close()
			errs = append(errs, p.StopAll(ctx))
		}
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
		e.shutErr = errors.Join(errs...)
	})
	return e.shutErr
}
