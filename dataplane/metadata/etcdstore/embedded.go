package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
	"github.com/magnetar-dev/magnetar/internal/freeport"
)

// Raft timings of a member that starts alone. A lone member is its own
// quorum: its leadership never lapses, and the election timeout only
// matters at start, where etcd fast-forwards all but one tick of it and
// raft then waits a random 1 to ElectionTimeout/HeartbeatInterval ticks
// more. At etcd's defaults (100ms, 1s) that made a standalone's start
// take 0.2-1.1 s; at these, 50-250 ms. A heartbeat tick every 50 ms
// costs nothing measurable at idle.
const (
	LoneHeartbeatInterval = 50 * time.Millisecond
	LoneElectionTimeout   = 250 * time.Millisecond
)

// Embedded server defaults. They keep a standalone node small: a short raft
// log in memory, a bounded database and hourly compaction of old revisions.
const (
	DefaultName                    = "magnetar"
	DefaultClusterToken            = "magnetar-metadata"
	DefaultSnapshotCount           = 5000
	DefaultCatchUpEntries          = 1000
	LoneCatchUpEntries             = 100
	DefaultQuotaBackendBytes       = 1 << 30 // 1 GiB
	DefaultAutoCompactionRetention = time.Hour
)

// Cluster states of EmbeddedConfig.ClusterState.
const (
	ClusterStateNew      = "new"
	ClusterStateExisting = "existing"
)

// EmbeddedConfig configures one etcd member run inside the process.
type EmbeddedConfig struct {
	// Dir is the data directory. Required.
	Dir string
	// Name is the member name. Default DefaultName.
	Name string
	// ClientURL is the URL clients connect to ("http://127.0.0.1:2379").
	// Default: 127.0.0.1 with a free port.
	ClientURL string
	// PeerURL is the URL the other members connect to. Default: 127.0.0.1
	// with a free port.
	PeerURL string
	// InitialCluster lists every member of a new cluster as
	// "name=peerURL,...". Default: this member alone.
	InitialCluster string
	// ClusterState is ClusterStateNew (default) to bootstrap a cluster, or
	// ClusterStateExisting to join one. Ignored once Dir holds data.
	ClusterState string
	// ClusterToken tells clusters bootstrapped with the same members apart.
	// Default DefaultClusterToken.
	ClusterToken string
	// SnapshotCount is how many applied raft entries trigger a snapshot
	// (and bound the raft log kept in memory). Default DefaultSnapshotCount.
	SnapshotCount uint64
	// CatchUpEntries is how many applied raft entries the member keeps in
	// memory for followers that fall behind; one further behind is sent a
	// snapshot. The store batches concurrent writes into one entry
	// (batch.go), so an entry may hold up to 64 writes and the entries
	// kept, not their number, are what costs memory: at etcd's 5,000, a
	// run of 20,000 topic creations kept ~500 bytes per topic. Default
	// DefaultCatchUpEntries, and LoneCatchUpEntries for a member that
	// starts alone (it has no follower; one added later gets a snapshot).
	CatchUpEntries uint64
	// QuotaBackendBytes bounds the database size. Default
	// DefaultQuotaBackendBytes.
	QuotaBackendBytes int64
	// AutoCompactionRetention is how long history is kept for watches;
	// older revisions are compacted periodically. Default
	// DefaultAutoCompactionRetention; negative disables compaction.
	AutoCompactionRetention time.Duration
	// HeartbeatInterval and ElectionTimeout are raft's timings. Defaults
	// 100ms and 1s (etcd's) for a member of a multi-member initial
	// cluster; LoneHeartbeatInterval and LoneElectionTimeout for a member
	// that starts alone (the standalone's). The lease TTL floor is 1.5
	// election timeouts. Give them explicitly for a lone member that others
	// will join at run time.
	HeartbeatInterval, ElectionTimeout time.Duration
	// ClientTLS, when its CertFile is set, serves clients over TLS: the
	// ClientURL must then be https:// (the default one is). PeerTLS does
	// the same for the other members and the PeerURL. etcd reads the
	// certificate and key at every handshake (they rotate without a
	// restart) and the trust file once, at start.
	ClientTLS, PeerTLS ServerTLS
	// UnsafeNoFsync skips fsync: only for tests, a crash can lose data.
	UnsafeNoFsync bool
	// Prefix is the key prefix of the Store of StartEmbedded (see Config).
	Prefix string
	// Logger receives the server's logs. Default: errors only, to stderr.
	Logger *zap.Logger

	// maxTxnOps, when set, replaces etcd's limit of operations per
	// transaction level (tests of write batching).
	maxTxnOps uint
}

