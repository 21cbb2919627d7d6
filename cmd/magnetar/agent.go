package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-dev/magnetar/regions/agent"
	"github.com/magnetar-dev/magnetar/regions/provisioner/process"
)

func init() { subcommands = append(subcommands, newAgentCommand) }

func newAgentCommand() *cobra.Command {
	var cfg agent.Config
	var pcfg process.Config
	var keyFile string
	var metering bool
	var disc discoveryFlags
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run a region agent: pull the region's desired state from the control plane and run its clusters as local processes",
		Long: "Run a region agent. Clusters run as local magnetar processes under <data-dir>/clusters; they keep\n" +
			"running when the agent stops (a restarted agent adopts them).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			raw, err := os.ReadFile(keyFile)
			if err != nil {
				return fmt.Errorf("read --api-key-file: %w", err)
			}
			if cfg.APIKey = strings.TrimSpace(string(raw)); cfg.APIKey == "" {
				return errors.New("--api-key-file is empty")
			}
			prov, err := process.New(pcfg)
			if err != nil {
				return err
			}
			defer prov.Close() // leaves the data plane running
			cfg.Provisioner = prov
			cfg.PulsarClusterName = process.PulsarClusterName
			if metering {
				cfg.MeteringDir = filepath.Join(pcfg.DataDir, "metering")
			}
			cfg.PeerCredentialsDir = filepath.Join(pcfg.DataDir, "peers")
			if cfg.FailoverListen != "" {
				cfg.FailoverCacheFile = filepath.Join(pcfg.DataDir, "failover-cache.json")
				cfg.FailoverAddrFile = filepath.Join(pcfg.DataDir, agent.FailoverAddrFileName)
			}
			if cfg.Consul, err = disc.registrar(); err != nil {
				return err
			}
			a, err := agent.New(cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "magnetar agent: region %s, control plane %s, clusters under %s\n", cfg.Region, cfg.ControlPlaneURL, pcfg.DataDir)
			return a.Run(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Region, "region", "", `region this agent runs ("regions/NAME" or NAME; required)`)
	f.StringVar(&cfg.ControlPlaneURL, "control-plane", "http://"+"127.0.0.1:7080", "control plane URL: http://host:port (plaintext gRPC) or https://host:port")
	f.StringVar(&keyFile, "api-key-file", "", "file holding an operator API key (required)")
	f.StringVar(&pcfg.DataDir, "data-dir", "./data/agent", "directory of the clusters' processes and data")
	f.StringVar(&pcfg.Binary, "binary", "", "magnetar binary to run data-plane processes with (default: this binary)")
	f.DurationVar(&cfg.PollTimeout, "poll-timeout", agent.DefaultPollTimeout, "long-poll timeout of the desired-state watch")
	f.DurationVar(&cfg.ReconcileInterval, "reconcile-interval", agent.DefaultReconcileInterval, "period of the full reconcile (repairs crashed processes)")
	f.BoolVar(&metering, "metering", true, "meter the clusters' usage (state under <data-dir>/metering) and send it to the control plane")
	f.DurationVar(&cfg.MeteringInterval, "metering-interval", agent.DefaultMeteringInterval, "period of the brokers' usage scrape")
	f.StringVar(&cfg.FailoverListen, "failover-listen", "", "serve the replication groups' failover endpoint here too, answering from its cache while the control plane is down (e.g. 127.0.0.1:7090; port 0 picks one, written to <data-dir>/failover.addr; empty: off)")
	f.BoolVar(&pcfg.InsecureDataPlanes, "insecure-data-planes", false, insecureDataPlanesHelp)
	f.BoolVar(&cfg.DataPlaneAuth, "data-plane-auth", true, dataPlaneAuthHelp)
	f.DurationVar(&pcfg.StopGrace, "stop-grace", 10*time.Second, "time between SIGTERM and SIGKILL when stopping a process")
	// Tiered storage of every cluster the agent runs: one bucket, a prefix
	// per cluster; the brokers take credentials from the agent's
	// environment (the standard AWS chain).
	f.StringVar(&pcfg.Offload.Driver, "managed-ledger-offload-driver", "", "tiered storage driver of the clusters' brokers: aws-s3 or s3")
	f.StringVar(&pcfg.Offload.Bucket, "s3-managed-ledger-offload-bucket", "", "bucket the clusters offload closed ledgers to, each under <prefix><org>/<cluster>/ (empty: no tiered storage)")
	f.StringVar(&pcfg.Offload.Region, "s3-managed-ledger-offload-region", "", "region of the offload bucket")
	f.StringVar(&pcfg.Offload.Endpoint, "s3-managed-ledger-offload-service-endpoint", "", "URL of an S3-compatible store")
	f.StringVar(&pcfg.Offload.Prefix, "managed-ledger-offload-prefix", "", "prefix before each cluster's <org>/<cluster>/ in the bucket")
	disc.add(f, true)
	_ = cmd.MarkFlagRequired("region")
	_ = cmd.MarkFlagRequired("api-key-file")
	return cmd
}

// dataPlaneAuthHelp documents --data-plane-auth (agent and up).
const dataPlaneAuthHelp = "provision clusters whose brokers authenticate every client with the control plane's OAuth2 tokens (audience urn:magnetar:cluster:<org>/<cluster> or urn:magnetar:organization:<org>) and authorize it, the agent being their superuser, and turn role bindings into Pulsar permissions; --data-plane-auth=false: brokers accept anonymous clients (development only)"

// insecureDataPlanesHelp documents --insecure-data-planes (agent and up).
const insecureDataPlanesHelp = "development only: run the clusters without TLS between their brokers, bookies and metadata store and without TLS listeners on the brokers (default: mutual TLS inside every cluster with certificates of the region CA under <data-dir>/ca, and pulsar+ssl:// and https:// beside the plain listeners)"
