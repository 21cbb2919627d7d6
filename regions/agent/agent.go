package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/internal/accesstoken"
	"github.com/magnetar-dev/magnetar/internal/atomicfile"
	"github.com/magnetar-dev/magnetar/regions/discovery/consul"
	"github.com/magnetar-dev/magnetar/regions/provisioner"
	"github.com/magnetar-dev/magnetar/regions/pulsaradmin"
)

// Defaults of Config.
const (
	DefaultPollTimeout       = 30 * time.Second
	DefaultReconcileInterval = 10 * time.Second
	DefaultHeartbeatInterval = 10 * time.Second
	unsettledInterval        = time.Second
	minBackoff               = 200 * time.Millisecond
	maxBackoff               = 10 * time.Second
	rpcTimeout               = 15 * time.Second
)

// Config configures an Agent.
type Config struct {
	// Region is "regions/{id}" (a bare id is accepted). Required.
	Region string
	// ControlPlaneURL is the control plane's listener, http://host:port
	// (gRPC over plaintext HTTP/2) or https://host:port (TLS). Required.
	ControlPlaneURL string
	// APIKey is an operator API key. Required.
	APIKey string
	// Provisioner runs the clusters. Required.
	Provisioner provisioner.Provisioner
	// Logger; default slog.Default().
	Logger *slog.Logger
	// PollTimeout is the long-poll timeout of WatchDesiredState; default
	// DefaultPollTimeout.
	PollTimeout time.Duration
	// ReconcileInterval is the period of the full reconcile of settled
	// clusters; default DefaultReconcileInterval.
	ReconcileInterval time.Duration
	// HeartbeatInterval; default DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// PulsarClusterName maps a cluster's resource name
	// ("organizations/{org}/clusters/{cluster}") to the Pulsar cluster
	// name its data plane registers, for tenants' allowed clusters and
	// namespaces' replication clusters. Default nil: the allowed cluster is
	// the one the data plane's GET /admin/v2/clusters lists, and a
	// replication cluster is its resource name's last segment (see
	// regions/pulsaradmin).
	PulsarClusterName func(cluster string) string
	// AdminOptions are extra options of every pulsaradmin.Client the agent
	// creates (e.g. pulsaradmin.WithToken). Default none.
	AdminOptions []pulsaradmin.Option
	// MeteringDir holds the usage roll-up (metering.go); "" turns
	// metering off.
	MeteringDir string
	// MeteringInterval is the period of the brokers' usage scrape; default
	// DefaultMeteringInterval.
	MeteringInterval time.Duration
	// Now is the metering clock (the hour usage is attributed to); default
	// time.Now.
	Now func() time.Time
	// FailoverListen is the address of the failover endpoint the agent
	// serves (failover.go); "" serves none.
	FailoverListen string
	// FailoverCacheFile keeps the endpoint's last answers across restarts;
	// "" keeps them in memory only.
	FailoverCacheFile string
	// DataPlaneAuth provisions clusters whose brokers authenticate every
	// client with the control plane's tokens (their own audience) and
	// authorize it, the agent being their superuser, and turns the role
	// bindings into Pulsar permissions (dataplaneauth.go). Off when
	// zero; `magnetar agent` and `magnetar up` turn it on by default.
	DataPlaneAuth bool
	// PeerCredentialsDir holds what the clusters' brokers need to
	// replicate to clusters of other regions that serve TLS: each peer's
	// CA certificate and, with DataPlaneAuth, a token for its audience,
	// renewed by the agent (dataplaneauth.go). Required with DataPlaneAuth
	// and for replicating to peers that serve TLS.
	PeerCredentialsDir string
	// FailoverAddrFile, when set, receives the endpoint's bound address
	// (host:port and a newline) once it listens, so a supervisor that
	// asked for port 0 can find it. Removed when Run returns.
	FailoverAddrFile string
	// Consul, when set, registers the agent and every cluster it runs in
	// Consul (consul.go). Its Region and Health are set by the agent;
	// AgentAddress and AgentPort default to the failover endpoint's. Nil:
	// no service discovery (the default).
	Consul *consul.RegistrarConfig
}