// ServerTLS names the certificate files of an etcd member's listener.
type ServerTLS struct {
	// CertFile and KeyFile are the member's certificate and key (PEM).
	// Empty CertFile: no TLS. For peers the same pair is the member's
	// client certificate when it connects to the others.
	CertFile, KeyFile string
	// TrustFile holds the CA certificates client (or peer) certificates
	// are verified against.
	TrustFile string
	// ClientCertAuth refuses connections without a certificate signed by
	// a CA of TrustFile.
	ClientCertAuth bool
}

func (t ServerTLS) enabled() bool { return t.CertFile != "" }

func (t ServerTLS) validate(what, u string) error {
	if !t.enabled() {
		if t.KeyFile != "" || t.TrustFile != "" || t.ClientCertAuth {
			return fmt.Errorf("%w: %s TLS without a certificate file", ErrBadConfig, what)
		}
		if strings.HasPrefix(u, "https://") {
			return fmt.Errorf("%w: %s URL %s needs a TLS certificate", ErrBadConfig, what, u)
		}
		return nil
	}
	if t.KeyFile == "" {
		return fmt.Errorf("%w: %s TLS certificate without a key file", ErrBadConfig, what)
	}
	if t.ClientCertAuth && t.TrustFile == "" {
		return fmt.Errorf("%w: %s client certificate authentication needs a trust file", ErrBadConfig, what)
	}
	if u != "" && !strings.HasPrefix(u, "https://") {
		return fmt.Errorf("%w: %s URL %s must be https:// to serve TLS", ErrBadConfig, what, u)
	}
	return nil
}

func (t ServerTLS) info() transport.TLSInfo {
	return transport.TLSInfo{CertFile: t.CertFile, KeyFile: t.KeyFile, TrustedCAFile: t.TrustFile, ClientCertAuth: t.ClientCertAuth}
}

// Validate reports whether the config is usable.
func (c EmbeddedConfig) Validate() error {
	if c.Dir == "" {
		return fmt.Errorf("%w: no data dir", ErrBadConfig)
	}
	for _, u := range []string{c.ClientURL, c.PeerURL} {
		if u == "" {
			continue
		}
		if _, err := url.Parse(u); err != nil {
			return fmt.Errorf("%w: url %q: %w", ErrBadConfig, u, err)
		}
	}
	if err := c.ClientTLS.validate("client", c.ClientURL); err != nil {
		return err
	}
	if err := c.PeerTLS.validate("peer", c.PeerURL); err != nil {
		return err
	}
	switch c.ClusterState {
	case "", ClusterStateNew, ClusterStateExisting:
	default:
		return fmt.Errorf("%w: cluster state %q, want %q or %q", ErrBadConfig, c.ClusterState, ClusterStateNew, ClusterStateExisting)
	}
	if c.InitialCluster != "" {
		name := c.Name
		if name == "" {
			name = DefaultName
		}
		found := false
		for _, m := range strings.Split(c.InitialCluster, ",") {
			n, u, ok := strings.Cut(m, "=")
			if !ok || n == "" || u == "" {
				return fmt.Errorf("%w: initial cluster member %q is not name=url", ErrBadConfig, m)
			}
			found = found || n == name
		}
		if !found {
			return fmt.Errorf("%w: initial cluster %q lacks member %q", ErrBadConfig, c.InitialCluster, name)
		}
	}
	if c.HeartbeatInterval < 0 || c.ElectionTimeout < 0 {
		return fmt.Errorf("%w: negative raft timing", ErrBadConfig)
	}
	if c.HeartbeatInterval > 0 && c.ElectionTimeout > 0 && c.ElectionTimeout < 5*c.HeartbeatInterval {
		return fmt.Errorf("%w: election timeout %v under 5 heartbeats of %v", ErrBadConfig, c.ElectionTimeout, c.HeartbeatInterval)
	}
	if c.QuotaBackendBytes < 0 {
		return fmt.Errorf("%w: negative QuotaBackendBytes", ErrBadConfig)
	}
	if c.Prefix != "" {
		if err := (Config{Endpoints: []string{"x"}, Prefix: c.Prefix}).Validate(); err != nil {
			return err
		}
	}
	return nil
}

