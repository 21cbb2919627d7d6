// Package standalone assembles a whole Magnetar data plane in one process:
// an embedded etcd metadata store and one bookie, plus the broker half that
// `magnetar broker` runs (package brokernode: ledger client, managed-ledger
// factory, broker, admin HTTP; ledgers E=Qw=Qa=1, no auditor), with data
// under one directory.
// `magnetar standalone` runs it; tests start it in-process.
//
// Layout of DataDir: metadata/ (etcd), bookie/ (cookie and ledger storage),
// LOCK (the running standalone's PID; a second standalone on the directory
// fails at once naming it).
// At start the cluster "standalone", the tenant "public" and the namespace
// "public/default" are created if absent.
package standalone

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bookie"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage"
	"github.com/magnetar-dev/magnetar/dataplane/broker"
	"github.com/magnetar-dev/magnetar/dataplane/brokernode"
	"github.com/magnetar-dev/magnetar/dataplane/functions/worker"
	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/etcdstore"
	"github.com/magnetar-dev/magnetar/dataplane/offload"
	"github.com/magnetar-dev/magnetar/internal/dirlock"
)

// Config configures a standalone data plane.
type Config struct {
	// DataDir holds everything. Required.
	DataDir string
	// BrokerAddr is the Pulsar binary protocol address. Default 127.0.0.1:6650.
	BrokerAddr string
	// HTTPAddr serves the admin REST API and HTTP lookups. Default
	// 127.0.0.1:8080.
	HTTPAddr string
	// HTTPSAddr serves the admin API over TLS too (Broker.TLSConfig).
	HTTPSAddr string
	// BookieAddr is the embedded bookie's address. It must stay the same
	// across restarts (ledger metadata names bookies by address). Default
	// 127.0.0.1:3181.
	BookieAddr string
	// JournalNoSync acknowledges adds before fsync (not durable). Default false.
	JournalNoSync bool
	// JournalDir puts the bookie journal in its own directory (ideally its
	// own device). Default <DataDir>/bookie/ledgers/journal.
	JournalDir string
	// CopyToEntryLogs: see storage.Config.CopyToEntryLogs. Default false.
	CopyToEntryLogs bool
	// JournalBufferedWrites: see storage.Config.JournalBufferedWrites.
	// Default false (O_DIRECT where the file system allows it).
	JournalBufferedWrites bool
	// BacklogReadRate paces catch-up reads, in bytes per second
	// (brokernode.Config.BacklogReadRate). Default 0: unpaced.
	BacklogReadRate int64
	// Offload and OffloadPolicy configure tiered storage
	// (brokernode.Config.Offload). Default: none.
	Offload       offload.Config
	OffloadPolicy ledger.OffloadPolicy
	// Broker carries further broker settings; its BinaryAddr is BrokerAddr.
	Broker broker.Config
	// NoFunctions leaves the function worker out. By default the broker
	// runs one (Pulsar's functionsWorkerEnabled), with its files under
	// <DataDir>/functions, the runtimes worker.ResolveRuntimes finds, and
	// Java function state in the embedded metadata store.
	NoFunctions bool
	// FunctionsJavaHome is the Java instance's home (javainstance.DefaultDir
	// when empty; Java functions and connectors are refused without one).
	FunctionsJavaHome string
	// FunctionsDir holds the worker's files (default <DataDir>/functions).
	FunctionsDir string
	// FunctionsInstanceTokenFile holds the token function instances
	// authenticate to the broker with when it requires authentication
	// (read at every authentication).
	FunctionsInstanceTokenFile string
	// FunctionsMaxPackageSize bounds an uploaded package (default 256 MiB).
	FunctionsMaxPackageSize int64
	Logger                  *slog.Logger
}

// Standalone is a running data plane.
type Standalone struct {
	cfg  Config
	md   *etcdstore.Embedded
	st   *storage.DiskStorage
	bk   *bookie.Server
	node *brokernode.Node // the broker, its ledger client and admin HTTP
	lock *dirlock.Lock    // DataDir, held until Shutdown
}

