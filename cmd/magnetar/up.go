package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-dev/magnetar/controlplane/apiserver"
	"github.com/magnetar-dev/magnetar/controlplane/issuer"
	"github.com/magnetar-dev/magnetar/regions/agent"
	"github.com/magnetar-dev/magnetar/regions/up"
)

func init() { subcommands = append(subcommands, newUpCommand) }

func newUpCommand() *cobra.Command {
	var cfg up.Config
	var disc discoveryFlags
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run the whole managed service on this machine: control plane plus an agent for regions local-a and local-b",
		Long: "Run the control plane (SQLite) and one region agent per region in this process, with clusters as local\n" +
			"processes, all under --data-dir. A development command: Ctrl-C stops everything it started, including\n" +
			"the clusters' processes, brokers first and metadata stores last (their data is kept and they come back\n" +
			"on the next `magnetar up`). A control plane without price books gets the development price book\n" +
			"(docs/billing.md), so invoices can be read at once.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			if _, err := disc.enabled(); err != nil {
				return err
			}
			cfg.Discovery, cfg.Consul = disc.mode, disc.consul
			cfg.ConsulCheckInterval, cfg.ConsulCheckTTL = disc.interval, disc.ttl
			env, err := up.Start(ctx, cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "magnetar up ready\n  REST: http://%s/v1/...\n  gRPC: %s (plaintext)\n  regions: %s\n  operator API key: %s\n",
				env.Addr(), env.Addr(), strings.Join(env.Regions(), ", "), env.KeyFile())
			for _, c := range env.ConsulAgents() {
				fmt.Fprintf(os.Stderr, "  consul datacenter %s: http://%s (CONSUL_HTTP_ADDR=%s), DNS %s, PID %d\n", c.Datacenter, c.HTTPAddr, c.HTTPAddr, c.DNSAddr, c.PID)
			}
			for _, r := range cfg.Regions {
				addr := env.FailoverAddr(r)
				for deadline := time.Now().Add(10 * time.Second); addr == "" && time.Now().Before(deadline); addr = env.FailoverAddr(r) {
					time.Sleep(50 * time.Millisecond)
				}
				if addr != "" {
					fmt.Fprintf(os.Stderr, "  failover endpoint of region %s's agent: http://%s/v1/organizations/{org}/replicationGroups/{group}/failoverTarget\n", r, addr)
				}
			}
			select {
			case <-ctx.Done():
			case <-env.Done():
			}
			sctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			return env.Shutdown(sctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", "./data/up", "directory of the control plane's store, the operator key and the regions' clusters")
	f.StringVar(&cfg.Listen, "listen", apiserver.DefaultListen, "address of the control plane's gRPC and REST API")
	f.StringSliceVar(&cfg.Regions, "regions", up.DefaultRegions, "ids of the regions to register and run")
	f.StringVar(&cfg.Binary, "binary", "", "magnetar binary to run data-plane processes with (default: this binary)")
	f.BoolVar(&cfg.AgentProcesses, "agent-processes", false, "run each region's agent as a `magnetar agent` child process (log and PID under <data-dir>/regions/<id>/), restarted when it exits, instead of in this process")
	f.DurationVar(&cfg.AgentRestartDelay, "agent-restart-delay", up.DefaultAgentRestartDelay, "with --agent-processes: time before an agent process that exited is started again")
	f.BoolVar(&cfg.InsecureDataPlanes, "insecure-data-planes", false, insecureDataPlanesHelp)
	f.BoolVar(&cfg.DataPlaneAuth, "data-plane-auth", true, dataPlaneAuthHelp)
	f.DurationVar(&cfg.AccessTokenTTL, "access-token-ttl", issuer.DefaultTokenTTL, "lifetime of access tokens: how long clients ride out a control-plane outage (revoked API keys' connections end within seconds through the revocation list brokers fetch)")
	f.DurationVar(&cfg.ReconcileInterval, "reconcile-interval", agent.DefaultReconcileInterval, "period of the agents' full reconcile (repairs crashed processes)")
	f.DurationVar(&cfg.MeteringInterval, "metering-interval", agent.DefaultMeteringInterval, "period of the agents' usage scrape of the brokers")
	disc.add(f, true)
	return cmd
}
