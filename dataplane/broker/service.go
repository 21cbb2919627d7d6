package broker

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
)

// Service is one broker: it serves the Pulsar binary protocol, owns the
// topics opened on it and their subscriptions.
//
// Lock order: Service.mu, then Topic.mu, then Subscription.mu; a conn's
// own mutex is taken last and never held while calling into topics.
type Service struct {
	// replPools shares replicator connections per remote cluster
	// (replication.go).
	replPools replPools

	cfg     Config
	md      metadata.Store
	res     *Resources
	mlf     *ledger.Factory
	schemas schemaRegistry
	log     *slog.Logger

	ln       net.Listener // nil when BinaryAddr is "off"
	tlsLn    net.Listener // nil without TLSAddr
	stopping chan struct{}
	wg       sync.WaitGroup

	mu     sync.Mutex
	topics map[string]topicSlot // by TopicName.ledgerName (see nameIn)
	conns  map[*conn]struct{}

	own     *ownership // membership and bundle ownership
	metrics *metrics
	rates   rateMeter   // load-report rates
	pending *byteBudget // pending publish bytes, broker-wide
	nameSeq atomic.Int64
	pw      policyWatch    // newest namespace policies seen (policywatch.go)
	tpv     recordView     // topic-level policies (policyfollow.go)
	rgv     recordView     // resource group records (policyfollow.go)
	cv      recordView     // cluster records (migration.go)
	rgs     resourceGroups // resource groups' buckets (resourcegroup.go)
	// limitGen counts changes of topic policies and resource groups
	// (ratelimits.go catchUpLimits).
	limitGen atomic.Uint64
	// limInterned maps a topicLimits value to the one pointer topics with
	// it share (ratelimits.go internLimits); it holds one entry per
	// distinct set of limits ever resolved.
	limInterned sync.Map
	// authGen changes whenever a tenant or namespace record may have
	// changed: cached authorization decisions of an older gen are stale.
	authGen atomic.Uint64
	// denialLog rate-limits the log lines of authorization refusals.
	denialLog denialLog
	// internalKey signs and checks calls between the cluster's brokers,
	// made with peerHTTP (internalauth.go).
	internalKey  internalKey
	peerHTTPOnce sync.Once
	peerHTTP     *http.Client
}

// topicSlot is a registered topic: loaded (topic) or being opened (fut).
// A loaded topic costs the registry no allocation of its own: a million
// topics make every word count.
type topicSlot struct {
	topic    *Topic
	fut      *topicFuture
	deleting chan struct{} // closed when a deletion of the name ends (beginDelete)
}

// topicFuture is a topic being opened; concurrent opens of one name share
// it, and find the outcome in it once done is closed.
type topicFuture struct {
	done  chan struct{}
	topic *Topic
	err   error
}

// shutdownClosers is how many topics Shutdown closes at once.
const shutdownClosers = 64

// New returns a broker over a metadata store and a managed-ledger factory.
func New(cfg Config, md metadata.Store, mlf *ledger.Factory) (*Service, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{
		cfg: cfg, md: md, res: NewResources(md), mlf: mlf, log: cfg.Logger, schemas: schemaRegistry{md},
		stopping: make(chan struct{}),
		topics:   map[string]topicSlot{},
		conns:    map[*conn]struct{}{},
		pending:  newByteBudget(cfg.MaxPendingPublishBytes),
		tpv:      recordView{prefix: topicPoliciesPath},
		rgv:      recordView{prefix: resourceGroupsPath},
		cv:       recordView{prefix: clustersPath},
	}
	s.res.onNamespace = s.namespaceWritten
	s.pw.authGen = &s.authGen
	s.metrics = newMetrics(s)
	return s, nil
}

// Resources returns the broker's tenant/namespace/topic metadata layer.
func (s *Service) Resources() *Resources { return s.res }

// Config returns the effective configuration.
func (s *Service) Config() Config { return s.cfg }

