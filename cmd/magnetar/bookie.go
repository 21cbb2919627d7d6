package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/magnetar-dev/magnetar/dataplane/bookie"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/client"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/etcdstore"
)

func init() { subcommands = append(subcommands, newBookieCommand) }

// bookieShutdownTimeout bounds draining connections on a signal.
const bookieShutdownTimeout = 30 * time.Second

func newBookieCommand() *cobra.Command {
	var (
		cfg         bookie.Config
		metadataURL string
		journalSync bool
		journalDir  string
		copyToLogs  bool
		buffered    bool
		httpAddr    string
		serverTLS   tlsServerFlags
		metadataTLS tlsClientFlags
	)
	cmd := &cobra.Command{
		Use:   "bookie",
		Short: "Run a bookie: a ledger storage node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			var err error
			if cfg.TLS, err = serverTLS.serverConfig(); err != nil {
				return err
			}
			mdTLS, err := metadataTLS.clientConfig()
			if err != nil {
				return fmt.Errorf("metadata TLS: %w", err)
			}
			return runBookie(ctx, cfg, metadataURL, mdTLS, httpAddr, storage.Config{JournalNoSync: !journalSync, JournalDir: journalDir, CopyToEntryLogs: copyToLogs, JournalBufferedWrites: buffered})
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", "./data/bookie", "directory of the ledger storage, the instance cookie and (without --metadata) the embedded metadata store")
	f.StringVar(&cfg.ListenAddr, "listen", bookie.DefaultListenAddr, "TCP address to serve the bookie protocol on")
	f.StringVar(&cfg.AdvertisedAddr, "advertised-address", "", "address clients dial (default: the listen address)")
	f.StringVar(&cfg.ID, "id", "", "bookie id (default: the advertised address)")
	f.StringVar(&cfg.Rack, "rack", "", "rack label for placement")
	f.StringVar(&cfg.Region, "region", "", "region label for placement")
	f.StringVar(&metadataURL, "metadata", "", "comma-separated etcd endpoints, https:// for TLS (default: an embedded etcd under <data-dir>/metadata)")
	metadataTLS.register(f, "metadata", "the metadata store", "https:// endpoints make the links TLS")
	serverTLS.register(f, "", "the bookie listener", "; with it the listener serves TLS only, to ledger clients with --bookie-tls-* flags")
	f.DurationVar(&cfg.SessionTTL, "session-ttl", bookie.DefaultSessionTTL, "metadata session TTL: how long after a crash the bookie's registration vanishes")
	f.BoolVar(&journalSync, "journal-sync", true, "fsync the journal before acknowledging adds")
	f.BoolVar(&copyToLogs, "copy-to-entry-logs", false, "copy every entry from the journal to the sorted entry logs at each flush (BookKeeper's layout; worth it only with --journal-dir on a device of its own: on one disk it writes every byte twice). Default: entries are read where the journal wrote them")
	f.StringVar(&httpAddr, "http-addr", "", "serve Prometheus metrics on http://<addr>/metrics (e.g. 127.0.0.1:8000; default: off)")
	f.StringVar(&journalDir, "journal-dir", "", "journal directory, ideally on a device of its own (default: <data-dir>/ledgers/journal)")
	f.BoolVar(&buffered, "journal-buffered-writes", false, journalBufferedHelp)
	cmd.AddCommand(newBookieDecommissionCommand())
	return cmd
}

func newBookieDecommissionCommand() *cobra.Command {
	var metadataURL, id, addr string
	var timeout time.Duration
	var metadataTLS, bookieTLS tlsClientFlags
	cmd := &cobra.Command{
		Use:   "decommission",
		Short: "Drain a stopped bookie: copy its ledger fragments to other bookies, then remove its cookie",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			if addr == "" {
				addr = id
			}
			mdTLS, err := metadataTLS.clientConfig()
			if err != nil {
				return fmt.Errorf("metadata TLS: %w", err)
			}
			bkTLS, err := bookieTLS.clientConfig()
			if err != nil {
				return fmt.Errorf("bookie TLS: %w", err)
			}
			md, err := etcdstore.New(ctx, etcdstore.Config{Endpoints: strings.Split(metadataURL, ","), TLS: mdTLS})
			if err != nil {
				return fmt.Errorf("connect to metadata store: %w", err)
			}
			defer md.Close()
			pool := wire.NewPool(wire.ClientConfig{TLS: bkTLS})
			defer pool.Close()
			cl, err := client.New(client.Config{Metadata: md, Dialer: client.PoolDialer{Pool: pool}})
			if err != nil {
				return err
			}
			a, err := cl.NewAuditor(client.AuditorConfig{ID: "decommission-" + id})
			if err != nil {
				return err
			}
			rep, err := a.Decommission(ctx, id, addr)
			fmt.Fprintf(os.Stderr, "decommission %s: %d closed ledgers examined, %d fragments copied (%d entries), %d open ledgers still name it\n",
				id, rep.Ledgers, rep.FragmentsRepaired, rep.EntriesCopied, len(rep.OpenLedgers))
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&metadataURL, "metadata", "", "comma-separated etcd endpoints, https:// for TLS (required)")
	metadataTLS.register(f, "metadata", "the metadata store", "https:// endpoints make the links TLS")
	bookieTLS.register(f, "bookie", "the bookies", "any --bookie-tls-* flag makes every bookie link TLS")
	f.StringVar(&id, "id", "", "id of the bookie to drain (required; it must be stopped)")
	f.StringVar(&addr, "addr", "", "address ledger metadata names the bookie by (default: the id)")
	f.DurationVar(&timeout, "timeout", 30*time.Minute, "give up after this long")
	_ = cmd.MarkFlagRequired("metadata")
	_ = cmd.MarkFlagRequired("id")
	return cmd
}

// runBookie runs a bookie until ctx ends. sc carries the storage options
// the flags set; its Dir is derived from cfg.DataDir.
func runBookie(ctx context.Context, cfg bookie.Config, metadataURL string, mdTLS *tls.Config, httpAddr string, sc storage.Config) (err error) {
	var md metadata.Store
	if metadataURL == "" {
		emb, err := etcdstore.StartEmbedded(ctx, etcdstore.EmbeddedConfig{Dir: filepath.Join(cfg.DataDir, "metadata")})
		if err != nil {
			return fmt.Errorf("start embedded metadata store: %w", err)
		}
		md = emb
	} else {
		st, err := etcdstore.New(ctx, etcdstore.Config{Endpoints: strings.Split(metadataURL, ","), TLS: mdTLS})
		if err != nil {
			return fmt.Errorf("connect to metadata store: %w", err)
		}
		md = st
	}
	defer func() { err = errors.Join(err, md.Close()) }()

	sc.Dir = filepath.Join(cfg.DataDir, "ledgers")
	st, err := storage.Open(sc)
	if err != nil {
		return fmt.Errorf("open ledger storage: %w", err)
	}
	defer func() { err = errors.Join(err, st.Close()) }()

	srv, err := bookie.New(cfg, st, md)
	if err != nil {
		return err
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	if httpAddr != "" {
		stopHTTP, err := serveBookieMetrics(httpAddr, srv, st)
		if err != nil {
			sctx, cancel := context.WithTimeout(context.Background(), bookieShutdownTimeout)
			defer cancel()
			return errors.Join(err, srv.Shutdown(sctx))
		}
		defer stopHTTP()
	}
	releaseStartupPages()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), bookieShutdownTimeout)
	defer cancel()
	return srv.Shutdown(sctx)
}

// serveBookieMetrics serves the bookie's and its storage's Prometheus series,
// with the Go runtime's and the process's, on http://addr/metrics.
func serveBookieMetrics(addr string, srv *bookie.Server, st *storage.DiskStorage) (stop func(), err error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := srv.RegisterMetrics(reg); err != nil {
		return nil, err
	}
	if err := st.RegisterMetrics(reg); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(ctx)
	}, nil
}

// journalBufferedHelp documents --journal-buffered-writes (bookie and
// standalone).
const journalBufferedHelp = "write the journal through the page cache instead of with O_DIRECT (the default where the file system allows it: no copy of every byte into the page cache)"
