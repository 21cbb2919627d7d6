// Package workernode assembles a function worker of a separate pool
// (`magnetar functions-worker`, Pulsar's "functions worker as a separate
// process" mode): a worker that is not inside a broker but joins the
// cluster's workers through its metadata store, stores packages on its
// bookies, and serves /admin/v3 (functions, sources, sinks) and
// /admin/v2/worker on its own admin port. Its instances connect to the
// cluster's brokers like any client.
//
// The worker shares the brokers' rules without running a broker: a
// broker.Service that is never started answers the metadata-backed
// questions (tenants and namespaces, authentication and authorization, the
// cluster's internal credential for calls between workers, the usage
// counters function seconds are metered into, served at
// /magnetar/v1/usage). Deleting a function's subscriptions, the one thing
// only a topic's owner can do, goes to the brokers' admin API.
//
// Workers in brokers and workers of a pool that share a metadata store are
// one pool to the scheduler; run the brokers with --functions-worker=false
// to keep instances off them.
package workernode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/admin"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/client"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
	"github.com/magnetar-dev/magnetar/dataplane/broker"
	"github.com/magnetar-dev/magnetar/dataplane/brokernode"
	"github.com/magnetar-dev/magnetar/dataplane/functions/worker"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/etcdstore"
)

// Config configures a worker of a separate pool.
type Config struct {
	// MetadataEndpoints are the cluster's etcd client URLs. Required.
	MetadataEndpoints []string
	MetadataTLS       *tls.Config
	// BookieTLS secures the links to the bookies packages are stored on.
	BookieTLS *tls.Config
	// Broker carries what the worker shares with the cluster's brokers:
	// ClusterName, Authenticator, Authorizer, PeerTLS (for calls to other
	// workers and brokers over https://), TLSConfig (for HTTPSAddr).
	// Its addresses are not listened on.
	Broker broker.Config
	// HTTPAddr serves the worker's admin API ("off": HTTPSAddr only).
	// Default 127.0.0.1:6750 (Pulsar's worker port).
	HTTPAddr string
	// HTTPSAddr serves it over TLS too (Broker.TLSConfig).
	HTTPSAddr string
	// AdvertisedURL is the admin URL other workers forward calls to
	// (default: the bound address; https:// when only HTTPSAddr is set).
	// Its host:port is the worker's id in assignments.
	AdvertisedURL string
	// ServiceURL is the brokers' pulsar:// or pulsar+ssl:// URL instances
	// connect to. Required.
	ServiceURL string
	// BrokerAdminURL is a broker's admin URL, for deleting subscriptions
	// (default: the cluster's web service URL in the metadata store).
	BrokerAdminURL string
	// Functions configures the worker itself.
	Functions brokernode.FunctionsConfig
	// Ensemble, WriteQuorum and AckQuorum place package ledgers. Default
	// 3/3/2, as the brokers'.
	Ensemble, WriteQuorum, AckQuorum int
	// SessionTTL is the metadata session of the worker's membership: its
	// instances move to other workers this long after it dies. Default 3s,
	// the brokers' default.
	SessionTTL time.Duration
	Logger     *slog.Logger
}

// Node is a running worker of a separate pool.
type Node struct {
	cfg     Config
	md      *etcdstore.Store
	pool    *wire.Pool
	client  *client.Client
	svc     *broker.Service
	worker  *worker.Worker
	http    *http.Server
	lns     []net.Listener
	url     string
	wg      sync.WaitGroup
	stopped sync.Once
}

