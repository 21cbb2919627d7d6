// Package brokernode assembles one cluster broker process: a client of an
// external metadata store (etcd), the ledger client talking to the
// registered bookies, the managed-ledger factory, the broker and its admin
// REST/HTTP lookup server, and a candidate for the elected auditor that
// re-replicates ledgers of lost bookies. `magnetar broker` runs it; e2e tests start that
// binary. A standalone (package standalone) is the same broker with a bookie
// and an embedded metadata store in one process.
//
// Brokers are stateless: everything they own is recorded in the metadata
// store under their session (see broker/ownership.go), so any number of
// them can share a cluster and any one may die.
package brokernode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/admin"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/client"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
	"github.com/magnetar-dev/magnetar/dataplane/broker"
	"github.com/magnetar-dev/magnetar/dataplane/functions/worker"
	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/etcdstore"
	"github.com/magnetar-dev/magnetar/dataplane/offload"
)

// Config configures a broker node.
type Config struct {
	// MetadataEndpoints are the etcd client URLs. Required unless Metadata
	// is set.
	MetadataEndpoints []string
	// MetadataTLS is the TLS configuration of the link to https://
	// MetadataEndpoints (etcdstore.Config.TLS).
	MetadataTLS *tls.Config
	// BookieTLS, when set, makes the ledger client dial bookies over TLS
	// (wire.ClientConfig.TLS): every bookie of the cluster must serve it.
	BookieTLS *tls.Config
	// Metadata, when set, is used instead of connecting to
	// MetadataEndpoints; the node does not close it (the standalone passes
	// its embedded store).
	Metadata metadata.Store
	// NoAuditor leaves re-replication out (a standalone has one bookie:
	// there is nothing to re-replicate to).
	NoAuditor bool
	// HTTPAddr serves the admin REST API and HTTP lookups. Default 127.0.0.1:8080.
	HTTPAddr string
	// AdvertisedHTTPURL is the web service URL other brokers and clients use
	// (default http://<bound HTTPAddr>).
	AdvertisedHTTPURL string
	// HTTPSAddr, when set, serves the admin API over TLS with
	// Broker.TLSConfig (Pulsar's 8443). HTTPAddr "off" serves HTTPS only.
	HTTPSAddr string
	// AdvertisedHTTPSURL is the https:// URL (default https://<advertised
	// host>:<bound HTTPS port>).
	AdvertisedHTTPSURL string
	// Ensemble, WriteQuorum and AckQuorum are the default replication of new
	// ledgers. Defaults 3, 3, 2 (a cluster's; a namespace's persistence
	// policy overrides them).
	Ensemble, WriteQuorum, AckQuorum int
	// BacklogReadRate paces catch-up reads from the bookies, in bytes per
	// second for the whole broker (ledger.FactoryConfig.BacklogReadRate).
	// Default 0: unpaced.
	BacklogReadRate int64
	// Offload configures tiered storage (package offload); an empty
	// Bucket means none. OffloadPolicy is the broker's default policy for
	// namespaces that set none (Pulsar's managedLedgerOffloadThresholdInBytes,
	// managedLedgerOffloadDeletionLagMs); by default nothing is offloaded
	// automatically.
	Offload       offload.Config
	OffloadPolicy ledger.OffloadPolicy
	// Broker carries the broker's own settings (BinaryAddr, AdvertisedAddr,
	// ClusterName, SessionTTL, ...).
	Broker broker.Config
	// Functions, when set, runs a function worker in the broker (Pulsar's
	// functionsWorkerEnabled): the functions, sources and sinks admin API
	// on the admin listeners, and the instances the scheduler gives it.
	Functions *FunctionsConfig
	Logger    *slog.Logger
}

