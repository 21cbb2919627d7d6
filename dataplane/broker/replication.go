package broker

// Geo-replication, source side: each persistent topic (or partition) runs
// one replicator (package replication) per remote cluster it replicates
// to, owned by the topic, so it moves with the topic's bundle. The remote
// clusters are the topic-level replication clusters when set, else the
// namespace's replication_clusters, less the local cluster, and only those
// the tenant's allowedClusters and the namespace's allowed_clusters admit
// (when set). A replicator starts when the topic opens or a policy adds its
// cluster, and stops when the topic closes; a cluster removed from the list
// also loses its cursor (pulsar.repl.<cluster>), so the backlog kept for it
// is released.
//
// Receiving side: a producer whose name starts with replication.Prefix is
// a remote cluster's replicator. Its SENDs are deduplicated by sequence id
// whether or not the namespace enables deduplication (the topic loads its
// deduplication state when the first replicator arrives and keeps it while
// loaded); other producers are judged only when the namespace enables it.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/magnetar-dev/magnetar/api/pulsarwire"
	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
	"github.com/magnetar-dev/magnetar/dataplane/replication"
)

// replicatorRun is a running replicator and how to stop it.
type replicatorRun struct {
	r      *replication.Replicator
	cancel context.CancelFunc
	done   chan struct{}
}

func (rr *replicatorRun) stop() {
	rr.cancel()
	<-rr.done
}

// isReplicatorCursor reports whether a cursor is a replicator's, not a
// subscription.
func isReplicatorCursor(name string) bool { return strings.HasPrefix(name, replication.Prefix) }

// isReplicatorProducer reports whether a producer name is a remote
// cluster's replicator.
func isReplicatorProducer(name string) bool { return strings.HasPrefix(name, replication.Prefix) }

// replicationRemotes resolves the clusters t replicates to.
func (s *Service) replicationRemotes(ctx context.Context, t *Topic) ([]string, error) {
	if t.ml == nil {
		return nil, nil
	}
	pol := t.policies()
	clusters := pol.ReplicationClusters
	if tp := s.topicPolicies(t.name); tp != nil {
		if raw, ok := tp["replication"]; ok {
			var list []string
			if json.Unmarshal(raw, &list) == nil && len(list) > 0 {
				clusters = list
			}
		}
	}
	local := s.cfg.ClusterName
	var remotes []string
	for _, c := range clusters {
		if c != local && !slices.Contains(remotes, c) {
			remotes = append(remotes, c)
		}
	}
	if len(remotes) == 0 {
		return nil, nil
	}
	ti, err := s.res.GetTenant(ctx, t.name.Tenant)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	var nsAllowed []string
	if raw, ok := pol.Other["allowed_clusters"]; ok {
		json.Unmarshal(raw, &nsAllowed)
	}
	out := remotes[:0]
	for _, c := range remotes {
		if len(ti.AllowedClusters) > 0 && !slices.Contains(ti.AllowedClusters, c) {
			continue // the tenant may not use it: never replicated to
		}
		if len(nsAllowed) > 0 && !slices.Contains(nsAllowed, c) {
			continue
		}
		out = append(out, c)
	}
	return out, nil
}

// refreshReplication brings t's replicators in line with its policies, in
// the background (it reads the tenant and cluster records).
func (t *Topic) refreshReplication() {
	if t.ml == nil {
		return
	}
	if rc := t.policies().ReplicationClusters; len(rc) > 0 && !slices.Contains(rc, t.s.cfg.ClusterName) {
		t.s.deleteUnreplicated(t)
		return
	}
	t.s.wg.Add(1)
	go func() {
		defer t.s.wg.Done()
		t.replMu.Lock()
		defer t.replMu.Unlock()
		ctx, cancel := t.s.stopContext(30 * time.Second)
		defer cancel()
		want, err := t.s.replicationRemotes(ctx, t)
		if err != nil {
			t.s.log.Warn("resolve replication clusters failed", "topic", t.name.String(), "err", err)
			return
		}
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return
		}
		var drop []*replicatorRun
		for remote, rr := range t.repl {
			if !slices.Contains(want, remote) {
				drop = append(drop, rr)
				delete(t.repl, remote)
			}
		}
		var add []string
		for _, remote := range want {
			if _, ok := t.repl[remote]; !ok {
				add = append(add, remote)
			}
		}
		t.mu.Unlock()
		for _, rr := range drop {
			rr.stop()
			name := replication.Prefix + rr.r.Remote()
			if err := t.ml.DeleteCursor(ctx, name); err != nil && !errors.Is(err, ledger.ErrNotFound) {
				t.s.log.Warn("delete replicator cursor failed", "topic", t.name.String(), "cursor", name, "err", err)
			}
			t.s.log.Info("replication stopped", "topic", t.name.String(), "remote", rr.r.Remote())
		}
		for _, remote := range add {
			if err := t.startReplicator(ctx, remote); err != nil {
				t.s.log.Warn("start replicator failed", "topic", t.name.String(), "remote", remote, "err", err)
			}
		}
	}()
}