// withDefaults fills defaults, choosing free loopback ports for absent URLs.
func (c EmbeddedConfig) withDefaults() (EmbeddedConfig, error) {
	if c.Name == "" {
		c.Name = DefaultName
	}
	for _, u := range []struct {
		url *string
		tls bool
	}{{&c.ClientURL, c.ClientTLS.enabled()}, {&c.PeerURL, c.PeerTLS.enabled()}} {
		if *u.url != "" {
			continue
		}
		p, err := pickPort()
		if err != nil {
			return c, err
		}
		scheme := "http://"
		if u.tls {
			scheme = "https://"
		}
		*u.url = scheme + "127.0.0.1:" + strconv.Itoa(p)
	}
	if c.InitialCluster == "" {
		c.InitialCluster = c.Name + "=" + c.PeerURL
	}
	alone := !strings.Contains(c.InitialCluster, ",")
	if c.HeartbeatInterval == 0 && c.ElectionTimeout == 0 && alone {
		c.HeartbeatInterval, c.ElectionTimeout = LoneHeartbeatInterval, LoneElectionTimeout
	}
	if c.CatchUpEntries == 0 {
		c.CatchUpEntries = DefaultCatchUpEntries
		if alone {
			c.CatchUpEntries = LoneCatchUpEntries
		}
	}
	if c.ClusterState == "" {
		c.ClusterState = ClusterStateNew
	}
	if c.ClusterToken == "" {
		c.ClusterToken = DefaultClusterToken
	}
	if c.SnapshotCount == 0 {
		c.SnapshotCount = DefaultSnapshotCount
	}
	if c.QuotaBackendBytes == 0 {
		c.QuotaBackendBytes = DefaultQuotaBackendBytes
	}
	if c.AutoCompactionRetention == 0 {
		c.AutoCompactionRetention = DefaultAutoCompactionRetention
	}
	if c.Logger == nil {
		c.Logger = errorLogger()
	}
	return c, nil
}

// pickPort chooses the ports of absent URLs (outside the kernel's
// ephemeral range: package freeport); tests replace it.
var pickPort = freeport.Port

func (c EmbeddedConfig) etcdConfig() (*embed.Config, error) {
	ec := embed.NewConfig()
	ec.Name = c.Name
	ec.Dir = c.Dir
	cu, err := url.Parse(c.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("%w: client url: %w", ErrBadConfig, err)
	}
	pu, err := url.Parse(c.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("%w: peer url: %w", ErrBadConfig, err)
	}
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	if c.ClientTLS.enabled() {
		ec.ClientTLSInfo = c.ClientTLS.info()
	}
	if c.PeerTLS.enabled() {
		ec.PeerTLSInfo = c.PeerTLS.info()
	}
	ec.InitialCluster = c.InitialCluster
	ec.ClusterState = c.ClusterState
	ec.InitialClusterToken = c.ClusterToken
	ec.SnapshotCount = c.SnapshotCount
	ec.SnapshotCatchUpEntries = min(c.CatchUpEntries, c.SnapshotCount)
	ec.QuotaBackendBytes = c.QuotaBackendBytes
	if c.AutoCompactionRetention > 0 {
		ec.AutoCompactionMode = "periodic"
		ec.AutoCompactionRetention = c.AutoCompactionRetention.String()
	} else {
		ec.AutoCompactionRetention = "0"
	}
	if c.HeartbeatInterval > 0 {
		ec.TickMs = uint(max(c.HeartbeatInterval.Milliseconds(), 1))
	}
	if c.ElectionTimeout > 0 {
		ec.ElectionMs = uint(max(c.ElectionTimeout.Milliseconds(), 1))
	}
	ec.UnsafeNoFsync = c.UnsafeNoFsync
	if c.maxTxnOps > 0 {
		ec.MaxTxnOps = c.maxTxnOps
	}
	ec.EnableGRPCGateway = false
	return ec, nil
}

// quietCore drops every log entry below fatal while the server shuts down
// (etcd reports its own closed listeners as errors), and always drops
// benignStartupError.
type quietCore struct {
	zapcore.Core
	closing *atomic.Bool
}

func (c quietCore) With(f []zapcore.Field) zapcore.Core { return quietCore{c.Core.With(f), c.closing} }

func (c quietCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.closing.Load() && e.Level < zapcore.FatalLevel || e.Message == benignStartupError {
		return ce
	}
	return c.Core.Check(e, ce)
}

// benignStartupError is what etcd's storage-version monitor logs, as an
// error, when it runs on a new member before the first raft term is on disk
// ("missing term information"); it tries again a few seconds later and
// succeeds. With a lone member's short election timeout the race is won
// about one start in three.
const benignStartupError = "failed to update storage version"

// Server is one etcd member run inside the process, without a client. The
// `magnetar metadata` command runs one; StartEmbedded pairs one with a
// Store.
type Server struct {
	cfg     EmbeddedConfig
	closing atomic.Bool // silences etcd's complaints about its own shutdown

	mu   sync.Mutex
	etcd *embed.Etcd // nil while stopped
}

