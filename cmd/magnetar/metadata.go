package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/magnetar-dev/magnetar/dataplane/metadata/etcdstore"
)

func init() {
	subcommands = append(subcommands, metadataCommand)
}

// metadataCommand runs one etcd member of the metadata store.
func metadataCommand() *cobra.Command {
	var cfg etcdstore.EmbeddedConfig
	var clientTLS, peerTLS tlsServerFlags
	cmd := &cobra.Command{
		Use:   "metadata",
		Short: "Run one member of the metadata store (embedded etcd)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			cfg.ClientTLS, cfg.PeerTLS = clientTLS.etcd(), peerTLS.etcd()
			srv, err := etcdstore.StartServer(ctx, cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "magnetar metadata: member %s serving clients on %s\n", srv.Config().Name, srv.Config().ClientURL)
			releaseStartupPages()
			select {
			case <-ctx.Done():
			case err = <-srv.Err():
				err = fmt.Errorf("%w: %v", etcdstore.ErrServerStopped, err)
			}
			return errors.Join(err, srv.Close())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Name, "name", etcdstore.DefaultName, "member name")
	f.StringVar(&cfg.Dir, "data-dir", "", "data directory (required)")
	f.StringVar(&cfg.ClientURL, "listen-client-url", "", "URL to serve clients on, https:// with --tls-cert-file (default http(s)://127.0.0.1:<free port>)")
	f.StringVar(&cfg.PeerURL, "listen-peer-url", "", "URL to serve the other members on, https:// with --peer-tls-cert-file (default http(s)://127.0.0.1:<free port>)")
	clientTLS.register(f, "", "the client listener", "")
	peerTLS.register(f, "peer-", "the peer listener", "; also this member's client certificate towards the other members")
	f.StringVar(&cfg.InitialCluster, "initial-cluster", "", `members of a new cluster, "n1=http://host:port,n2=..." (default: this member alone)`)
	f.StringVar(&cfg.ClusterState, "initial-cluster-state", etcdstore.ClusterStateNew, "new to bootstrap a cluster, existing to join one")
	_ = cmd.MarkFlagRequired("data-dir")
	return cmd
}