// Validate fills defaults and checks required fields.
func (c *Config) Validate() error {
	if c.Region == "" {
		return errors.New("agent: config: Region is required")
	}
	if !strings.HasPrefix(c.Region, "regions/") {
		c.Region = "regions/" + c.Region
	}
	if c.ControlPlaneURL == "" {
		return errors.New("agent: config: ControlPlaneURL is required")
	}
	if c.APIKey == "" {
		return errors.New("agent: config: APIKey is required")
	}
	if c.Provisioner == nil {
		return errors.New("agent: config: Provisioner is required")
	}
	if c.DataPlaneAuth && c.PeerCredentialsDir == "" {
		return errors.New("agent: config: PeerCredentialsDir is required with DataPlaneAuth")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.PollTimeout <= 0 {
		c.PollTimeout = DefaultPollTimeout
	}
	if c.ReconcileInterval <= 0 {
		c.ReconcileInterval = DefaultReconcileInterval
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.MeteringInterval <= 0 {
		c.MeteringInterval = DefaultMeteringInterval
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// Agent reconciles one region. See the package doc.
type Agent struct {
	cfg Config
	log *slog.Logger
	// grantsDone is what each tenant's and namespace's grants were last
	// made to match (dataplaneauth.go); owned by the grant loop.
	grantsDone map[string]grantMark
	conn       *grpc.ClientConn
	// userConn carries the failover endpoint's requests with the callers'
	// credentials (no operator key).
	userConn *grpc.ClientConn
	rpc      cpv1.RegionAgentClient
	// billing sends usage records (metering.go).
	billing cpv1.BillingClient
	prov    provisioner.Provisioner
	kick    chan struct{} // wakes the reconcile loop; capacity 1
	ran     bool
	runMu   sync.Mutex

	mu       sync.Mutex
	revision int64                    // after_revision of the next watch
	desired  map[string]*desiredEntry // by cluster name
	ready    int                      // clusters READY after the last pass
	synced   bool                     // a watch has answered since start
	// resources holds the region's Pulsar tenants, namespaces and topics
	// by resource name (see pulsar.go).
	resources map[string]*resourceEntry
	// peers holds the clusters of other regions, by resource name, as the
	// control plane last described them (replication peers, peers.go).
	peers map[string]*cpv1.Cluster
	// admins caches one admin client per admin URL; used only by the
	// reconcile goroutine.
	admins map[string]*pulsaradmin.Client
	// adminTransport carries every admin client's requests; Run closes
	// its idle connections when it returns.
	adminTransport *http.Transport
	// trust holds the CA certificates adminTransport verifies data planes'
	// https:// listeners against (dataplanetls.go).
	trust dataPlaneTrust
	// tokens are the agent's data-plane tokens (nil without
	// Config.DataPlaneAuth).
	tokens *accesstoken.Source
	// peerTokens maps each token file the agent keeps fresh to the
	// audience of its tokens: a replication peer's, read by its clusters'
	// brokers, and each cluster's functions token, read by its function
	// instances (guarded by mu).
	peerTokens map[string]string
	// registrar keeps the agent and its clusters registered in Consul
	// (nil without Config.Consul); set by Run before its loops start.
	registrar *consul.Registrar
}

type desiredEntry struct {
	cluster  *cpv1.Cluster // as last seen (from the watch or a report's answer)
	deleted  bool          // gone from the control plane: tear down, report nothing
	revision int64
	// progressFor is the operation a PROGRESSING report was sent for.
	progressFor string
	// adminURL is the admin API of the data plane when the provisioner
	// last said it is ready, else "".
	adminURL string
}

// New validates cfg and prepares the connection (no I/O happens until Run).
func New(cfg Config) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	u, err := url.Parse(cfg.ControlPlaneURL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("agent: config: ControlPlaneURL %q is not http(s)://host:port", cfg.ControlPlaneURL)
	}
	creds := insecure.NewCredentials()
	if u.Scheme == "https" {
		creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	}
	conn, err := grpc.NewClient(u.Host, grpc.WithTransportCredentials(creds),
		grpc.WithPerRPCCredentials(apiKey{key: cfg.APIKey, secure: u.Scheme == "https"}))
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	userConn, err := grpc.NewClient(u.Host, grpc.WithTransportCredentials(creds))
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("agent: %w", err)
	}
	a := &Agent{
		cfg: cfg, log: cfg.Logger.With("region", cfg.Region), conn: conn, userConn: userConn, rpc: cpv1.NewRegionAgentClient(conn), billing: cpv1.NewBillingClient(conn),
		prov: cfg.Provisioner, kick: make(chan struct{}, 1), desired: map[string]*desiredEntry{},
		resources: map[string]*resourceEntry{}, peers: map[string]*cpv1.Cluster{}, admins: map[string]*pulsaradmin.Client{},
	}
	a.adminTransport = newAdminTransport(&a.trust)
	if cfg.DataPlaneAuth {
		a.tokens = accesstoken.New(cfg.ControlPlaneURL, cfg.APIKey)
		a.peerTokens = map[string]string{}
	}
	return a, nil
}

// apiKey sends the key as a bearer token on every call.
type apiKey struct {
	key    string
	secure bool
}

func (k apiKey) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + k.key}, nil
}
func (k apiKey) RequireTransportSecurity() bool { return k.secure }