// startReplicator opens the cursor of remote and starts its replicator.
func (t *Topic) startReplicator(ctx context.Context, remote string) error {
	cur, err := t.ml.OpenCursor(ctx, replication.Prefix+remote, ledger.InitialEarliest)
	if err != nil {
		return err
	}
	s := t.s
	topic := t.name.String()
	sent := s.metrics.replSent.counter(t.name.NamespaceName(), remote)
	r := replication.New(replication.Config{
		LocalCluster:  s.cfg.ClusterName,
		RemoteCluster: remote,
		Topic:         topic,
		Ledger:        t.ml,
		Cursor:        cur,
		Connect: func(ctx context.Context) (*replication.Conn, error) {
			cd, err := s.res.GetCluster(ctx, remote)
			if err != nil {
				return nil, fmt.Errorf("cluster %q: %w", remote, err)
			}
			url, pool, err := s.replPools.get(remote, cd)
			if err != nil {
				return nil, err
			}
			return pool.DialTopic(ctx, url, topic)
		},
		Release: (*replication.Conn).Release,
		Prepare: func(ctx context.Context, c *replication.Conn) error {
			return s.prepareRemoteTopic(ctx, remote, t.name)
		},
		Confirmed: func(msgs, bytes int64) {
			s.CountReplicatedOut(t.name, msgs, bytes)
			sent.Add(msgs)
		},
		Schema: func(ctx context.Context, version []byte) (*pb.Schema, error) {
			e, _, err := s.schemas.getSchema(ctx, t.name.Base(), version)
			if errors.Is(err, ErrNotFound) {
				return nil, nil
			}
			if err != nil {
				return nil, err
			}
			sc := &pb.Schema{Name: new(e.Name), SchemaData: e.Data, Type: pb.Schema_Type(e.Type).Enum()}
			for k, v := range e.Properties {
				sc.Properties = append(sc.Properties, &pb.KeyValue{Key: new(k), Value: new(v)})
			}
			return sc, nil
		},
		Throttle: (&replThrottle{t: t}).wait,
		Markers: func(ctx context.Context, max int) [][]byte {
			return t.replicatedSubscriptionUpdates(ctx, remote, max)
		},
		Log: s.log,
	})
	rctx, cancel := context.WithCancel(context.Background())
	rr := &replicatorRun{r: r, cancel: cancel, done: make(chan struct{})}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		cancel()
		return nil
	}
	setKey(&t.repl, remote, rr)
	t.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(rr.done)
		r.Run(rctx)
	}()
	s.log.Info("replication started", "topic", topic, "remote", remote)
	return nil
}

// stopReplicators stops every replicator of a closing topic (their cursors
// stay: the next owner resumes from them).
func (t *Topic) stopReplicators() {
	t.mu.Lock()
	runs := make([]*replicatorRun, 0, len(t.repl))
	for _, rr := range t.repl {
		runs = append(runs, rr)
	}
	t.repl = nil
	t.mu.Unlock()
	for _, rr := range runs {
		rr.stop()
	}
}

// wakeReplicatorsLocked tells the replicators new entries are there.
func (t *Topic) wakeReplicatorsLocked() {
	for _, rr := range t.repl {
		rr.r.Wake()
	}
}

// replicators returns the running replicators by remote cluster.
func (t *Topic) replicators() map[string]*replication.Replicator {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]*replication.Replicator, len(t.repl))
	for k, rr := range t.repl {
		out[k] = rr.r
	}
	return out
}

// replPools holds one connection pool per remote cluster, for the
// cluster record it was made from: a changed record (new URL, token or
// certificates) gets a new pool, and sessions on the old one end as they
// fail or stop.
type replPools struct {
	mu    sync.Mutex
	pools map[string]*replPool                    // by remote cluster
	owner map[*replication.Conn]*replication.Pool // who to release a connection to
}

type replPool struct {
	record string // the cluster record's JSON the pool was made from
	url    string
	pool   *replication.Pool
}