// Start connects to the cluster and starts the worker.
func Start(ctx context.Context, cfg Config) (_ *Node, err error) {
	if len(cfg.MetadataEndpoints) == 0 {
		return nil, errors.New("workernode: MetadataEndpoints are required")
	}
	if cfg.ServiceURL == "" {
		return nil, errors.New("workernode: ServiceURL (the brokers' pulsar:// URL) is required")
	}
	if cfg.Functions.DataDir == "" {
		return nil, errors.New("workernode: Functions.DataDir is required")
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:6750"
	}
	if cfg.Ensemble == 0 {
		cfg.Ensemble, cfg.WriteQuorum, cfg.AckQuorum = 3, 3, 2
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 3 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	n := &Node{cfg: cfg}
	defer func() {
		if err != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			n.Shutdown(sctx)
			cancel()
		}
	}()
	var httpLn, httpsLn net.Listener
	if cfg.HTTPAddr != "off" {
		if httpLn, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return nil, fmt.Errorf("workernode: http listen: %w", err)
		}
		n.lns = append(n.lns, httpLn)
	}
	if cfg.HTTPSAddr != "" {
		if cfg.Broker.TLSConfig == nil {
			return nil, errors.New("workernode: HTTPSAddr needs Broker.TLSConfig")
		}
		if httpsLn, err = net.Listen("tcp", cfg.HTTPSAddr); err != nil {
			return nil, fmt.Errorf("workernode: https listen: %w", err)
		}
		n.lns = append(n.lns, httpsLn)
	}
	if len(n.lns) == 0 {
		return nil, errors.New("workernode: HTTPAddr off needs an HTTPSAddr")
	}
	n.url = cfg.AdvertisedURL
	if n.url == "" {
		if httpLn != nil {
			n.url = "http://" + httpLn.Addr().String()
		} else {
			n.url = "https://" + httpsLn.Addr().String()
		}
	}
	u, err := url.Parse(n.url)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("workernode: advertised URL %q is not an http(s) URL", n.url)
	}
	id := u.Host
	if u.Port() == "" {
		id = net.JoinHostPort(u.Hostname(), map[bool]string{true: "443", false: "80"}[u.Scheme == "https"])
	}

	if n.md, err = etcdstore.New(ctx, etcdstore.Config{Endpoints: cfg.MetadataEndpoints, TLS: cfg.MetadataTLS}); err != nil {
		return nil, fmt.Errorf("workernode: metadata store: %w", err)
	}
	n.pool = wire.NewPool(wire.ClientConfig{TLS: cfg.BookieTLS})
	if n.client, err = client.New(client.Config{Metadata: n.md, Dialer: client.PoolDialer{Pool: n.pool}, Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	// The never-started broker: its id (the subject of internal
	// credentials) is the worker's; it listens on nothing.
	bcfg := cfg.Broker
	bcfg.BinaryAddr, bcfg.TLSAddr, bcfg.AdvertisedAddr, bcfg.AdvertisedTLSAddr = id, "", id, ""
	bcfg.WebServiceURL = n.url
	if bcfg.Logger == nil {
		bcfg.Logger = cfg.Logger
	}
	if n.svc, err = broker.New(bcfg, n.md, nil); err != nil {
		return nil, fmt.Errorf("workernode: %w", err)
	}
	fc := cfg.Functions
	if n.worker, err = worker.New(worker.Config{
		Metadata: n.md, Broker: n.svc, ID: id, URL: n.url, ServiceURL: cfg.ServiceURL, DataDir: fc.DataDir,
		Subscriptions: &adminSubscriptions{svc: n.svc, adminURL: cfg.BrokerAdminURL},
		Packages: &worker.LedgerPackages{MD: n.md, Client: n.client, Root: "/functions/packages",
			Ensemble: cfg.Ensemble, WriteQuorum: cfg.WriteQuorum, AckQuorum: cfg.AckQuorum},
		Runtimes: fc.Runtimes, ConnectorsDir: fc.ConnectorsDir, State: n.functionState(),
		InstanceToken: fc.InstanceToken, InstanceTokenFile: fc.InstanceTokenFile, TLSTrustCerts: fc.TLSTrustCerts,
		MaxPackageSize: fc.MaxPackageSize, SessionTTL: cfg.SessionTTL, Logger: cfg.Logger,
	}); err != nil {
		return nil, fmt.Errorf("workernode: %w", err)
	}
	if err = n.worker.RegisterMetrics(n.svc.Metrics()); err != nil {
		return nil, fmt.Errorf("workernode: metrics: %w", err)
	}
	n.http = &http.Server{
		Handler:           admin.NewHandler(admin.Config{WebServiceURL: n.url, Functions: n.worker, FunctionsOnly: true, Logger: cfg.Logger}, n.svc),
		ReadHeaderTimeout: 10 * time.Second,
	}
	for _, ln := range n.lns {
		if ln == httpsLn {
			ln = tls.NewListener(ln, cfg.Broker.TLSConfig)
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := n.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				cfg.Logger.Error("functions worker http server failed", "err", err)
			}
		}()
	}
	n.worker.Start()
	return n, nil
}

// functionState keeps function state in the cluster's etcd, where the
// brokers' workers keep it (Functions.State overrides).
func (n *Node) functionState() *worker.StateStore {
	if st := n.cfg.Functions.State; st != nil {
		return st
	}
	return &worker.StateStore{Endpoints: n.cfg.MetadataEndpoints, TLS: n.cfg.MetadataTLS, Prefix: n.md.Prefix() + "/functions/state"}
}

// URL is the worker's admin URL.
func (n *Node) URL() string { return n.url }

// Worker returns the function worker.
func (n *Node) Worker() *worker.Worker { return n.worker }

// Shutdown stops the instances, the admin API and the clients.
func (n *Node) Shutdown(ctx context.Context) error {
	var errs []error
	n.stopped.Do(func() {
		if n.worker != nil {
			errs = append(errs, n.worker.Shutdown(ctx))
		}
		if n.http != nil {
			errs = append(errs, n.http.Shutdown(ctx))
		} else {
			for _, ln := range n.lns {
				ln.Close()
			}
		}
		n.wg.Wait()
		if n.pool != nil {
			n.pool.Close()
		}
		if n.md != nil {
			errs = append(errs, n.md.Close())
		}
	})
	return errors.Join(errs...)
}

// adminSubscriptions deletes subscriptions through the brokers' admin
// API, signed with the cluster's internal credential (a broker redirects
// the call to the topic's owner).
type adminSubscriptions struct {
	svc      *broker.Service
	adminURL string
}

func (a *adminSubscriptions) DeleteSubscription(ctx context.Context, t broker.TopicName, name string, force bool) error {
	base := a.adminURL
	if base == "" {
		cd, err := a.svc.Resources().GetCluster(ctx, a.svc.Config().ClusterName)
		if err != nil {
			return fmt.Errorf("finding the brokers' admin URL: %w", err)
		}
		if base = cd.ServiceURL; base == "" {
			base = cd.ServiceURLTLS
		}
		if base == "" {
			return fmt.Errorf("cluster %s has no web service URL in the metadata store", a.svc.Config().ClusterName)
		}
	}
	u := fmt.Sprintf("%s/admin/v2/%s/%s/%s/%s/subscription/%s?force=%t", base, t.Domain,
		url.PathEscape(t.Tenant), url.PathEscape(t.Namespace), url.PathEscape(t.Local), url.PathEscape(name), force)
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, u, nil)
	if err != nil {
		return err
	}
	if err := a.svc.SignInternal(req); err != nil {
		return err
	}
	resp, err := a.svc.PeerHTTPClient().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode < 300:
		return nil
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%w: subscription %s of %s", broker.ErrNotFound, name, t)
	}
	var body [512]byte
	k, _ := resp.Body.Read(body[:])
	return fmt.Errorf("deleting subscription %s of %s: %s: %s", name, t, resp.Status, body[:k])
}
