package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-dev/magnetar/controlplane/apiserver"
	"github.com/magnetar-dev/magnetar/controlplane/issuer"
	"github.com/magnetar-dev/magnetar/controlplane/store/sqlstore"
	"github.com/magnetar-dev/magnetar/policy"
	"github.com/magnetar-dev/magnetar/regions/discovery/consul"
)

func init() { subcommands = append(subcommands, newControlPlaneCommand) }

func newControlPlaneCommand() *cobra.Command {
	var cfg apiserver.Config
	var dataDir, dsn string
	var disc discoveryFlags
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
			if on, err := disc.enabled(); err != nil {
				return err
			} else if on {
				w, err := consul.NewWatcher(consul.WatcherConfig{Consul: disc.consul})
				if err != nil {
					return err
				}
				w.Start()
				defer w.Shutdown(context.Background())
				cfg.Discovery = w
			}
			s, err := apiserver.New(cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "magnetar controlplane ready: http://%s (gRPC and REST), token issuer %s\n", s.Addr(), s.IssuerURL())
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
	f.StringVar(&cfg.IssuerURL, "issuer-url", "", "OAuth2/OIDC issuer URL of the access tokens this control plane issues: the URL clients and brokers reach it at (default http://<listen address>)")
	f.DurationVar(&cfg.AccessTokenTTL, "access-token-ttl", issuer.DefaultTokenTTL, "lifetime of access tokens: how long clients ride out a control-plane outage (revoked API keys' connections end within seconds through the revocation list brokers fetch)")
	f.StringVar(&cfg.SigningAlg, "token-signing-alg", issuer.DefaultAlg, "algorithm of new token signing keys: ES256 or RS256")
	f.DurationVar(&cfg.SigningKeyRotation, "signing-key-rotation", issuer.DefaultRotation, "age at which the token signing key is replaced by a new one")
	f.DurationVar(&cfg.SigningKeyGrace, "signing-key-grace", issuer.DefaultGrace, "how long a replaced signing key stays in the JWKS")
	f.StringArrayVar(&cfg.TokenAudiences, "token-audience", nil, "an audience, besides this control plane and its clusters, the token endpoint issues tokens for (repeatable)")
	disc.add(f, false)
	return cmd
}