// get returns the URL and pool for a remote cluster's current record.
func (ps *replPools) get(remote string, cd ClusterData) (string, *replication.Pool, error) {
	rec, _ := json.Marshal(cd)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p := ps.pools[remote]; p != nil && p.record == string(rec) {
		return p.url, p.pool, nil
	}
	url, opts, err := replicationDialOptions(cd)
	if err != nil {
		return "", nil, err
	}
	if ps.pools == nil {
		ps.pools = map[string]*replPool{}
	}
	p := &replPool{record: string(rec), url: url, pool: replication.NewPool(opts)}
	ps.pools[remote] = p
	return url, p.pool, nil
}

// replicationDialOptions returns the URL and client settings to reach a
// remote cluster from its record.
func replicationDialOptions(cd ClusterData) (string, replication.DialOptions, error) {
	var opts replication.DialOptions
	url := cd.BrokerServiceURL
	if (cd.BrokerClientTLSEnabled || url == "") && cd.BrokerServiceTLS != "" {
		url = cd.BrokerServiceTLS
	}
	if url == "" {
		return "", opts, errors.New("the cluster record has no brokerServiceUrl")
	}
	if strings.HasPrefix(url, "pulsar+ssl://") {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: cd.TLSAllowInsecureConnection}
		if f := cd.BrokerClientTrustCertsFile; f != "" {
			pem, err := os.ReadFile(f)
			if err != nil {
				return "", opts, fmt.Errorf("trust certificates: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return "", opts, fmt.Errorf("trust certificates %s: no PEM certificate", f)
			}
			cfg.RootCAs = pool
		}
		if cd.BrokerClientCertFile != "" && cd.BrokerClientKeyFile != "" {
			cert, err := tls.LoadX509KeyPair(cd.BrokerClientCertFile, cd.BrokerClientKeyFile)
			if err != nil {
				return "", opts, fmt.Errorf("client certificate: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		opts.TLS = cfg
	}
	method, data, err := clientAuth(cd.AuthenticationPlugin, cd.AuthenticationParameters)
	if err != nil {
		return "", opts, err
	}
	if method == "tls" && opts.TLS != nil && len(opts.TLS.Certificates) == 0 {
		return "", opts, errors.New("AuthenticationTls needs brokerClientCertificateFilePath and brokerClientKeyFilePath")
	}
	opts.AuthMethod, opts.AuthData = method, data
	opts.ProxyURL = cd.ProxyServiceURL
	return url, opts, nil
}

// clientAuth maps a Pulsar client authentication plugin and its parameters
// to a CONNECT auth method and data source.
func clientAuth(plugin, params string) (string, func() ([]byte, error), error) {
	switch {
	case plugin == "":
		return "", nil, nil
	case strings.HasSuffix(plugin, "AuthenticationToken") || plugin == "token":
		p := strings.TrimSpace(params)
		if strings.HasPrefix(p, "{") {
			var m map[string]string
			if err := json.Unmarshal([]byte(p), &m); err != nil {
				return "", nil, fmt.Errorf("authenticationParameters: %w", err)
			}
			p = "token:" + m["token"]
		}
		switch {
		case strings.HasPrefix(p, "token:"):
			tok := []byte(strings.TrimPrefix(p, "token:"))
			return "token", func() ([]byte, error) { return tok, nil }, nil
		case strings.HasPrefix(p, "file:"):
			path := strings.TrimPrefix(strings.TrimPrefix(p, "file:"), "//")
			return "token", func() ([]byte, error) {
				b, err := os.ReadFile(path)
				return []byte(strings.TrimSpace(string(b))), err
			}, nil
		default:
			tok := []byte(p)
			return "token", func() ([]byte, error) { return tok, nil }, nil
		}
	case strings.HasSuffix(plugin, "AuthenticationTls") || plugin == "tls":
		return "tls", nil, nil
	}
	return "", nil, fmt.Errorf("authentication plugin %q is not supported for replication (token or TLS)", plugin)
}

// prepareRemoteTopic makes sure a partition's partitioned topic exists on
// the remote cluster, with at least as many partitions as here, through the
// remote's admin API (its serviceUrl). Non-partitioned topics are created
// by the replicator's producer.
func (s *Service) prepareRemoteTopic(ctx context.Context, remote string, t TopicName) error {
	if t.PartitionIndex() < 0 {
		return nil
	}
	base := t.Base()
	n, err := s.res.Partitions(ctx, base)
	if err != nil || n <= 0 {
		return err
	}
	cd, err := s.res.GetCluster(ctx, remote)
	if err != nil {
		return fmt.Errorf("cluster %q: %w", remote, err)
	}
	svc := cd.ServiceURL
	if (cd.BrokerClientTLSEnabled || svc == "") && cd.ServiceURLTLS != "" {
		svc = cd.ServiceURLTLS
	}
	if svc == "" {
		return fmt.Errorf("cluster %q has no serviceUrl to create partitioned topic %s", remote, base)
	}
	_, opts, err := replicationDialOptions(cd)
	if err != nil {
		return err
	}
	path := fmt.Sprintf("%s/admin/v2/%s/%s/%s/%s/partitions", strings.TrimRight(svc, "/"),
		base.Domain, base.Tenant, base.Namespace, base.Local)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, path, strings.NewReader(strconv.Itoa(n)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if opts.AuthMethod == "token" {
		tok, err := opts.AuthData()
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+string(tok))
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	if opts.TLS != nil {
		hc.Transport = &http.Transport{TLSClientConfig: opts.TLS}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("create partitioned topic %s on %s: %w", base, remote, err)
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK, http.StatusNoContent, http.StatusConflict:
		return nil
	}
	return fmt.Errorf("create partitioned topic %s on %s: HTTP %d", base, remote, resp.StatusCode)
}

// ensureReplicationDedup loads the topic's deduplication state, if it has
// none, before a remote cluster's replicator produces: the replicator
// learns the last entry stored (PRODUCER_SUCCESS last_sequence_id) and
// every SEND is judged.
func (t *Topic) ensureReplicationDedup(ctx context.Context) error {
	t.replIn.Store(true)
	if t.dedup.Load() != nil {
		return nil
	}
	t.pol.mu.Lock()
	defer t.pol.mu.Unlock()
	if t.dedup.Load() != nil {
		return nil
	}
	if t.pol.dedupBusy {
		return protocol.ErrServiceNotReady.WithMessage("deduplication state is loading")
	}
	d, err := loadDedup(ctx, t.ml)
	if err != nil {
		return protocol.ErrServiceNotReady.WithMessage("load deduplication state: " + err.Error())
	}
	t.dedup.Store(d)
	return nil
}

// replThrottle paces one replicator at the topic's replicatorDispatchRate
// (namespace or topic policy). Only the replicator's goroutine uses it.
type replThrottle struct {
	t    *Topic
	spec rateSpec
	rb   rateBuckets
}

// wait returns once msgs messages of bytes may be sent, and charges them.
func (th *replThrottle) wait(ctx context.Context, msgs, bytes int) error {
	spec := th.t.limits().replicatorDispatch
	if !spec.set() {
		th.spec, th.rb = spec, rateBuckets{}
		return nil
	}
	now := nanotime()
	if spec != th.spec {
		th.spec, th.rb = spec, rebucket(th.rb, spec, now)
	}
	if d := th.rb.wait(1, now); d > 0 {
		tm := time.NewTimer(d)
		select {
		case <-ctx.Done():
			tm.Stop()
			return ctx.Err()
		case <-tm.C:
		}
		now = nanotime()
	}
	th.rb.consume(int64(msgs), int64(bytes), now)
	return nil
}

// ReplicatorStats is one remote cluster's entry in a topic's stats
// ("replication"), with Pulsar's field names: the outbound side is this
// topic's replicator to that cluster, the inbound side that cluster's
// replicator producing here. Outbound rates are over the last second;
// inbound rates are averages since the inbound producer connected.
type ReplicatorStats struct {
	MsgRateIn                 float64 `json:"msgRateIn"`
	MsgThroughputIn           float64 `json:"msgThroughputIn"`
	MsgRateOut                float64 `json:"msgRateOut"`
	MsgThroughputOut          float64 `json:"msgThroughputOut"`
	MsgRateExpired            float64 `json:"msgRateExpired"`
	MsgInCount                uint64  `json:"msgInCount"`
	BytesInCount              uint64  `json:"bytesInCount"`
	MsgOutCount               uint64  `json:"msgOutCount"`
	BytesOutCount             uint64  `json:"bytesOutCount"`
	ReplicationBacklog        int64   `json:"replicationBacklog"`
	Connected                 bool    `json:"connected"`
	ReplicationDelayInSeconds int64   `json:"replicationDelayInSeconds"`
	InboundConnection         string  `json:"inboundConnection"`
	InboundConnectedSince     string  `json:"inboundConnectedSince"`
	OutboundConnection        string  `json:"outboundConnection"`
	OutboundConnectedSince    string  `json:"outboundConnectedSince"`
	// LastError is why the outbound connection last failed (Magnetar's
	// addition; empty while connected).
	LastError string `json:"lastError,omitempty"`
}

// replicationStats fills the replication entries of a topic's stats. With
// readBacklog, the delay of a replicator with a backlog and nothing in
// flight (disconnected) is read from the oldest unreplicated entry; the
// metrics scrape, which visits every topic, leaves it at what is in flight.
func (t *Topic) replicationStats(st *TopicStats, producers []*Producer, readBacklog bool) {
	for remote, r := range t.replicators() {
		rs := r.Stats()
		e := st.Replication[remote]
		e.Connected = rs.Connected
		e.MsgRateOut, e.MsgThroughputOut = rs.MsgRateOut, rs.ByteRateOut
		e.MsgOutCount, e.BytesOutCount = rs.MsgOut, rs.BytesOut
		e.ReplicationBacklog = rs.Backlog
		e.LastError = rs.LastError
		if rs.Connected {
			e.OutboundConnection = rs.RemoteAddr
			e.OutboundConnectedSince = rs.ConnectedSince.UTC().Format(time.RFC3339Nano)
		}
		if !rs.OldestPending.IsZero() {
			e.ReplicationDelayInSeconds = int64(time.Since(rs.OldestPending).Seconds())
		} else if rs.Backlog > 0 && readBacklog {
			e.ReplicationDelayInSeconds = int64(time.Since(t.oldestUnreplicated(r)).Seconds())
		}
		st.Replication[remote] = e
	}
	for _, p := range producers {
		if !p.replicator {
			continue
		}
		from := strings.TrimPrefix(p.name, replication.Prefix)
		e := st.Replication[from]
		e.InboundConnection = remoteAddr(p.conn)
		e.InboundConnectedSince = p.conn.connectedSince()
		e.MsgInCount, e.BytesInCount = p.replMsgs.Load(), p.replBytes.Load()
		if el := time.Since(p.conn.connectedAt).Seconds(); el > 0 && !p.conn.connectedAt.IsZero() {
			e.MsgRateIn, e.MsgThroughputIn = float64(e.MsgInCount)/el, float64(e.BytesInCount)/el
		}
		st.Replication[from] = e
	}
}

// oldestUnreplicated is the publish time of the first entry a replicator
// has not confirmed (now when it cannot be read).
func (t *Topic) oldestUnreplicated(r *replication.Replicator) time.Time {
	ctx, cancel := t.s.stopContext(5 * time.Second)
	defer cancel()
	es, err := t.ml.Read(ctx, t.ml.Next(r.Cursor().MarkDeletePosition()), 1, 0)
	if err != nil || len(es) == 0 {
		return time.Now()
	}
	meta, _, err := protocol.ParseHeadersAndPayload(es[0].Data)
	if err != nil {
		return time.Now()
	}
	return time.UnixMilli(int64(meta.GetPublishTime()))
}

// replCollector exports replication metrics with Pulsar's names, summed per
// namespace and remote cluster (Pulsar's namespace-level aggregation; one
// series per topic would not scale to many topics).
type replCollector struct {
	s                                *Service
	backlog, rateOut, tputOut, delay *prometheus.Desc
	rateIn, tputIn, connected, sent  *prometheus.Desc
}

// replSent counts the messages the remote clusters confirmed, by namespace
// and remote cluster, since the process started (the runbooks' "messages
// replicated").
type replSent struct {
	mu sync.Mutex
	m  map[replSentKey]*atomic.Int64
}

type replSentKey struct{ ns, remote string }

// counter returns the counter of namespace ns toward remote (a replicator
// keeps it for its life).
func (r *replSent) counter(ns, remote string) *atomic.Int64 {
	k := replSentKey{ns, remote}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.m[k]
	if c == nil {
		if r.m == nil {
			r.m = map[replSentKey]*atomic.Int64{}
		}
		c = new(atomic.Int64)
		r.m[k] = c
	}
	return c
}

func (r *replSent) each(f func(k replSentKey, n int64)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, c := range r.m {
		f(k, c.Load())
	}
}

func newReplCollector(s *Service) *replCollector {
	labels := []string{"cluster", "namespace", "remote_cluster"}
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, labels, nil) }
	return &replCollector{s: s,
		backlog:   d("pulsar_replication_backlog", "Entries not yet replicated to the remote cluster."),
		rateOut:   d("pulsar_replication_rate_out", "Messages per second replicated to the remote cluster (last second)."),
		tputOut:   d("pulsar_replication_throughput_out", "Bytes per second replicated to the remote cluster (last second)."),
		delay:     d("pulsar_replication_delay_in_seconds", "Age of the oldest message sent to the remote cluster and not yet confirmed (the maximum over topics; topic stats also cover a disconnected replicator's backlog)."),
		rateIn:    d("pulsar_replication_rate_in", "Messages per second received from the remote cluster's replicators (average since connected)."),
		tputIn:    d("pulsar_replication_throughput_in", "Bytes per second received from the remote cluster's replicators (average since connected)."),
		connected: d("pulsar_replication_connected_count", "Replicators connected to the remote cluster."),
		sent:      d("magnetar_replication_sent_messages_total", "Messages the remote cluster confirmed, since the process started."),
	}
}

func (c *replCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.backlog, c.rateOut, c.tputOut, c.delay, c.rateIn, c.tputIn, c.connected, c.sent} {
		ch <- d
	}
}

func (c *replCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct{ ns, remote string }
	type agg struct{ backlog, rateOut, tputOut, delay, rateIn, tputIn, connected float64 }
	sums := map[key]*agg{}
	get := func(k key) *agg {
		a := sums[k]
		if a == nil {
			a = &agg{}
			sums[k] = a
		}
		return a
	}
	for _, t := range c.s.openTopics() {
		t.mu.Lock()
		hasRepl := len(t.repl) > 0 || t.replIn.Load()
		t.mu.Unlock()
		if !hasRepl {
			continue
		}
		t.mu.Lock()
		producers := make([]*Producer, 0, len(t.producers))
		for _, p := range t.producers {
			producers = append(producers, p)
		}
		t.mu.Unlock()
		st := &TopicStats{Replication: map[string]ReplicatorStats{}}
		t.replicationStats(st, producers, false)
		for remote, r := range st.Replication {
			a := get(key{t.name.NamespaceName(), remote})
			a.backlog += float64(r.ReplicationBacklog)
			a.rateOut += r.MsgRateOut
			a.tputOut += r.MsgThroughputOut
			a.delay = max(a.delay, float64(r.ReplicationDelayInSeconds))
			a.rateIn += r.MsgRateIn
			a.tputIn += r.MsgThroughputIn
			if r.Connected {
				a.connected++
			}
		}
	}
	cluster := c.s.cfg.ClusterName
	for k, a := range sums {
		lv := []string{cluster, k.ns, k.remote}
		ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, a.backlog, lv...)
		ch <- prometheus.MustNewConstMetric(c.rateOut, prometheus.GaugeValue, a.rateOut, lv...)
		ch <- prometheus.MustNewConstMetric(c.tputOut, prometheus.GaugeValue, a.tputOut, lv...)
		ch <- prometheus.MustNewConstMetric(c.delay, prometheus.GaugeValue, a.delay, lv...)
		ch <- prometheus.MustNewConstMetric(c.rateIn, prometheus.GaugeValue, a.rateIn, lv...)
		ch <- prometheus.MustNewConstMetric(c.tputIn, prometheus.GaugeValue, a.tputIn, lv...)
		ch <- prometheus.MustNewConstMetric(c.connected, prometheus.GaugeValue, a.connected, lv...)
	}
	c.s.metrics.replSent.each(func(k replSentKey, n int64) {
		ch <- prometheus.MustNewConstMetric(c.sent, prometheus.CounterValue, float64(n), cluster, k.ns, k.remote)
	})
}

// deleteUnreplicated deletes, as Pulsar does, a topic of a namespace whose
// replication clusters no longer include this cluster (a partition takes
// its partitioned topic with it). Its data here is gone; the other
// clusters keep theirs.
func (s *Service) deleteUnreplicated(t *Topic) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := s.stopContext(time.Minute)
		defer cancel()
		var err error
		if t.name.PartitionIndex() >= 0 {
			err = s.DeletePartitionedTopic(ctx, t.name.Base(), true)
		} else {
			err = s.DeleteTopic(ctx, t.name, true)
		}
		if err != nil && !errors.Is(err, ErrNotFound) {
			s.log.Warn("delete topic of a namespace no longer replicated here failed", "topic", t.name.String(), "err", err)
			return
		}
		s.log.Info("topic deleted: its namespace is no longer replicated to this cluster", "topic", t.name.String())
	}()
}