// Run runs the agent until ctx ends, then closes the connection. The data
// plane is left running.
func (a *Agent) Run(ctx context.Context) error {
	a.runMu.Lock()
	if a.ran {
		a.runMu.Unlock()
		return errors.New("agent: Run called twice")
	}
	a.ran = true
	a.runMu.Unlock()
	defer a.conn.Close()
	a.log.Info("agent: starting", "control_plane", a.cfg.ControlPlaneURL)
	var fo *FailoverServer
	if a.cfg.FailoverListen != "" {
		var err error
		if fo, err = NewFailoverServer(a.cfg.FailoverListen, a.userConn, a.cfg.FailoverCacheFile, a.log); err != nil {
			return fmt.Errorf("agent: failover endpoint: %w", err)
		}
		a.log.Info("agent: serving the failover endpoint", "addr", fo.Addr().String())
		if f := a.cfg.FailoverAddrFile; f != "" {
			if err := atomicfile.WriteFile(f, []byte(fo.Addr().String()+"\n")); err != nil {
				fo.Shutdown(context.Background())
				return fmt.Errorf("agent: failover endpoint: %w", err)
			}
			defer os.Remove(f)
		}
	}
	defer a.userConn.Close()
	if a.cfg.Consul != nil {
		foAddr := ""
		if fo != nil {
			foAddr = fo.Addr().String()
		}
		r, err := a.newRegistrar(foAddr)
		if err != nil {
			if fo != nil {
				fo.Shutdown(context.Background())
			}
			return err
		}
		a.registrar = r
		r.Start()
		a.log.Info("agent: registering in consul", "consul", a.cfg.Consul.Consul.Address)
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			r.Shutdown(sctx) // deregisters nothing: the checks expire after their TTL
		}()
	}

	var m *meter
	if a.cfg.MeteringDir != "" {
		var err error
		if m, err = a.newMeter(); err != nil {
			return err
		}
	}
	var wg sync.WaitGroup
	wg.Add(4)
	go func() { defer wg.Done(); a.watchLoop(ctx) }()
	go func() { defer wg.Done(); a.replicationLoop(ctx) }()
	go func() { defer wg.Done(); a.reconcileLoop(ctx) }()
	go func() { defer wg.Done(); a.heartbeatLoop(ctx) }()
	if m != nil {
		wg.Add(1)
		go func() { defer wg.Done(); a.meteringLoop(ctx, m) }()
	}
	if a.tokens != nil {
		wg.Add(2)
		go func() { defer wg.Done(); a.grantLoop(ctx) }()
		go func() { defer wg.Done(); a.peerTokenLoop(ctx) }()
	}
	if fo != nil {
		wg.Add(2)
		go func() { defer wg.Done(); fo.Serve() }()
		go func() {
			defer wg.Done()
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			fo.Shutdown(sctx)
		}()
	}
	wg.Wait()
	a.adminTransport.CloseIdleConnections()
	a.log.Info("agent: stopped")
	return nil
}

func backoff(d time.Duration) time.Duration { return min(max(d*2, minBackoff), maxBackoff) }

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (a *Agent) trigger() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

func (a *Agent) watchLoop(ctx context.Context) {
	var delay time.Duration
	for ctx.Err() == nil {
		a.mu.Lock()
		after := a.revision
		a.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, a.cfg.PollTimeout+rpcTimeout)
		resp, err := a.rpc.WatchDesiredState(cctx, &cpv1.WatchDesiredStateRequest{
			Region: a.cfg.Region, AfterRevision: after, Timeout: durationpb.New(a.cfg.PollTimeout)})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			delay = backoff(delay)
			a.log.Warn("agent: watch failed; data plane keeps running, retrying", "err", err, "retry_in", delay)
			sleep(ctx, delay)
			continue
		}
		if delay > 0 {
			a.log.Info("agent: control plane reachable again", "revision", after)
		}
		delay = 0
		a.apply(resp)
	}
}

