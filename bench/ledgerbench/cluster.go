package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-dev/magnetar/bench/internal/machine"
	"github.com/magnetar-dev/magnetar/dataplane/bookie"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/client"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/memstore"
)

// cluster is n in-process bookies on loopback TCP, each over its own disk
// storage directory, sharing one in-memory metadata store, plus a ledger
// client connected to them through a wire.Pool.
type cluster struct {
	dir     string
	md      *memstore.Store
	stores  []*storage.DiskStorage
	servers []*bookie.Server
	pool    *wire.Pool
	client  *client.Client
	reg     *prometheus.Registry // every bookie's storage metrics (-timeline)
}

var quiet = slog.New(slog.DiscardHandler)

// startCluster starts n bookies under dir, which it creates (after removing
// what a killed run may have left there); the caller removes it.
// Each bookie's storage is opened with tmpl (its Dir and Logger set).
func startCluster(ctx context.Context, dir string, n int, tmpl storage.Config) (_ *cluster, err error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	c := &cluster{dir: dir, md: memstore.New(), reg: prometheus.NewRegistry()}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	for i := range n {
		bdir := filepath.Join(dir, fmt.Sprintf("bookie-%d", i))
		if err := os.MkdirAll(bdir, 0o755); err != nil {
			return nil, err
		}
		cfg := tmpl
		cfg.Dir, cfg.Logger = bdir, quiet
		st, err := storage.Open(cfg) // journal fsync on
		if err != nil {
			return nil, err
		}
		c.stores = append(c.stores, st)
		// One registry per bookie would do as well; the sampler sums.
		if err := st.RegisterMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"bookie": strconv.Itoa(i)}, c.reg)); err != nil {
			return nil, err
		}
		srv, err := bookie.New(bookie.Config{
			ID:         fmt.Sprintf("bench-bookie-%d", i),
			ListenAddr: "127.0.0.1:0",
			DataDir:    bdir,
			Logger:     quiet,
		}, st, c.md)
		if err != nil {
			return nil, err
		}
		if err := srv.Start(ctx); err != nil {
			return nil, err
		}
		c.servers = append(c.servers, srv)
	}
	// Registrations are written by Start; wait until the client can see all.
	deadline := time.Now().Add(10 * time.Second)
	for {
		regs, err := bookie.ListAvailable(ctx, c.md)
		if err != nil {
			return nil, err
		}
		if len(regs) == n {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("only %d of %d bookies registered", len(regs), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.pool = wire.NewPool(wire.ClientConfig{})
	c.client, err = client.New(client.Config{
		Metadata: c.md,
		Dialer:   client.PoolDialer{Pool: c.pool},
		Logger:   quiet,
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// close stops everything; the directory stays (run removes it at the end).
func (c *cluster) close() error {
	var errs []error
	if c.pool != nil {
		c.pool.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range c.servers {
		errs = append(errs, s.Shutdown(ctx))
	}
	for _, st := range c.stores {
		errs = append(errs, st.Close())
	}
	errs = append(errs, c.md.Close())
	return errors.Join(errs...)
}

// quiesce flushes every bookie's write cache to its entry logs and then
// waits for the machine's dirty pages to reach the disk, so the next
// measurement does not pay for the previous one's writeback.
func (c *cluster) quiesce() error {
	for _, st := range c.stores {
		if err := st.Flush(); err != nil {
			return err
		}
	}
	machine.Quiesce()
	return nil
}