// FunctionsConfig configures the broker's function worker (see
// worker.Config for each field).
type FunctionsConfig struct {
	// DataDir holds the worker's package cache, instance logs and
	// extracted NARs. Required.
	DataDir       string
	Runtimes      worker.Runtimes
	ConnectorsDir string
	// State, when set, keeps function state in that etcd; by default it is
	// the cluster's metadata store (MetadataEndpoints, MetadataTLS) under
	// <its prefix>/functions/state. A Metadata store that is not etcd
	// leaves functions without state.
	State         *worker.StateStore
	InstanceToken string
	// InstanceTokenFile holds the instances' token (read at every
	// authentication) instead of InstanceToken.
	InstanceTokenFile string
	TLSTrustCerts     string
	MaxPackageSize    int64
}

// Node is a running broker process.
type Node struct {
	cfg     Config
	md      metadata.Store
	ownMD   bool // md was opened here and is closed by Shutdown
	pool    *wire.Pool
	client  *client.Client
	mlf     *ledger.Factory
	off     *offload.S3 // nil without tiered storage
	broker  *broker.Service
	worker  *worker.Worker // nil without Functions
	http    *http.Server
	httpLn  net.Listener // nil when HTTPAddr is "off"
	httpsLn net.Listener // nil without HTTPSAddr
	wg      sync.WaitGroup
	// stopAudit ends the auditor (elected: one broker of the cluster runs
	// re-replication of ledgers whose bookies are gone).
	stopAudit context.CancelFunc
}