// Start brings every component up; on error what was started is stopped.
func Start(ctx context.Context, cfg Config) (_ *Standalone, err error) {
	if cfg.DataDir == "" {
		return nil, errors.New("standalone: DataDir is required")
	}
	if cfg.BrokerAddr == "" {
		cfg.BrokerAddr = "127.0.0.1:6650"
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:8080"
	}
	if cfg.BookieAddr == "" {
		cfg.BookieAddr = bookie.DefaultListenAddr
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Standalone{cfg: cfg}
	if s.lock, err = dirlock.Acquire(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("standalone: %w", err)
	}
	defer func() {
		if err != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			s.Shutdown(sctx)
			cancel()
		}
	}()
	if s.md, err = etcdstore.StartEmbedded(ctx, etcdstore.EmbeddedConfig{Dir: filepath.Join(cfg.DataDir, "metadata")}); err != nil {
		return nil, fmt.Errorf("standalone: metadata store: %w", err)
	}
	if s.st, err = storage.Open(storage.Config{Dir: filepath.Join(cfg.DataDir, "bookie", "ledgers"), JournalDir: cfg.JournalDir, JournalNoSync: cfg.JournalNoSync, CopyToEntryLogs: cfg.CopyToEntryLogs, JournalBufferedWrites: cfg.JournalBufferedWrites, Logger: cfg.Logger}); err != nil {
		return nil, fmt.Errorf("standalone: bookie storage: %w", err)
	}
	if s.bk, err = bookie.New(bookie.Config{ListenAddr: cfg.BookieAddr, DataDir: filepath.Join(cfg.DataDir, "bookie"), Logger: cfg.Logger}, s.st, s.md); err != nil {
		return nil, err
	}
	if err = s.bk.Start(ctx); err != nil {
		return nil, fmt.Errorf("standalone: bookie: %w", err)
	}
	bcfg := cfg.Broker
	bcfg.BinaryAddr = cfg.BrokerAddr
	var fns *brokernode.FunctionsConfig
	if !cfg.NoFunctions {
		dir := cfg.FunctionsDir
		if dir == "" {
			dir = filepath.Join(cfg.DataDir, "functions")
		}
		rt, connectors, rerr := worker.ResolveRuntimes(dir, cfg.FunctionsJavaHome)
		if rerr != nil {
			cfg.Logger.Info("functions: runtimes not available here (their functions are refused with a 400 that says why)", "missing", rerr)
		}
		fns = &brokernode.FunctionsConfig{DataDir: dir, Runtimes: rt, ConnectorsDir: connectors, MaxPackageSize: cfg.FunctionsMaxPackageSize, InstanceTokenFile: cfg.FunctionsInstanceTokenFile,
			State: &worker.StateStore{Endpoints: s.md.ClientURLs(), Prefix: "/functions/state"}}
	}
	if s.node, err = brokernode.Start(ctx, brokernode.Config{
		Metadata: s.md, NoAuditor: true, HTTPAddr: cfg.HTTPAddr, HTTPSAddr: cfg.HTTPSAddr,
		Ensemble: 1, WriteQuorum: 1, AckQuorum: 1,
		BacklogReadRate: cfg.BacklogReadRate,
		Offload:         cfg.Offload, OffloadPolicy: cfg.OffloadPolicy,
		Broker: bcfg, Functions: fns, Logger: cfg.Logger,
	}); err != nil {
		return nil, fmt.Errorf("standalone: %w", err)
	}
	// One scrape of the admin listener's /metrics covers the bookie too.
	reg := s.node.Broker().Metrics()
	if err = errors.Join(s.bk.RegisterMetrics(reg), s.st.RegisterMetrics(reg)); err != nil {
		return nil, fmt.Errorf("standalone: metrics: %w", err)
	}
	return s, nil
}

// Broker returns the broker.
func (s *Standalone) Broker() *broker.Service { return s.node.Broker() }

// FunctionsWorker returns the function worker (nil with NoFunctions).
func (s *Standalone) FunctionsWorker() *worker.Worker { return s.node.FunctionsWorker() }

// Metadata returns the embedded metadata store.
func (s *Standalone) Metadata() metadata.Store { return s.md }

// ServiceURL is the pulsar:// URL of the broker.
func (s *Standalone) ServiceURL() string { return s.node.ServiceURL() }

// WebServiceURL is the http:// URL of the admin API.
func (s *Standalone) WebServiceURL() string { return s.node.WebServiceURL() }

// Shutdown stops the broker, then storage and metadata, in that order.
func (s *Standalone) Shutdown(ctx context.Context) error {
	var errs []error
	if s.node != nil {
		errs = append(errs, s.node.Shutdown(ctx))
	}
	if s.bk != nil {
		errs = append(errs, s.bk.Shutdown(ctx))
	}
	if s.st != nil {
		errs = append(errs, s.st.Close())
	}
	if s.md != nil {
		errs = append(errs, s.md.Close())
	}
	errs = append(errs, s.lock.Release())
	return errors.Join(errs...)
}
