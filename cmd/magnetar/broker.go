package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-dev/magnetar/dataplane/brokernode"
)

func init() { subcommands = append(subcommands, newBrokerCommand) }

func newBrokerCommand() *cobra.Command {
	var cfg brokernode.Config
	var topicMetrics bool
	var idleRelease time.Duration
	var endpoints string
	var shutdownTimeout time.Duration
	var sec securityFlags
	var bookieTLS, metadataTLS, peerTLS tlsClientFlags
	var off offloadFlags
	var fns functionsFlags
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run a cluster broker: Pulsar protocol and admin API over shared bookies and an etcd metadata store",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			serverGC(idleRelease)
			cfg.MetadataEndpoints = strings.Split(endpoints, ",")
			if err := sec.apply(&cfg.Broker); err != nil {
				return err
			}
			defer sec.close()
			cfg.HTTPSAddr = sec.httpsAddr
			var err error
			if cfg.BookieTLS, err = bookieTLS.clientConfig(); err != nil {
				return fmt.Errorf("bookie TLS: %w", err)
			}
			if cfg.MetadataTLS, err = metadataTLS.clientConfig(); err != nil {
				return fmt.Errorf("metadata TLS: %w", err)
			}
			if cfg.Broker.PeerTLS, err = peerTLS.clientConfig(); err != nil {
				return fmt.Errorf("broker client TLS: %w", err)
			}
			cfg.Offload, cfg.OffloadPolicy = off.apply()
			cfg.Broker.TopicLevelMetrics = topicMetrics
			id := cfg.Broker.AdvertisedAddr
			if id == "" {
				id = cfg.Broker.BinaryAddr
			}
			if cfg.Functions, err = fns.brokerConfig(id); err != nil {
				return err
			}
			start := time.Now()
			n, err := brokernode.Start(ctx, cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "magnetar broker ready in %v: %s  admin %s\n",
				time.Since(start).Round(time.Millisecond), n.ServiceURL(), n.WebServiceURL())
			releaseStartupPages()
			<-ctx.Done()
			return shutdownNode(n, shutdownTimeout)
		},
	}
	f := cmd.Flags()
	idleReleaseFlag(f, &idleRelease)
	f.DurationVar(&shutdownTimeout, "shutdown-timeout", defaultShutdownTimeout, "on SIGTERM, how long to close topics and ledgers before giving up and exiting (unclosed ledgers are recovered by their next owner: nothing acknowledged is lost)")
	f.StringVar(&endpoints, "metadata", "", "comma-separated etcd client URLs of the metadata store (required; https:// for TLS)")
	_ = cmd.MarkFlagRequired("metadata")
	metadataTLS.register(f, "metadata", "the metadata store", "https:// endpoints make the links TLS")
	bookieTLS.register(f, "bookie", "the bookies", "any --bookie-tls-* flag makes every bookie link TLS")
	peerTLS.register(f, "broker-client", "the cluster's other brokers", "used when their admin URL is https:// (--http-addr off)")
	sec.register(f)
	off.register(f)
	fns.register(f, "")
	f.StringVar(&cfg.Broker.BinaryAddr, "broker-addr", "127.0.0.1:6650", "Pulsar binary protocol address")
	f.StringVar(&cfg.Broker.AdvertisedAddr, "advertised-address", "", "host:port clients are sent to; the broker's id (default: the bound broker address)")
	f.StringVar(&cfg.HTTPAddr, "http-addr", "127.0.0.1:8080", "admin REST API and HTTP lookup address")
	f.StringVar(&cfg.AdvertisedHTTPURL, "advertised-http-url", "", "web service URL other brokers redirect to (default: http://<bound http address>)")
	f.StringVar(&cfg.Broker.ClusterName, "cluster", "standalone", "cluster name")
	f.BoolVar(&topicMetrics, "expose-topic-level-metrics", false, "add per-topic and per-subscription series to /metrics (Pulsar's exposeTopicLevelMetricsInPrometheus); every scrape then costs work per topic")
	f.DurationVar(&cfg.Broker.SessionTTL, "session-ttl", 3*time.Second, "metadata session lease: a dead broker's bundles move after this long")
	f.IntVar(&cfg.Broker.DefaultBundles, "default-bundles", 4, "bundles of a namespace created without explicit bundles")
	f.BoolVar(&cfg.Broker.LoadShedding, "load-shedding", true, "let the elected load manager unload and split bundles")
	f.DurationVar(&cfg.Broker.LoadReportInterval, "load-report-interval", 5*time.Second, "how often the broker publishes its load report")
	f.DurationVar(&cfg.Broker.LoadManagerInterval, "load-manager-interval", 15*time.Second, "how often the elected load manager decides")
	f.IntVar(&cfg.Ensemble, "ensemble", 3, "default ensemble size of new ledgers")
	f.Int64Var(&cfg.BacklogReadRate, "backlog-read-rate", 0, "pace catch-up reads from the bookies at this many bytes/s for the whole broker, leaving CPU and disk to producers (0: unpaced, as Pulsar)")
	f.IntVar(&cfg.WriteQuorum, "write-quorum", 3, "default write quorum of new ledgers")
	f.IntVar(&cfg.AckQuorum, "ack-quorum", 2, "default ack quorum of new ledgers")
	f.IntVar(&cfg.Broker.MaxMessageSize, "max-message-size", 5<<20, "largest message accepted, in bytes")
	return cmd
}

// defaultShutdownTimeout is below the process provisioner's grace between
// SIGTERM and SIGKILL (10 s), so a broker stopped by an agent or by
// `magnetar up` exits on its own.
const defaultShutdownTimeout = 8 * time.Second

// shutdownNode shuts n down within timeout; Node.Shutdown names the step
// it gave up on.
func shutdownNode(n *brokernode.Node, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		return fmt.Errorf("shutdown (unclosed ledgers are recovered by their next owner): %w", err)
	}
	return nil
}