// Start connects to the metadata store and starts serving.
func Start(ctx context.Context, cfg Config) (_ *Node, err error) {
	if len(cfg.MetadataEndpoints) == 0 && cfg.Metadata == nil {
		return nil, errors.New("brokernode: MetadataEndpoints or Metadata is required")
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:8080"
	}
	if cfg.Ensemble == 0 {
		cfg.Ensemble, cfg.WriteQuorum, cfg.AckQuorum = 3, 3, 2
	}
	if !(cfg.Ensemble >= cfg.WriteQuorum && cfg.WriteQuorum >= cfg.AckQuorum && cfg.AckQuorum >= 1) {
		return nil, fmt.Errorf("brokernode: need ensemble >= write quorum >= ack quorum >= 1, have %d/%d/%d", cfg.Ensemble, cfg.WriteQuorum, cfg.AckQuorum)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	n := &Node{cfg: cfg}
	defer func() {
		if err != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			n.Shutdown(sctx)
			cancel()
		}
	}()
	if n.md = cfg.Metadata; n.md == nil {
		if n.md, err = etcdstore.New(ctx, etcdstore.Config{Endpoints: cfg.MetadataEndpoints, TLS: cfg.MetadataTLS}); err != nil {
			return nil, fmt.Errorf("brokernode: metadata store: %w", err)
		}
		n.ownMD = true
	}
	n.pool = wire.NewPool(wire.ClientConfig{TLS: cfg.BookieTLS})
	if n.client, err = client.New(client.Config{Metadata: n.md, Dialer: client.PoolDialer{Pool: n.pool}, Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	var offloader ledger.Offloader
	if cfg.Offload.Bucket != "" {
		if n.off, err = offload.New(ctx, cfg.Offload, cfg.Logger); err != nil {
			return nil, fmt.Errorf("brokernode: tiered storage: %w", err)
		}
		offloader = n.off
	}
	if n.mlf, err = ledger.NewFactory(ledger.FactoryConfig{Client: n.client, Metadata: n.md,
		Defaults: ledger.Config{Ensemble: cfg.Ensemble, WriteQuorum: cfg.WriteQuorum, AckQuorum: cfg.AckQuorum,
			Offload: cfg.OffloadPolicy},
		BacklogReadRate: cfg.BacklogReadRate, Logger: cfg.Logger, Offloader: offloader}); err != nil {
		return nil, err
	}
	bcfg := cfg.Broker
	if bcfg.Logger == nil {
		bcfg.Logger = cfg.Logger
	}
	if cfg.HTTPAddr != "off" {
		if n.httpLn, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return nil, fmt.Errorf("brokernode: http listen: %w", err)
		}
	}
	if cfg.HTTPSAddr != "" {
		if bcfg.TLSConfig == nil {
			return nil, errors.New("brokernode: HTTPSAddr needs Broker.TLSConfig")
		}
		if n.httpsLn, err = net.Listen("tcp", cfg.HTTPSAddr); err != nil {
			return nil, fmt.Errorf("brokernode: https listen: %w", err)
		}
	}
	if n.httpLn == nil && n.httpsLn == nil {
		return nil, errors.New("brokernode: HTTPAddr off needs an HTTPSAddr")
	}
	bcfg.WebServiceURL = cfg.AdvertisedHTTPURL
	if bcfg.WebServiceURL == "" && n.httpLn != nil {
		bcfg.WebServiceURL = "http://" + n.httpLn.Addr().String()
	}
	if n.httpsLn != nil {
		bcfg.WebServiceURLTLS = cfg.AdvertisedHTTPSURL
		if bcfg.WebServiceURLTLS == "" {
			host := "127.0.0.1"
			if bcfg.AdvertisedAddr != "" {
				host, _, _ = net.SplitHostPort(bcfg.AdvertisedAddr)
			}
			_, port, _ := net.SplitHostPort(n.httpsLn.Addr().String())
			bcfg.WebServiceURLTLS = "https://" + net.JoinHostPort(host, port)
		}
		if bcfg.WebServiceURL == "" {
			bcfg.WebServiceURL = bcfg.WebServiceURLTLS
		}
	}
	if n.broker, err = broker.New(bcfg, n.md, n.mlf); err != nil {
		return nil, err
	}
	if n.off != nil {
		if err = n.off.RegisterMetrics(n.broker.Metrics()); err != nil {
			return nil, fmt.Errorf("brokernode: tiered storage metrics: %w", err)
		}
	}
	if err = n.broker.Start(ctx); err != nil {
		return nil, err
	}
	if err = broker.Bootstrap(ctx, n.broker.Resources(), n.broker.Config().ClusterName, broker.ClusterData{
		ServiceURL: bcfg.WebServiceURL, ServiceURLTLS: bcfg.WebServiceURLTLS,
		BrokerServiceURL: n.broker.ServiceURL(), BrokerServiceTLS: n.broker.ServiceURLTLS(),
	}); err != nil {
		return nil, fmt.Errorf("brokernode: bootstrap: %w", err)
	}
	if !cfg.NoAuditor {
		aud, err := n.client.NewAuditor(client.AuditorConfig{ID: n.broker.BrokerID()})
		if err != nil {
			return nil, err
		}
		actx, cancel := context.WithCancel(context.Background())
		n.stopAudit = cancel
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := aud.Run(actx); err != nil && actx.Err() == nil {
				cfg.Logger.Error("auditor stopped", "err", err)
			}
		}()
	}
	acfg := admin.Config{WebServiceURL: bcfg.WebServiceURL, Logger: cfg.Logger}
	if fc := cfg.Functions; fc != nil {
		if n.worker, err = worker.New(worker.Config{
			Metadata: n.md, Broker: n.broker, DataDir: fc.DataDir,
			Packages: &worker.LedgerPackages{MD: n.md, Client: n.client, Root: "/functions/packages",
				Ensemble: cfg.Ensemble, WriteQuorum: cfg.WriteQuorum, AckQuorum: cfg.AckQuorum},
			Runtimes: fc.Runtimes, ConnectorsDir: fc.ConnectorsDir, State: n.functionState(),
			InstanceToken: fc.InstanceToken, InstanceTokenFile: fc.InstanceTokenFile, TLSTrustCerts: fc.TLSTrustCerts, MaxPackageSize: fc.MaxPackageSize,
			// A dead broker's instances move as soon as its bundles do.
			SessionTTL: n.broker.Config().SessionTTL,
			Logger:     cfg.Logger,
		}); err != nil {
			return nil, fmt.Errorf("brokernode: function worker: %w", err)
		}
		if err = n.worker.RegisterMetrics(n.broker.Metrics()); err != nil {
			return nil, fmt.Errorf("brokernode: function worker metrics: %w", err)
		}
		acfg.Functions = n.worker
	}
	n.http = &http.Server{
		Handler:           admin.NewHandler(acfg, n.broker),
		ReadHeaderTimeout: 10 * time.Second,
	}
	if n.httpLn != nil {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := n.http.Serve(n.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				cfg.Logger.Error("broker http server failed", "err", err)
			}
		}()
	}
	if n.httpsLn != nil {
		tln := tls.NewListener(n.httpsLn, bcfg.TLSConfig)
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := n.http.Serve(tln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				cfg.Logger.Error("broker https server failed", "err", err)
			}
		}()
	}
	if n.worker != nil {
		n.worker.Start()
	}
	return n, nil
}

