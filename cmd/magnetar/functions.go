package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/magnetar-dev/magnetar/dataplane/brokernode"
	"github.com/magnetar-dev/magnetar/dataplane/functions/worker"
	"github.com/magnetar-dev/magnetar/dataplane/functions/workernode"
)

// functionsFlags configure the function worker a broker or standalone
// runs (Pulsar's functionsWorkerEnabled, on by default here).
type functionsFlags struct {
	enabled        bool
	dir            string
	javaHome       string
	maxPackageSize int64
	tokenFile      string
}

func (ff *functionsFlags) register(f *pflag.FlagSet, dirDefault string) {
	f.BoolVar(&ff.enabled, "functions-worker", true, "run a Pulsar Functions worker in the broker (functions, sources and sinks on /admin/v3); false when a separate pool (magnetar functions-worker) runs them")
	ff.registerWorker(f, dirDefault)
}

// registerWorker registers the flags of the worker itself.
func (ff *functionsFlags) registerWorker(f *pflag.FlagSet, dirDefault string) {
	f.StringVar(&ff.dir, "functions-dir", dirDefault, "the function worker's package cache, instance logs and extracted connectors")
	f.StringVar(&ff.javaHome, "functions-java-home", "", "the Java instance's home written by dataplane/functions/javainstance/setup.sh (default $MAGNETAR_FUNCTIONS_HOME, else ~/.cache/magnetar/functions-4.2.4); without one Java functions and connectors are refused")
	f.Int64Var(&ff.maxPackageSize, "functions-max-package-size", 256<<20, "largest function or connector package accepted, in bytes")
	f.StringVar(&ff.tokenFile, "functions-instance-token-file", "", "a file holding the token function instances authenticate to the brokers with, when the cluster requires authentication, read at every authentication so it can be renewed (Pulsar's worker passes its own client credentials the same way)")
}

// instanceTokenFile checks --functions-instance-token-file ("" when not set):
// instances read it at every authentication, so it may be renewed.
func (ff *functionsFlags) instanceTokenFile() (string, error) {
	if ff.tokenFile == "" {
		return "", nil
	}
	abs, err := filepath.Abs(ff.tokenFile)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(abs); err != nil {
		return "", fmt.Errorf("--functions-instance-token-file: %w", err)
	}
	return abs, nil
}

// brokerConfig returns the broker's worker configuration (nil when off).
func (ff *functionsFlags) brokerConfig(brokerAddr string) (*brokernode.FunctionsConfig, error) {
	if !ff.enabled {
		return nil, nil
	}
	tokFile, err := ff.instanceTokenFile()
	if err != nil {
		return nil, err
	}
	dir := ff.dir
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "magnetar-functions", strings.NewReplacer(":", "_", "/", "_").Replace(brokerAddr))
	}
	rt, connectors, err := worker.ResolveRuntimes(dir, ff.javaHome)
	if err != nil {
		slog.Info("functions: runtimes not available on this broker (their functions are refused with a 400 that says why)", "missing", err)
	}
	return &brokernode.FunctionsConfig{DataDir: dir, Runtimes: rt, ConnectorsDir: connectors,
		MaxPackageSize: ff.maxPackageSize, InstanceTokenFile: tokFile}, nil
}

func init() { subcommands = append(subcommands, newFunctionsWorkerCommand) }

// newFunctionsWorkerCommand is `magnetar functions-worker`: a worker of a
// separate pool (dataplane/functions/workernode).
func newFunctionsWorkerCommand() *cobra.Command {
	var cfg workernode.Config
	var fns functionsFlags
	var endpoints, tlsCA string
	var sec securityFlags
	var bookieTLS, metadataTLS, peerTLS tlsClientFlags
	cmd := &cobra.Command{
		Use:   "functions-worker",
		Short: "Run a Pulsar Functions worker of a separate pool: functions, sources and sinks for a cluster's brokers, outside them",
		Long: `Run a function worker that is not inside a broker (Pulsar's separate worker mode). It joins
the cluster's workers through the metadata store, keeps packages on the cluster's bookies,
and serves /admin/v3 (functions, sources, sinks) and /admin/v2/worker on --http-addr: point
pulsar-admin's --admin-url (or the Go and Java admin clients) at it. Its instances connect
to the brokers at --service-url. Run the brokers with --functions-worker=false so instances
run on the pool only; workers in brokers and in a pool sharing a metadata store are one pool.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
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
			id := cfg.HTTPAddr
			if id == "off" {
				id = cfg.HTTPSAddr
			}
			fns.enabled = true
			fc, err := fns.brokerConfig(id)
			if err != nil {
				return err
			}
			cfg.Functions = *fc
			cfg.Functions.TLSTrustCerts = tlsCA
			start := time.Now()
			n, err := workernode.Start(ctx, cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "magnetar functions-worker ready in %v: admin %s, instances connect to %s\n",
				time.Since(start).Round(time.Millisecond), n.URL(), cfg.ServiceURL)
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), defaultShutdownTimeout)
			defer cancel()
			return n.Shutdown(sctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&endpoints, "metadata", "", "comma-separated etcd client URLs of the cluster's metadata store (required; https:// for TLS)")
	_ = cmd.MarkFlagRequired("metadata")
	f.StringVar(&cfg.ServiceURL, "service-url", "", "the brokers' pulsar:// or pulsar+ssl:// URL the instances connect to (required)")
	_ = cmd.MarkFlagRequired("service-url")
	f.StringVar(&tlsCA, "instance-tls-trust-certs-file", "", "CA file the instances trust for a pulsar+ssl:// --service-url")
	f.StringVar(&cfg.HTTPAddr, "http-addr", "127.0.0.1:6750", "the worker's admin REST API address (Pulsar's worker port); off to serve https only")
	f.StringVar(&cfg.AdvertisedURL, "advertised-url", "", "admin URL other workers forward calls to; its host:port is the worker's id (default: http://<bound http address>)")
	f.StringVar(&cfg.BrokerAdminURL, "broker-admin-url", "", "a broker's admin URL, for deleting a deleted function's subscriptions (default: the cluster's web service URL in the metadata store)")
	f.StringVar(&cfg.Broker.ClusterName, "cluster", "standalone", "cluster name")
	f.DurationVar(&cfg.SessionTTL, "session-ttl", 3*time.Second, "metadata session lease: a dead worker's instances move to the others after this long")
	f.IntVar(&cfg.Ensemble, "ensemble", 3, "ensemble size of package ledgers")
	f.IntVar(&cfg.WriteQuorum, "write-quorum", 3, "write quorum of package ledgers")
	f.IntVar(&cfg.AckQuorum, "ack-quorum", 2, "ack quorum of package ledgers")
	metadataTLS.register(f, "metadata", "the metadata store", "https:// endpoints make the links TLS")
	bookieTLS.register(f, "bookie", "the bookies", "any --bookie-tls-* flag makes every bookie link TLS")
	peerTLS.register(f, "broker-client", "the cluster's brokers and other workers", "used when their admin URL is https://")
	sec.register(f)
	// A worker serves no Pulsar protocol: only --https-addr of the TLS listeners applies.
	_ = f.MarkHidden("tls-addr")
	_ = f.MarkHidden("advertised-tls-address")
	fns.registerWorker(f, "")
	return cmd
}
