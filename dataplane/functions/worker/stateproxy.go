package worker

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// StateStore says where function state lives: in the cluster's etcd,
// under Prefix, never mixed with the cluster's metadata.
//
// Java instances keep state with Pulsar's PulsarMetadataStateStoreProviderImpl,
// an etcd client of their own. They do not get the cluster's etcd: the
// worker serves them etcd's KV, Watch and Lease services on a loopback
// port, over a view of the cluster's etcd confined to Prefix (an etcd
// gRPC proxy with a namespace), so an instance can neither read nor write
// the cluster's metadata, and its watch sees state keys only. The worker's
// own state API (Python and Go instances, querystate) reads and writes the
// same keys: /state-store/<tenant>/<namespace>/<name>/<key>, counters as
// decimal text (the provider's layout).
type StateStore struct {
	Endpoints []string
	TLS       *tls.Config
	// Prefix is the etcd key prefix of all function state. Required.
	Prefix string
}

// stateBackend is a running state store: a namespaced etcd client and
// the proxy Java instances use.
type stateBackend struct {
	cli    *clientv3.Client
	kv     clientv3.KV
	srv    *grpc.Server
	addr   string
	cancel context.CancelFunc
	done   []<-chan struct{} // the proxies' ends, awaited before the client closes
}

func startState(cfg *StateStore) (*stateBackend, error) {
	if cfg.Prefix == "" {
		return nil, fmt.Errorf("worker: StateStore.Prefix is required")
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: cfg.Endpoints, TLS: cfg.TLS, DialTimeout: 10 * time.Second, Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("worker: state store: %w", err)
	}
	cli.KV = namespace.NewKV(cli.KV, cfg.Prefix)
	cli.Watcher = namespace.NewWatcher(cli.Watcher, cfg.Prefix)
	cli.Lease = namespace.NewLease(cli.Lease, cfg.Prefix)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cli.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	kvp, kvDone := grpcproxy.NewKvProxy(cli)
	wp, wDone := grpcproxy.NewWatchProxy(ctx, zap.NewNop(), cli)
	lp, lDone := grpcproxy.NewLeaseProxy(ctx, cli)
	srv := grpc.NewServer()
	pb.RegisterKVServer(srv, kvp)
	pb.RegisterWatchServer(srv, wp)
	pb.RegisterLeaseServer(srv, lp)
	go srv.Serve(ln)
	return &stateBackend{cli: cli, kv: cli.KV, srv: srv, addr: ln.Addr().String(), cancel: cancel,
		done: []<-chan struct{}{kvDone, wDone, lDone}}, nil
}

// url is the state URL Java instances get.
func (b *stateBackend) url() string { return "etcd:http://" + b.addr }

func (b *stateBackend) close() {
	b.cancel()
	b.srv.Stop()
	for _, d := range b.done {
		select {
		case <-d:
		case <-time.After(5 * time.Second):
		}
	}
	b.cli.Close()
}
