package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-dev/magnetar/dataplane/standalone"
)

func init() { subcommands = append(subcommands, newStandaloneCommand) }

// standaloneFunctionsDir is --functions-dir's default, shown in --help.
const standaloneFunctionsDir = "<data-dir>/functions"

func newStandaloneCommand() *cobra.Command {
	var cfg standalone.Config
	var topicMetrics bool
	var idleRelease time.Duration
	var journalSync bool
	var sec securityFlags
	var off offloadFlags
	var fns functionsFlags
	cmd := &cobra.Command{
		Use:   "standalone",
		Short: "Run a whole data plane in one process: broker, bookie and embedded metadata store",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			serverGC(idleRelease)
			cfg.JournalNoSync = !journalSync
			cfg.Broker.TopicLevelMetrics = topicMetrics
			if err := sec.apply(&cfg.Broker); err != nil {
				return err
			}
			defer sec.close()
			cfg.HTTPSAddr = sec.httpsAddr
			cfg.Offload, cfg.OffloadPolicy = off.apply()
			cfg.NoFunctions, cfg.FunctionsJavaHome, cfg.FunctionsMaxPackageSize = !fns.enabled, fns.javaHome, fns.maxPackageSize
			var err error
			if cfg.FunctionsInstanceTokenFile, err = fns.instanceTokenFile(); err != nil {
				return err
			}
			if fns.dir != standaloneFunctionsDir {
				cfg.FunctionsDir = fns.dir
			}
			start := time.Now()
			s, err := standalone.Start(ctx, cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "magnetar standalone ready in %v: %s  admin %s\n",
				time.Since(start).Round(time.Millisecond), s.ServiceURL(), s.WebServiceURL())
			releaseStartupPages()
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			return s.Shutdown(sctx)
		},
	}
	f := cmd.Flags()
	idleReleaseFlag(f, &idleRelease)
	f.StringVar(&cfg.DataDir, "data-dir", "./data/standalone", "directory holding the metadata store and the bookie")
	f.StringVar(&cfg.BrokerAddr, "broker-addr", "127.0.0.1:6650", "Pulsar binary protocol address")
	f.StringVar(&cfg.HTTPAddr, "http-addr", "127.0.0.1:8080", "admin REST API and HTTP lookup address")
	f.StringVar(&cfg.BookieAddr, "bookie-addr", "127.0.0.1:3181", "embedded bookie address (keep it stable across restarts)")
	f.StringVar(&cfg.Broker.AdvertisedAddr, "advertised-address", "", "host:port clients are sent to (default: the bound broker address)")
	f.IntVar(&cfg.Broker.MaxMessageSize, "max-message-size", 5<<20, "largest message accepted, in bytes")
	f.BoolVar(&journalSync, "journal-sync", true, "fsync the bookie journal before acknowledging (durable)")
	f.Int64Var(&cfg.BacklogReadRate, "backlog-read-rate", 0, "pace catch-up reads from the bookie at this many bytes/s for the whole broker, leaving CPU and disk to producers (0: unpaced, as Pulsar)")
	f.BoolVar(&cfg.CopyToEntryLogs, "copy-to-entry-logs", false, "copy every entry from the bookie journal to the sorted entry logs at each flush (BookKeeper's layout; worth it only with --journal-dir on a device of its own). Default: entries are read where the journal wrote them")
	f.StringVar(&cfg.JournalDir, "journal-dir", "", "bookie journal directory, ideally on a device of its own (default: <data-dir>/bookie/ledgers/journal)")
	f.BoolVar(&cfg.JournalBufferedWrites, "journal-buffered-writes", false, journalBufferedHelp)
	f.StringVar(&cfg.Broker.ClusterName, "cluster", "standalone", "name of this cluster")
	f.BoolVar(&topicMetrics, "expose-topic-level-metrics", false, "add per-topic and per-subscription series to /metrics (Pulsar's exposeTopicLevelMetricsInPrometheus); every scrape then costs work per topic")
	sec.register(f)
	off.register(f)
	fns.register(f, standaloneFunctionsDir)
	return cmd
}