// apply records a watch answer.
func (a *Agent) apply(resp *cpv1.WatchDesiredStateResponse) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ch := range resp.GetChanges() {
		cl := ch.GetCluster()
		if cl == nil || cl.GetName() == "" {
			continue
		}
		e := a.desired[cl.Name]
		if e == nil {
			e = &desiredEntry{}
			a.desired[cl.Name] = e
		}
		e.cluster, e.deleted, e.revision = cl, ch.GetDeleted(), ch.GetRevision()
	}
	a.recordResources(resp.GetPulsarChanges())
	a.recordPeers(resp.GetPeerChanges())
	if resp.GetRevision() > a.revision {
		a.revision = resp.GetRevision()
	}
	a.synced = true
	if len(resp.GetChanges()) > 0 || len(resp.GetPulsarChanges()) > 0 {
		a.trigger()
	}
}

func (a *Agent) reconcileLoop(ctx context.Context) {
	for {
		unsettled := a.reconcileAll(ctx)
		if a.reconcileResources(ctx) {
			unsettled = true
		}
		wait := a.cfg.ReconcileInterval
		if unsettled {
			wait = unsettledInterval
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-a.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

// reconcileAll reconciles every known cluster once and reports whether
// any is not settled yet (not ready, or a report is owed).
func (a *Agent) reconcileAll(ctx context.Context) (unsettled bool) {
	a.mu.Lock()
	if !a.synced {
		a.mu.Unlock()
		return true
	}
	names := make([]string, 0, len(a.desired))
	for n := range a.desired {
		names = append(names, n)
	}
	a.mu.Unlock()
	slices.Sort(names)
	ready := 0
	for _, n := range names {
		if ctx.Err() != nil {
			return true
		}
		done, isReady := a.reconcile(ctx, n)
		unsettled = unsettled || !done
		if isReady {
			ready++
		}
	}
	a.mu.Lock()
	a.ready = ready
	a.mu.Unlock()
	return unsettled
}

// reconcile converges one cluster and reports on it; done is false when it
// should be looked at again soon.
func (a *Agent) reconcile(ctx context.Context, name string) (done, ready bool) {
	a.mu.Lock()
	e := a.desired[name]
	if e == nil {
		a.mu.Unlock()
		return true, false
	}
	cl, deleted, rev, progressFor := e.cluster, e.deleted, e.revision, e.progressFor
	a.mu.Unlock()
	log := a.log.With("cluster", name)

	if deleted || cl.GetState() == cpv1.Cluster_DELETING {
		if err := a.prov.Delete(ctx, name); err != nil {
			log.Error("agent: delete failed", "err", err)
			return false, false
		}
		a.consulDelete(name)
		if deleted {
			a.forget(name, cl)
			return true, false
		}
		_, err := a.report(ctx, &cpv1.ReportClusterStatusRequest{Name: name, State: cpv1.ReportClusterStatusRequest_DELETED, ObservedRevision: rev})
		switch status.Code(err) {
		case codes.OK, codes.NotFound:
			log.Info("agent: cluster deleted")
			a.forget(name, cl)
			return true, false
		case codes.FailedPrecondition: // no longer DELETING: the watch will say what it is
			return false, false
		default:
			log.Warn("agent: report DELETED failed", "err", err)
			return false, false
		}
	}

	spec := provisioner.ClusterSpec{Name: name, Revision: rev,
		Size: provisioner.Size{Brokers: int(cl.GetSize().GetBrokers()), Bookies: int(cl.GetSize().GetBookies())}}
	if a.tokens != nil {
		auth, err := a.clusterAuth(ctx, name)
		if err != nil {
			// Without the issuer the brokers' flags cannot be written:
			// leave the cluster as it runs and try again.
			log.Warn("agent: data-plane authentication not known yet; cluster left as it is", "err", err)
			return false, false
		}
		spec.Auth = auth
	}
	st, err := a.prov.Apply(ctx, spec)
	if err != nil {
		st = provisioner.ClusterStatus{State: provisioner.StateFailed, Message: err.Error()}
	}
	a.trust.add(st.CACertPEM)
	a.mu.Lock()
	if e := a.desired[name]; e != nil {
		e.adminURL = ""
		if st.State == provisioner.StateReady {
			_, e.adminURL = clientURLs(st) // https:// when the cluster serves TLS
		}
	}
	a.mu.Unlock()
	if st.State == provisioner.StateReady {
		a.consulSet(name, st)
	}
	req := &cpv1.ReportClusterStatusRequest{Name: name, ObservedRevision: rev, Message: st.Message}
	switch st.State {
	case provisioner.StateReady:
		req.State = cpv1.ReportClusterStatusRequest_READY
		req.ServiceUrl, req.AdminUrl = clientURLs(st)
		req.TlsServiceUrl, req.TlsAdminUrl, req.CaCertificate = st.TLSServiceURL, st.TLSAdminURL, st.CACertPEM
		if cl.GetState() == cpv1.Cluster_READY && cl.GetServiceUrl() == req.ServiceUrl && cl.GetAdminUrl() == req.AdminUrl &&
			cl.GetTlsServiceUrl() == st.TLSServiceURL && cl.GetTlsAdminUrl() == st.TLSAdminURL && cl.GetCaCertificate() == st.CACertPEM &&
			cl.GetStatusMessage() == "" {
			return true, true // the record already says so
		}
	case provisioner.StateFailed:
		req.State = cpv1.ReportClusterStatusRequest_FAILED
		if cl.GetState() == cpv1.Cluster_FAILED && cl.GetStatusMessage() == st.Message {
			return false, false
		}
	default:
		// One PROGRESSING report per operation: it marks the operation
		// RUNNING; repeating it would only churn the record.
		if cl.GetOperation() == "" || progressFor == cl.GetOperation() {
			return false, false
		}
		req.State = cpv1.ReportClusterStatusRequest_PROGRESSING
	}
	out, err := a.report(ctx, req)
	if err != nil {
		if status.Code(err) != codes.NotFound {
			log.Warn("agent: report failed", "state", req.State.String(), "err", err)
		}
		return false, false
	}
	log.Info("agent: reported", "state", req.State.String(), "service_url", req.ServiceUrl, "message", req.Message)
	a.mu.Lock()
	if e := a.desired[name]; e != nil && e.cluster == cl {
		if req.State == cpv1.ReportClusterStatusRequest_PROGRESSING {
			e.progressFor = cl.GetOperation()
		}
		if out != nil {
			e.cluster = out
		}
	}
	a.mu.Unlock()
	return st.State == provisioner.StateReady, st.State == provisioner.StateReady
}

// clientURLs returns the URLs a cluster's status publishes for clients,
// and the agent's admin calls use: the TLS ones when its data plane serves
// TLS. The plain-text listeners of such a cluster are not published: a
// client given only these URLs cannot send a token or data in the clear
// by mistake.
func clientURLs(st provisioner.ClusterStatus) (service, admin string) {
	service, admin = st.ServiceURL, st.AdminURL
	if st.TLSServiceURL != "" && st.TLSAdminURL != "" {
		service, admin = st.TLSServiceURL, st.TLSAdminURL
	}
	return service, admin
}

// forget drops a cluster that is gone, unless the watch brought a newer
// version meanwhile (a cluster re-created under the same name).
func (a *Agent) forget(name string, seen *cpv1.Cluster) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if e := a.desired[name]; e != nil && e.cluster == seen {
		delete(a.desired, name)
	}
}

func (a *Agent) report(ctx context.Context, req *cpv1.ReportClusterStatusRequest) (*cpv1.Cluster, error) {
	cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	return a.rpc.ReportClusterStatus(cctx, req)
}

// regionMessage is the region status's message: "1 cluster, 1 ready",
// "3 clusters, 2 ready".
func regionMessage(total, ready int) string {
	noun := "clusters"
	if total == 1 {
		noun = "cluster"
	}
	return fmt.Sprintf("%d %s, %d ready", total, noun, ready)
}

func (a *Agent) heartbeatLoop(ctx context.Context) {
	delay := time.Duration(0)
	for {
		a.mu.Lock()
		total, ready, synced := 0, a.ready, a.synced
		for _, e := range a.desired {
			if !e.deleted {
				total++
			}
		}
		a.mu.Unlock()
		hs := &cpv1.RegionStatus{State: cpv1.RegionStatus_HEALTHY, Message: regionMessage(total, ready)}
		if !synced || ready < total {
			hs.State = cpv1.RegionStatus_DEGRADED
		}
		cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		_, err := a.rpc.Heartbeat(cctx, &cpv1.HeartbeatRequest{Region: a.cfg.Region, Status: hs})
		cancel()
		next := a.cfg.HeartbeatInterval
		if err != nil && ctx.Err() == nil {
			delay = backoff(delay)
			next = min(next, delay)
			a.log.Warn("agent: heartbeat failed", "err", err)
		} else {
			delay = 0
		}
		if !sleep(ctx, next) {
			return
		}
	}
}
