package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-dev/magnetar/controlplane/apiserver"
	"github.com/magnetar-dev/magnetar/controlplane/store/sqlstore"
	"github.com/magnetar-dev/magnetar/policy"
)

func init() { subcommands = append(subcommands, newControlPlaneCommand) }

func newControlPlaneCommand() *cobra.Command {
	var cfg apiserver.Config
	var dataDir, dsn string
	cmd := &cobra.Command{
		Use:   "controlplane",
		Short: "Run the global control plane: the gRPC and REST API over a SQL store, authorized by OPA",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			if err := os.MkdirAll(dataDir, 0o700); err != nil {
				return err
			}
			if dsn == "" {
				abs, err := filepath.Abs(filepath.Join(dataDir, "controlplane.db"))
				if err != nil {
					return err
				}
				dsn = "sqlite://" + abs
			}
			if cfg.BootstrapKeyFile == "" {
				cfg.BootstrapKeyFile = filepath.Join(dataDir, "bootstrap.key")
			}
			st, err := sqlstore.Open(ctx, dsn)
			if err != nil {
				return err
			}
			defer st.Close()
			engine, err := policy.New()
			if err != nil {
				return err
			}
			cfg.Store, cfg.Authorizer = st, engine
			s, err := apiserver.New(cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "magnetar controlplane ready: http://%s (gRPC and REST)\n", s.Addr())
			releaseStartupPages()
			errc := make(chan error, 1)
			go func() { errc <- s.Serve(ctx) }()
			select {
			case err := <-errc:
				return err
			case <-ctx.Done():
			}
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := s.Shutdown(sctx); err != nil {
				return err
			}
			return <-errc
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", apiserver.DefaultListen, "address of the gRPC and REST API")
	f.StringVar(&dataDir, "data-dir", "./data/controlplane", "directory of the default SQLite store and bootstrap key")
	f.StringVar(&dsn, "store", "", "store DSN: sqlite:///path.db or postgres://... (default sqlite:///<data-dir>/controlplane.db)")
	f.StringVar(&cfg.BootstrapKeyFile, "bootstrap-key-file", "", "where the first start writes the operator API key (default <data-dir>/bootstrap.key)")
	return cmd
}