// Start listens on BinaryAddr and serves connections until Shutdown.
func (s *Service) Start(ctx context.Context) error {
	closeListeners := func() {
		if s.ln != nil {
			s.ln.Close()
		}
		if s.tlsLn != nil {
			s.tlsLn.Close()
		}
	}
	if s.cfg.BinaryAddr != "off" {
		ln, err := net.Listen("tcp", s.cfg.BinaryAddr)
		if err != nil {
			return fmt.Errorf("broker: listen: %w", err)
		}
		s.ln = ln
	}
	if s.cfg.TLSAddr != "" {
		ln, err := net.Listen("tcp", s.cfg.TLSAddr)
		if err != nil {
			closeListeners()
			return fmt.Errorf("broker: TLS listen: %w", err)
		}
		s.tlsLn = ln
	}
	if s.cfg.AdvertisedAddr == "" {
		if s.ln != nil {
			s.cfg.AdvertisedAddr = s.ln.Addr().String()
		} else {
			s.cfg.AdvertisedAddr = s.tlsLn.Addr().String()
		}
	}
	if s.tlsLn != nil && s.cfg.AdvertisedTLSAddr == "" {
		host, _, _ := net.SplitHostPort(s.cfg.AdvertisedAddr)
		_, port, _ := net.SplitHostPort(s.tlsLn.Addr().String())
		s.cfg.AdvertisedTLSAddr = net.JoinHostPort(host, port)
	}
	s.own = newOwnership(s)
	if err := s.own.start(ctx); err != nil {
		closeListeners()
		return err
	}
	s.startPolicyWatch()
	s.startPolicyFollowers()
	s.wg.Add(3)
	if s.ln != nil {
		s.wg.Add(1)
		go s.acceptLoop(s.ln, false)
	}
	if s.tlsLn != nil {
		s.wg.Add(1)
		go s.acceptLoop(s.tlsLn, true)
	}
	go s.topicPassLoop(s.cfg.MessageTTLCheckInterval, "message expiry", (*Topic).expireMessages)
	go s.topicPassLoop(s.cfg.BacklogQuotaCheckInterval, "backlog quota check", (*Topic).checkBacklogQuota)
	go s.topicPassLoop(s.cfg.CompactionCheckInterval, "compaction check", (*Topic).checkCompaction)
	s.log.Info("broker serving", "addr", s.cfg.BinaryAddr, "tls", s.cfg.TLSAddr, "advertised", s.cfg.AdvertisedAddr,
		"authentication", s.AuthEnabled(), "authorization", s.AuthzEnabled())
	return nil
}