// StartServer starts an etcd member and waits until it serves clients, which
// for a new multi-member cluster means until a quorum of members is up.
func StartServer(ctx context.Context, cfg EmbeddedConfig) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Ports this function picks were free a moment before etcd binds them;
	// another process can take one in between (seen in CI). Only then is
	// the start tried again with new ports: the listeners are bound before
	// etcd writes anything to the data directory.
	const attempts = 5
	picked := cfg.ClientURL == "" || cfg.PeerURL == ""
	for i := 1; ; i++ {
		full, err := cfg.withDefaults()
		if err != nil {
			return nil, err
		}
		srv := &Server{cfg: full}
		err = srv.start(ctx)
		if err == nil {
			return srv, nil
		}
		if !picked || i == attempts || !addrInUse(err) || ctx.Err() != nil {
			return nil, err
		}
	}
}

// addrInUse reports whether err is a failure to bind a port another
// socket holds. etcd does not always keep the syscall error in the chain,
// so the message is checked too.
func addrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}

func (srv *Server) start(ctx context.Context) error {
	ec, err := srv.cfg.etcdConfig()
	if err != nil {
		return err
	}
	srv.closing.Store(false)
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(srv.cfg.Logger.WithOptions(
		zap.WrapCore(func(c zapcore.Core) zapcore.Core { return quietCore{c, &srv.closing} })))
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return fmt.Errorf("etcdstore: start etcd %s: %w", srv.cfg.Name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		srv.closing.Store(true)
		e.Close()
		return fmt.Errorf("etcdstore: etcd %s failed to start: %w", srv.cfg.Name, err)
	case <-ctx.Done():
		srv.closing.Store(true)
		e.Close()
		return fmt.Errorf("etcdstore: start etcd %s: %w", srv.cfg.Name, ctx.Err())
	}
	srv.mu.Lock()
	srv.etcd = e
	srv.mu.Unlock()
	return nil
}

// Config returns the server's configuration with defaults filled in.
func (srv *Server) Config() EmbeddedConfig { return srv.cfg }

// ClientURLs returns the URLs clients connect to.
func (srv *Server) ClientURLs() []string { return []string{srv.cfg.ClientURL} }

// Err reports a failure of the running server (nil channel while stopped).
func (srv *Server) Err() <-chan error {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.etcd == nil {
		return nil
	}
	return srv.etcd.Err()
}

// Close stops the server. Clients still connected are cut off after etcd's
// request timeout. It is idempotent.
func (srv *Server) Close() error {
	srv.mu.Lock()
	e := srv.etcd
	srv.etcd = nil
	srv.mu.Unlock()
	if e != nil {
		srv.closing.Store(true)
		e.Close()
	}
	return nil
}

// Restart stops the server and starts it again on the same URLs and data.
// Clients reconnect by themselves.
func (srv *Server) Restart(ctx context.Context) error {
	if err := srv.Close(); err != nil {
		return err
	}
	return srv.start(ctx)
}

// Embedded is a single etcd member in the process plus a Store connected to
// it: the default metadata store of a standalone Magnetar process.
type Embedded struct {
	*Store
	srv *Server
}

// StartEmbedded starts an etcd member with cfg and connects a Store to it
// in process: the Store calls the member's request handlers directly
// (etcd's v3client), without gRPC over a loopback socket, which cost about
// half the CPU of a metadata read or write (profiled under streambench's W5,
// topic creations). Such a
// Store is bound to this run of the member: it does not survive
// Server().Restart (other clients, through ClientURLs, do).
func StartEmbedded(ctx context.Context, cfg EmbeddedConfig) (*Embedded, error) {
	srv, err := StartServer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	srv.mu.Lock()
	es := srv.etcd.Server
	srv.mu.Unlock()
	// StartServer validated the prefix (EmbeddedConfig.Validate).
	scfg := Config{Endpoints: srv.ClientURLs(), Prefix: srv.cfg.Prefix, Logger: srv.cfg.Logger}.withDefaults()
	st, err := newStore(ctx, v3client.New(es), adapter.KvServerToKvClient(v3rpc.NewQuotaKVServer(es)), scfg)
	if err != nil {
		return nil, errors.Join(err, srv.Close())
	}
	// Checked at every read: a member added later (etcd allows it at run
	// time) turns reads linearizable again.
	st.alone = func() bool { return len(es.Cluster().Members()) == 1 }
	return &Embedded{Store: st, srv: srv}, nil
}

// Server returns the embedded etcd member.
func (e *Embedded) Server() *Server { return e.srv }

// ClientURLs returns the URLs other clients can use to reach the member.
func (e *Embedded) ClientURLs() []string { return e.srv.ClientURLs() }

// Close closes the Store (ending its sessions and watches), then stops the
// server. It is idempotent.
func (e *Embedded) Close() error {
	return errors.Join(e.Store.Close(), e.srv.Close())
}

var _ metadata.Store = (*Embedded)(nil)