// Broker returns the broker.
func (n *Node) Broker() *broker.Service { return n.broker }

// functionState is where the function worker keeps state: Functions.State,
// else the cluster's etcd under <prefix>/functions/state.
func (n *Node) functionState() *worker.StateStore {
	if st := n.cfg.Functions.State; st != nil {
		return st
	}
	es, ok := n.md.(*etcdstore.Store)
	if !ok || len(n.cfg.MetadataEndpoints) == 0 {
		return nil
	}
	return &worker.StateStore{Endpoints: n.cfg.MetadataEndpoints, TLS: n.cfg.MetadataTLS, Prefix: es.Prefix() + "/functions/state"}
}

// FunctionsWorker returns the broker's function worker (nil without one).
func (n *Node) FunctionsWorker() *worker.Worker { return n.worker }

// ServiceURL is the pulsar:// URL of the broker.
func (n *Node) ServiceURL() string { return n.broker.ServiceURL() }

// WebServiceURL is the http:// URL of the admin API.
func (n *Node) WebServiceURL() string { return n.broker.Config().WebServiceURL }

// Shutdown stops serving, releases the broker's bundles and closes clients,
// a step at a time. It returns when ctx ends even if a step has not (a
// metadata store or bookies that are gone can hold one up), with an error
// naming that step; the steps after it are skipped.
func (n *Node) Shutdown(ctx context.Context) error {
	var errs []error
	steps := []struct {
		what string
		run  func() error
	}{
		{"stopping the function worker and its instances", func() error {
			if n.worker != nil {
				return n.worker.Shutdown(ctx)
			}
			return nil
		}},
		{"stopping the auditor", func() error {
			if n.stopAudit != nil {
				n.stopAudit()
			}
			return nil
		}},
		{"stopping the admin HTTP server", func() error {
			var err error
			if n.http != nil {
				err = n.http.Shutdown(ctx)
			} else {
				for _, ln := range []net.Listener{n.httpLn, n.httpsLn} {
					if ln != nil {
						ln.Close()
					}
				}
			}
			n.wg.Wait()
			return err
		}},
		{"closing topics (their ledgers and metadata records)", func() error {
			if n.broker != nil {
				return n.broker.Shutdown(ctx)
			}
			return nil
		}},
		{"closing the managed-ledger factory", func() error {
			if n.mlf != nil {
				return n.mlf.Close()
			}
			return nil
		}},
		{"closing the offloader", func() error {
			if n.off != nil {
				return n.off.Close()
			}
			return nil
		}},
		{"closing bookie connections", func() error {
			if n.pool != nil {
				n.pool.Close()
			}
			return nil
		}},
		{"closing the metadata store client", func() error {
			if n.md != nil && n.ownMD {
				return n.md.Close()
			}
			return nil
		}},
	}
	for _, st := range steps {
		done := make(chan error, 1)
		go func() { done <- st.run() }()
		select {
		case err := <-done:
			errs = append(errs, err)
		case <-ctx.Done():
			return errors.Join(append(errs, fmt.Errorf("brokernode: shutdown gave up %s: %w", st.what, ctx.Err()))...)
		}
	}
	return errors.Join(errs...)
}