// Addr returns the bound plain-text binary-protocol address (nil when
// BinaryAddr is "off").
func (s *Service) Addr() net.Addr {
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// TLSAddr returns the bound TLS address, or nil.
func (s *Service) TLSAddr() net.Addr {
	if s.tlsLn == nil {
		return nil
	}
	return s.tlsLn.Addr()
}

// ServiceURL returns the pulsar:// URL clients use for this broker.
func (s *Service) ServiceURL() string { return "pulsar://" + s.cfg.AdvertisedAddr }

// ServiceURLTLS returns the pulsar+ssl:// URL, or "" without TLS.
func (s *Service) ServiceURLTLS() string {
	if s.cfg.AdvertisedTLSAddr == "" {
		return ""
	}
	return "pulsar+ssl://" + s.cfg.AdvertisedTLSAddr
}

// tlsHandshakeTimeout bounds a TLS client's handshake.
const tlsHandshakeTimeout = 10 * time.Second

func (s *Service) acceptLoop(ln net.Listener, useTLS bool) {
	defer s.wg.Done()
	for {
		nc, err := ln.Accept()
		if err != nil {
			select {
			case <-s.stopping:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			s.log.Error("broker accept failed", "err", err)
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if useTLS {
				tc := tls.Server(nc, s.cfg.TLSConfig)
				tc.SetDeadline(time.Now().Add(tlsHandshakeTimeout))
				if err := tc.Handshake(); err != nil {
					s.log.Warn("broker TLS handshake failed", "remote", nc.RemoteAddr().String(), "err", err)
					tc.Close()
					return
				}
				tc.SetDeadline(time.Time{})
				nc = tc
			}
			c := newConn(s, nc)
			s.mu.Lock()
			select {
			case <-s.stopping:
				s.mu.Unlock()
				nc.Close()
				return
			default:
			}
			s.conns[c] = struct{}{}
			s.mu.Unlock()
			c.serve()
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// Shutdown stops accepting, closes every connection and topic, and waits
// for the goroutines it started.
func (s *Service) Shutdown(ctx context.Context) error {
	select {
	case <-s.stopping:
		return nil
	default:
	}
	close(s.stopping)
	if s.ln != nil {
		s.ln.Close()
	}
	if s.tlsLn != nil {
		s.tlsLn.Close()
	}
	s.mu.Lock()
	for c := range s.conns {
		c.close()
	}
	slots := make([]topicSlot, 0, len(s.topics))
	for _, sl := range s.topics {
		slots = append(slots, sl)
	}
	s.mu.Unlock()
	// Topics are closed shutdownClosers at a time: closing one that was
	// written waits for metadata writes (its ledger's close record, its
	// own record), and a broker with many topics would otherwise take
	// that long times their number to stop.
	var (
		errs  []error
		errMu sync.Mutex
		wg    sync.WaitGroup
		sem   = make(chan struct{}, shutdownClosers)
	)
	for _, sl := range slots {
		t := sl.topic
		if sl.fut != nil {
			<-sl.fut.done
			t = sl.fut.topic
		}
		if t == nil {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(t *Topic) { // joined by wg.Wait below
			defer wg.Done()
			err := t.close(ctx)
			<-sem
			errMu.Lock()
			errs = append(errs, err)
			errMu.Unlock()
		}(t)
	}
	wg.Wait()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, ctx.Err())
	}
	return errors.Join(errs...)
}

// autoCreate reports whether t may be created on first use under the
// namespace policies p, and as how many partitions (0: non-partitioned).
func (s *Service) autoCreate(p Policies, t TopicName) (bool, int) {
	if o := p.AutoTopicCreation; o != nil {
		if !o.Allow {
			return false, 0
		}
		if o.TopicType == "partitioned" && t.PartitionIndex() < 0 {
			return true, max(o.DefaultPartitions, 1)
		}
		return true, 0
	}
	return !s.cfg.DisableAutoTopicCreation, 0
}

// namespacePolicies returns t's namespace policies for a lookup: the
// snapshot the policy watch keeps current (policywatch.go), read from the
// store only while the watch is not live or the namespace is not known yet.
// A lookup used to read the record every time: 9% of the standalone's CPU
// while W5 attached a producer to each of 100,000 topics. A missing
// namespace is TopicNotFound for the client.
func (s *Service) namespacePolicies(ctx context.Context, t TopicName) (Policies, error) {
	snap, err := s.namespaceSnapshot(ctx, t)
	if err != nil {
		return Policies{}, err
	}
	return snap.Policies, nil
}

// topicOpen says whether opening a topic may create it.
type topicOpen int

const (
	openExisting   topicOpen = iota // the topic must exist
	openAutoCreate                  // create it if the namespace's auto-creation allows
	// createTopic creates it and fails with ErrAlreadyExists if it exists
	// (the admin API's create; the caller checked that no partitioned
	// topic has the name).
	createTopic
	// openReplicated opens or creates it for a remote cluster's replicator,
	// whatever the auto-creation policy: a replicated namespace's topics
	// exist wherever they are written.
	openReplicated
)

// GetTopic returns the open topic named t, opening it (and, with create,
// creating it when auto-creation allows) if needed.
func (s *Service) GetTopic(ctx context.Context, t TopicName, create bool) (*Topic, error) {
	mode := openExisting
	if create {
		mode = openAutoCreate
	}
	return s.getTopic(ctx, t, mode)
}

func (s *Service) getTopic(ctx context.Context, t TopicName, mode topicOpen) (*Topic, error) {
	key := t.ledgerName() // registry key and managed ledger name
	t = t.nameIn(key)
	for {
		s.mu.Lock()
		select {
		case <-s.stopping:
			s.mu.Unlock()
			return nil, protocol.ErrServiceNotReady.WithMessage("broker is shutting down")
		default:
		}
		sl, ok := s.topics[key]
		if sl.deleting != nil {
			s.mu.Unlock()
			select {
			case <-sl.deleting:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if sl.topic != nil {
			s.mu.Unlock()
			if mode == createTopic {
				return nil, fmt.Errorf("%w: topic %s", ErrAlreadyExists, t)
			}
			return sl.topic, nil
		}
		if !ok {
			f := &topicFuture{done: make(chan struct{})}
			s.topics[key] = topicSlot{fut: f}
			s.mu.Unlock()
			gen := s.limitGen.Load()
			var l lease
			f.topic, l, f.err = s.openTopic(ctx, t, key, mode)
			if f.err == nil {
				if f.err = s.publishTopic(ctx, key, f, l); f.err != nil {
					f.topic = nil
				}
			} else {
				s.mu.Lock()
				delete(s.topics, key)
				s.mu.Unlock()
			}
			close(f.done)
			if f.topic != nil {
				s.catchUpPolicies(f.topic)
				f.topic.refreshMigration()
				s.catchUpLimits(f.topic, gen)
			}
			return f.topic, f.err
		}
		f := sl.fut
		s.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if mode != createTopic {
			return f.topic, f.err
		}
		if f.topic != nil {
			return nil, fmt.Errorf("%w: topic %s", ErrAlreadyExists, t)
		}
		// Another open of the topic failed (it may not have existed):
		// the registry no longer has it, try to create it.
	}
}

// openTopic opens t; name is t.ledgerName(), the string the registry keeps.
func (s *Service) openTopic(ctx context.Context, t TopicName, name string, mode topicOpen) (*Topic, lease, error) {
	// The namespace policies read here govern the topic's creation; the
	// snapshot taken from them is kept current while the topic stays open
	// (policywatch.go).
	snap, err := s.namespaceSnapshot(ctx, t)
	if err != nil {
		return nil, lease{}, err
	}
	pol := snap.Policies
	start := time.Now()
	l, err := s.checkOwned(ctx, pol, t)
	if err != nil {
		return nil, lease{}, err
	}
	owned := time.Now()
	if t.PartitionIndex() < 0 && mode != createTopic {
		n, err := s.res.Partitions(ctx, t)
		if err != nil {
			return nil, lease{}, err
		}
		if n > 0 {
			return nil, lease{}, protocol.ErrNotAllowed.WithMessage("topic " + t.String() + " is partitioned; use its partitions")
		}
	}
	if t.Domain == NonPersistent {
		tp := newTopic(s, t, nil)
		tp.pol.cur.Store(snap)
		tp.refreshLimitsLocked() // not visible yet: nobody else holds pol.mu
		return tp, l, nil
	}
	// Whether the managed ledger exists is learnt by opening (or
	// creating) it, not by a separate read.
	var ml *ledger.ManagedLedger
	allowed, _ := s.autoCreate(pol, t)
	if mode == openReplicated {
		mode, allowed = openAutoCreate, true
	}
	if err := s.checkTopicRoom(ctx, snap, t, name, mode, allowed); err != nil {
		return nil, lease{}, err
	}
	if !s.own.holds(l) {
		// Opening the managed ledger would fence a new owner's ledger.
		return nil, lease{}, errLeaseLost(l.bundle)
	}
	switch {
	case mode == createTopic:
		// The record is created only if no partitioned topic has the name:
		// one metadata transaction, atomic with a concurrent creation of
		// the partitioned topic (a read before it would not be).
		var guard []string
		if t.PartitionIndex() < 0 {
			guard = []string{partitionedKey(t)}
		}
		ml, err = s.mlf.CreateUnless(ctx, name, ledgerConfig(pol), guard...)
		if errors.Is(err, ledger.ErrExists) {
			if len(guard) > 0 {
				if n, perr := s.res.Partitions(ctx, t); perr == nil && n > 0 {
					return nil, lease{}, fmt.Errorf("%w: partitioned topic %s already exists", ErrAlreadyExists, t)
				}
			}
			return nil, lease{}, fmt.Errorf("%w: topic %s", ErrAlreadyExists, t)
		}
	case mode == openAutoCreate && allowed:
		ml, err = s.mlf.Open(ctx, name, ledgerConfig(pol))
	default:
		ml, err = s.mlf.OpenExisting(ctx, name, ledgerConfig(pol))
		if errors.Is(err, ledger.ErrNotFound) {
			return nil, lease{}, protocol.ErrTopicNotFound.WithMessage("Topic " + t.String() + " does not exist")
		}
	}
	if err != nil {
		return nil, lease{}, protocol.ErrServiceNotReady.WithMessage("open topic: " + err.Error())
	}
	opened := time.Now()
	// The factory hands back a managed ledger that is already open as it
	// is: make sure it runs with the namespace's retention and persistence
	// (a no-op when they are already its own).
	if err := ml.Reconfigure(ledgerConfig(pol)); err != nil {
		s.log.Warn("apply retention/persistence policies failed", "topic", t.String(), "err", err)
	}
	tp := newTopic(s, t, ml)
	tp.pol.cur.Store(snap)
	tp.refreshLimitsLocked() // not visible yet: nobody else holds pol.mu
	s.metrics.topicLoads.Inc()
	u, err := loadTopicUsage(ctx, tp)
	if err != nil {
		tp.close(ctx)
		return nil, lease{}, err
	}
	tp.usage = u
	if tp.dedupOn.Load() {
		d, err := loadDedup(ctx, ml)
		if err != nil {
			tp.close(ctx)
			return nil, lease{}, err
		}
		tp.dedup.Store(d)
	}
	if err := tp.loadSubscriptions(ctx); err != nil {
		tp.close(ctx)
		return nil, lease{}, err
	}
	tp.refreshReplication()
	// The steps of a load, for failover analysis: the ownership check (a
	// bundle acquisition on first use), the managed ledger's open (with the
	// recovery of a ledger its previous owner left open) and the rest
	// (usage, dedup state, subscriptions).
	s.log.Info("topic loaded", "topic", t.String(), "ownershipMs", owned.Sub(start).Milliseconds(),
		"ledgerMs", opened.Sub(owned).Milliseconds(), "restMs", time.Since(opened).Milliseconds())
	if h := topicLoadHook.Load(); h != nil {
		(*h)(t)
	}
	return tp, l, nil
}

// topicLoadHook, when set (tests), runs at the end of every load of a
// persistent topic: the topic is open, not yet published to the registry.
var topicLoadHook atomic.Pointer[func(TopicName)]

// checkTopicRoom refuses to create a persistent topic (not a partition of
// a partitioned topic: those were counted when it was created) in a
// namespace at its max_topics_per_namespace. Only with a limit set does it
// learn whether the topic exists first.
func (s *Service) checkTopicRoom(ctx context.Context, snap *policySnapshot, t TopicName, name string, mode topicOpen, allowed bool) error {
	if limit, _ := parseInt(snap.Other["max_topics_per_namespace"]); limit <= 0 || t.PartitionIndex() >= 0 {
		return nil
	}
	if mode == openExisting || (mode == openAutoCreate && !allowed) {
		return nil
	}
	if exists, err := s.mlf.Exists(ctx, name); err != nil || exists {
		return err // creating an existing topic fails (or opens it) as before
	}
	room, err := s.topicsRoom(ctx, snap, t, 1)
	switch {
	case err != nil:
		return err
	case room:
		return nil
	case mode == createTopic:
		return fmt.Errorf("%w: %s", ErrPrecondition, tooManyTopicsMsg)
	}
	return errTooManyTopics
}

// ledgerConfig maps the namespace's retention and persistence policies onto
// the managed ledger: retention in minutes and MB (-1 meaning no limit), and
// the bookkeeperEnsemble/WriteQuorum/AckQuorum of new ledgers. Without
// either policy the factory's defaults apply (acknowledged data is not
// retained; the cluster's replication).
func ledgerConfig(p Policies) *ledger.Config {
	cfg := &ledger.Config{}
	set := false
	if r := p.Retention; r != nil {
		rt, rs := time.Duration(-1), int64(-1)
		if r.RetentionTimeInMinutes >= 0 {
			rt = time.Duration(r.RetentionTimeInMinutes) * time.Minute
		}
		if r.RetentionSizeInMB >= 0 {
			rs = r.RetentionSizeInMB << 20
		}
		// One zero and one limit is invalid in Pulsar too: ignored.
		if (rt == 0) == (rs == 0) {
			cfg.RetentionTime, cfg.RetentionSize, set = rt, rs, true
		}
	}
	if raw, ok := p.Other["persistence"]; ok {
		var pp struct {
			E  int `json:"bookkeeperEnsemble"`
			Qw int `json:"bookkeeperWriteQuorum"`
			Qa int `json:"bookkeeperAckQuorum"`
		}
		if json.Unmarshal(raw, &pp) == nil && pp.E >= pp.Qw && pp.Qw >= pp.Qa && pp.Qa >= 1 {
			cfg.Ensemble, cfg.WriteQuorum, cfg.AckQuorum, set = pp.E, pp.Qw, pp.Qa, true
		}
	}
	if op, ok := offloadPolicy(p); ok {
		cfg.Offload, set = op, true
	}
	if !set {
		return nil
	}
	return cfg
}

// forgetTopic drops a closed topic from the registry.
func (s *Service) forgetTopic(t *Topic) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := t.name.ledgerName()
	if s.topics[key].topic == t {
		delete(s.topics, key)
	}
}

// openTopics returns the topics currently open.
func (s *Service) openTopics() []*Topic {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Topic, 0, len(s.topics))
	for _, sl := range s.topics {
		if sl.topic != nil {
			out = append(out, sl.topic)
		}
	}
	return out
}

// generateProducerName returns a broker-unique producer name.
func (s *Service) generateProducerName() string {
	return fmt.Sprintf("%s-%d", s.cfg.ClusterName, s.nameSeq.Add(1))
}

// byteBudget bounds bytes in flight; acquire blocks while the budget is
// exhausted (one over-budget acquire is let through when nothing is held,
// so a message larger than the budget cannot deadlock).
type byteBudget struct {
	mu    sync.Mutex
	cond  *sync.Cond
	limit int64
	used  int64
}

func newByteBudget(limit int64) *byteBudget {
	b := &byteBudget{limit: limit}
	b.cond = sync.NewCond(&b.mu)
	return b
}

func (b *byteBudget) acquire(n int64, stop <-chan struct{}) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.used > 0 && b.used+n > b.limit {
		select {
		case <-stop:
			return false
		default:
		}
		b.cond.Wait()
	}
	b.used += n
	return true
}

func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
	b.cond.Broadcast()
}

// wakeAll releases waiters so they can observe a stop channel. It takes
// the lock so the wake-up cannot fall between a waiter's check of its stop
// channel and its Wait.
func (b *byteBudget) wakeAll() {
	b.mu.Lock()
	b.cond.Broadcast()
	b.mu.Unlock()
}
