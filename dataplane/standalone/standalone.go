// Package standalone assembles a whole Magnetar data plane in one process:
// an embedded etcd metadata store, one bookie, the ledger client, the
// managed-ledger factory and one broker, with data under one directory.
// `magnetar standalone` runs it; tests start it in-process.
//
// Layout of DataDir: metadata/ (etcd), bookie/ (cookie and ledger storage).
// At start the cluster "standalone", the tenant "public" and the namespace
// "public/default" are created if absent.
package standalone

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/admin"
	"github.com/magnetar-dev/magnetar/dataplane/bookie"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/client"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
	"github.com/magnetar-dev/magnetar/dataplane/broker"
	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/etcdstore"
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
	// BookieAddr is the embedded bookie's address. It must stay the same
	// across restarts (ledger metadata names bookies by address). Default
	// 127.0.0.1:3181.
	BookieAddr string
	// JournalNoSync acknowledges adds before fsync (not durable). Default false.
	JournalNoSync bool
	// Broker carries further broker settings; its BinaryAddr is BrokerAddr.
	Broker broker.Config
	Logger *slog.Logger
}

// Standalone is a running data plane.
type Standalone struct {
	cfg    Config
	md     *etcdstore.Embedded
	st     *storage.DiskStorage
	bk     *bookie.Server
	pool   *wire.Pool
	client *client.Client
	mlf    *ledger.Factory
	broker *broker.Service
	http   *http.Server
	httpLn net.Listener
	wg     sync.WaitGroup
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
	if s.st, err = storage.Open(storage.Config{Dir: filepath.Join(cfg.DataDir, "bookie", "ledgers"), JournalNoSync: cfg.JournalNoSync, Logger: cfg.Logger}); err != nil {
		return nil, fmt.Errorf("standalone: bookie storage: %w", err)
	}
	if s.bk, err = bookie.New(bookie.Config{ListenAddr: cfg.BookieAddr, DataDir: filepath.Join(cfg.DataDir, "bookie"), Logger: cfg.Logger}, s.st, s.md); err != nil {
		return nil, err
	}
	if err = s.bk.Start(ctx); err != nil {
		return nil, fmt.Errorf("standalone: bookie: %w", err)
	}
	s.pool = wire.NewPool(wire.ClientConfig{})
	if s.client, err = client.New(client.Config{Metadata: s.md, Dialer: client.PoolDialer{Pool: s.pool}, Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	if s.mlf, err = ledger.NewFactory(ledger.FactoryConfig{Client: s.client, Metadata: s.md,
		Defaults: ledger.Config{Ensemble: 1, WriteQuorum: 1, AckQuorum: 1}, Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	bcfg := cfg.Broker
	bcfg.BinaryAddr = cfg.BrokerAddr
	if bcfg.Logger == nil {
		bcfg.Logger = cfg.Logger
	}
	if err = broker.Bootstrap(ctx, broker.NewResources(s.md), bcfg.WithDefaults().ClusterName, "", ""); err != nil {
		return nil, fmt.Errorf("standalone: bootstrap: %w", err)
	}
	if s.httpLn, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("standalone: http listen: %w", err)
	}
	bcfg.WebServiceURL = "http://" + s.httpLn.Addr().String()
	if s.broker, err = broker.New(bcfg, s.md, s.mlf); err != nil {
		return nil, err
	}
	if err = s.broker.Start(ctx); err != nil {
		return nil, err
	}
	s.http = &http.Server{
		Handler:           admin.NewHandler(admin.Config{WebServiceURL: bcfg.WebServiceURL, Logger: cfg.Logger}, s.broker),
		ReadHeaderTimeout: 10 * time.Second,
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.http.Serve(s.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			cfg.Logger.Error("standalone http server failed", "err", err)
		}
	}()
	return s, nil
}

// Broker returns the broker.
func (s *Standalone) Broker() *broker.Service { return s.broker }

// ServiceURL is the pulsar:// URL of the broker.
func (s *Standalone) ServiceURL() string { return s.broker.ServiceURL() }

// WebServiceURL is the http:// URL of the admin API.
func (s *Standalone) WebServiceURL() string { return "http://" + s.httpLn.Addr().String() }

// Shutdown stops the broker, then storage and metadata, in that order.
func (s *Standalone) Shutdown(ctx context.Context) error {
	var errs []error
	if s.http != nil {
		errs = append(errs, s.http.Shutdown(ctx))
		s.wg.Wait()
	} else if s.httpLn != nil {
		s.httpLn.Close()
	}
	if s.broker != nil {
		errs = append(errs, s.broker.Shutdown(ctx))
	}
	if s.mlf != nil {
		errs = append(errs, s.mlf.Close())
	}
	if s.pool != nil {
		s.pool.Close()
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
	return errors.Join(errs...)
}
