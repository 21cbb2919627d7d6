package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bundle"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
)

// Cluster membership and bundle ownership, kept in the metadata store:
//
//	/loadbalance/brokers/<broker id>        ephemeral: BrokerInfo (with its load report)
//	/loadbalance/leader                     election of the load manager
//	/namespace/<tenant>/<ns>/<0xlo_0xhi>    ephemeral: OwnerInfo of the bundle's owner
//
// A broker id is the broker's advertised binary address (host:port). Every
// ephemeral key is bound to the broker's metadata session: when the broker
// dies or is cut off for longer than SessionTTL its keys vanish and any
// broker may take its bundles. The new owner opens each topic's managed
// ledger, which recovers (fences) the last ledger on the bookies, so the
// old owner can never append again even if it comes back.
const (
	brokersPath = "/loadbalance/brokers"
	leaderPath  = "/loadbalance/leader"
	bundlesPath = "/namespace"
)

// BrokerInfo is a broker's registration.
type BrokerInfo struct {
	BrokerID      string `json:"brokerId"`
	ServiceURL    string `json:"pulsarServiceUrl"`
	WebServiceURL string `json:"webServiceUrl"`
	// ServiceURLTLS and WebServiceURLTLS are empty without TLS.
	ServiceURLTLS    string     `json:"pulsarServiceUrlTls,omitempty"`
	WebServiceURLTLS string     `json:"webServiceUrlTls,omitempty"`
	Cluster          string     `json:"cluster"`
	Instance         string     `json:"instance"`
	StartTime        int64      `json:"startTimestamp"`
	Load             LoadReport `json:"load"`
}

// LoadReport is what the load manager balances on.
type LoadReport struct {
	Timestamp     int64   `json:"timestamp"`
	Bundles       int     `json:"bundles"`
	Topics        int     `json:"topics"`
	Producers     int     `json:"producers"`
	Consumers     int     `json:"consumers"`
	MsgRateIn     float64 `json:"msgRateIn"`
	MsgRateOut    float64 `json:"msgRateOut"`
	ThroughputIn  float64 `json:"msgThroughputIn"`
	ThroughputOut float64 `json:"msgThroughputOut"`
	// CPU is the broker process's CPU use in cores over the last report
	// period; MemoryBytes its resident memory.
	CPU         float64 `json:"cpu"`
	MemoryBytes int64   `json:"memoryBytes"`
	// BundleTopics is the number of open topics per owned bundle.
	BundleTopics []bundleLoad `json:"bundleTopics,omitempty"`
}

// OwnerInfo is the value of a bundle's ownership key.
type OwnerInfo struct {
	BrokerID  string `json:"brokerId"`
	NativeURL string `json:"nativeUrl"`
	HTTPURL   string `json:"httpUrl"`
	// NativeURLTLS and HTTPURLTLS are empty when the broker serves no TLS.
	NativeURLTLS string `json:"nativeUrlTls,omitempty"`
	HTTPURLTLS   string `json:"httpUrlTls,omitempty"`
	Instance     string `json:"instance"`
	AcquiredAt   int64  `json:"acquiredAt"`
	// HandoverTo is set while the owner unloads the bundle to another
	// broker (its pulsar:// URL): that broker waits for the release instead
	// of refusing the clients sent to it.
	HandoverTo string `json:"handoverTo,omitempty"`
}

// LookupResult says where a topic is served. With Redirect the client must
// ask BrokerURL again (authoritatively); otherwise BrokerURL serves it.
type LookupResult struct {
	BrokerURL    string
	HTTPURL      string
	BrokerURLTLS string // "" when the broker serves no TLS
	HTTPURLTLS   string
	Redirect     bool
}

func ownerKey(tenant, ns string, r bundle.Range) string {
	return bundlesPath + "/" + tenant + "/" + ns + "/" + r.String()
}

// bundleKey names a bundle in memory: "tenant/ns/0xlo_0xhi".
func bundleKey(tenant, ns string, r bundle.Range) string {
	return tenant + "/" + ns + "/" + r.String()
}

// ownership is a broker's membership and the bundles it owns.
//
// A topic is served only under a live ownership lease: its bundle's key,
// created in the broker's current metadata session. A load takes a lease
// (checkOwned) before it opens the topic and publishes the topic to the
// registry only if the lease still holds (publishTopic). Every release of
// bundles (session loss, unload, split) changes the owned set under mu and
// moves released on, then closes the open topics it concerns; a publish
// checks the lease and, under Service.mu, that released did not move
// since, so a release either sees the published topic or the publish sees
// the release.
//
// Lock order: ownership.mu is taken after Service.mu is released (never
// while holding a topic's or subscription's lock).
type ownership struct {
	s        *Service
	md       metadata.Store
	ttl      time.Duration
	instance string

	mu   sync.Mutex
	info BrokerInfo
	sess metadata.Session
	// epoch counts the sessions that were lost: an acquisition begun under
	// an earlier epoch is not recorded, a lease of one is void.
	epoch uint64
	owned map[string]OwnerInfo // by bundleKey
	// unloading bundles refuse topic opens until released.
	unloading map[string]bool
	// releases are the waits for a gone owner's key to vanish, one per
	// ownership key, shared by the lookups that wait (ownerwait.go).
	releases map[string]*releaseWait
	leader   atomic.Bool
	// released moves on, under mu, whenever bundles stop being owned here.
	released atomic.Uint64
}

// lease is what a topic load holds: the topic's bundle, owned here in
// session epoch.
type lease struct {
	bundle string
	epoch  uint64
}

// errLeaseLost refuses an acquisition or a load whose bundle stopped being
// owned here while it ran; the client looks the topic up again.
func errLeaseLost(bk string) error {
	return protocol.ErrServiceNotReady.WithMessage("bundle " + bk + " is no longer owned by this broker (its metadata session ended, or the bundle was unloaded or split)")
}

// sessionLiveLocked reports whether the current session has not ended.
func (o *ownership) sessionLiveLocked() bool {
	if o.sess == nil {
		return false
	}
	select {
	case <-o.sess.Done():
		return false
	default:
		return true
	}
}

// holds reports whether l is still a live lease: same session epoch, the
// session alive, the bundle owned and not being unloaded.
func (o *ownership) holds(l lease) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, owned := o.owned[l.bundle]
	return l.epoch == o.epoch && owned && !o.unloading[l.bundle] && o.sessionLiveLocked()
}

func newOwnership(s *Service) *ownership {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &ownership{
		s: s, md: s.md, ttl: s.cfg.SessionTTL,
		instance:  hex.EncodeToString(b[:]),
		owned:     map[string]OwnerInfo{},
		unloading: map[string]bool{},
		releases:  map[string]*releaseWait{},
	}
}

func (o *ownership) self() OwnerInfo {
	return OwnerInfo{
		BrokerID: o.s.cfg.AdvertisedAddr, NativeURL: o.s.ServiceURL(), HTTPURL: o.s.cfg.WebServiceURL,
		NativeURLTLS: o.s.ServiceURLTLS(), HTTPURLTLS: o.s.cfg.WebServiceURLTLS,
		Instance: o.instance,
	}
}

// start opens the session, registers the broker and starts the goroutines
// that keep the registration and load report current and campaign for
// load-manager leadership.
func (o *ownership) start(ctx context.Context) error {
	o.info = BrokerInfo{
		BrokerID: o.s.cfg.AdvertisedAddr, ServiceURL: o.s.ServiceURL(), WebServiceURL: o.s.cfg.WebServiceURL,
		ServiceURLTLS: o.s.ServiceURLTLS(), WebServiceURLTLS: o.s.cfg.WebServiceURLTLS,
		Cluster: o.s.cfg.ClusterName, Instance: o.instance, StartTime: time.Now().UnixMilli(),
	}
	if err := o.register(ctx); err != nil {
		return err
	}
	o.s.wg.Add(1)
	go o.run()
	return nil
}

// register starts a new session and creates the registration key, removing
// one a dead earlier instance at the same address left behind.
func (o *ownership) register(ctx context.Context) error {
	sess, err := o.md.NewSession(ctx, o.ttl)
	if err != nil {
		return fmt.Errorf("broker: metadata session: %w", err)
	}
	key := brokersPath + "/" + o.info.BrokerID
	for attempt := 0; ; attempt++ {
		b, _ := json.Marshal(o.currentInfo())
		_, err = sess.CreateEphemeral(ctx, key, b)
		if err == nil {
			break
		}
		if !errors.Is(err, metadata.ErrExists) || attempt > 5 {
			sess.Close()
			return fmt.Errorf("broker: register %s: %w", key, err)
		}
		kv, gerr := o.md.Get(ctx, key)
		if gerr != nil {
			continue
		}
		var old BrokerInfo
		if json.Unmarshal(kv.Value, &old) == nil && old.Instance != o.instance {
			// The same address can be bound by one live process only, so an
			// earlier instance's key is stale: remove it and its bundles.
			o.s.log.Info("removing stale broker registration", "broker", o.info.BrokerID, "instance", old.Instance)
			_ = o.md.Delete(ctx, key, kv.Version)
			o.removeStaleOwnership(ctx, old.Instance)
		}
	}
	o.mu.Lock()
	o.sess = sess
	o.mu.Unlock()
	return nil
}

// removeStaleOwnership deletes the ownership keys a dead earlier instance at
// our address holds, so its bundles are free at once instead of after its
// session's TTL.
func (o *ownership) removeStaleOwnership(ctx context.Context, instance string) {
	tenants, _ := o.md.Children(ctx, bundlesPath)
	for _, t := range tenants {
		nss, _ := o.md.Children(ctx, bundlesPath+"/"+t)
		for _, ns := range nss {
			ranges, _ := o.md.Children(ctx, bundlesPath+"/"+t+"/"+ns)
			for _, r := range ranges {
				key := bundlesPath + "/" + t + "/" + ns + "/" + r
				kv, err := o.md.Get(ctx, key)
				if err != nil {
					continue
				}
				var oi OwnerInfo
				if json.Unmarshal(kv.Value, &oi) == nil && oi.Instance == instance {
					_ = o.md.Delete(ctx, key, kv.Version)
				}
			}
		}
	}
}

func (o *ownership) currentInfo() BrokerInfo {
	info := o.info
	info.Load = o.s.loadReport()
	o.mu.Lock()
	info.Load.Bundles = len(o.owned)
	o.mu.Unlock()
	return info
}

func (o *ownership) session() metadata.Session {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.sess
}

// run keeps the load report fresh, campaigns for leadership and, when the
// session is lost, drops every bundle (closing their topics) and registers
// again with a new session.
func (o *ownership) run() {
	defer o.s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-o.s.stopping
		cancel()
	}()
	for {
		sess := o.session()
		lctx, lcancel := context.WithCancel(ctx)
		var lwg sync.WaitGroup
		lwg.Add(1)
		go func() {
			defer lwg.Done()
			o.campaign(lctx, sess)
		}()
		tick := time.NewTicker(o.s.cfg.LoadReportInterval)
		lost := false
		for !lost {
			select {
			case <-ctx.Done():
				tick.Stop()
				lcancel()
				lwg.Wait()
				sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
				o.releaseAll(sctx)
				c()
				sess.Close()
				return
			case <-sess.Done():
				lost = true
			case <-tick.C:
				b, _ := json.Marshal(o.currentInfo())
				if _, err := sess.PutEphemeral(ctx, brokersPath+"/"+o.info.BrokerID, b, metadata.AnyVersion); err != nil && ctx.Err() == nil {
					o.s.log.Warn("broker load report failed", "err", err)
				}
			}
		}
		tick.Stop()
		lcancel()
		lwg.Wait()
		o.s.log.Warn("broker metadata session lost: closing owned topics")
		o.s.metrics.sessionLost.Inc()
		o.dropAll()
		for ctx.Err() == nil {
			if err := o.register(ctx); err == nil {
				break
			} else {
				o.s.log.Warn("broker re-registration failed", "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// campaign holds load-manager leadership while this session lives.
func (o *ownership) campaign(ctx context.Context, sess metadata.Session) {
	b, _ := json.Marshal(o.info)
	l, err := sess.Elect(ctx, leaderPath, b)
	if err != nil {
		return
	}
	o.leader.Store(true)
	o.s.log.Info("broker is the load manager leader")
	lm := newLoadManager(o)
	lm.run(ctx, l.Lost())
	o.leader.Store(false)
	if ctx.Err() != nil {
		rctx, c := context.WithTimeout(context.Background(), time.Second)
		_ = l.Resign(rctx)
		c()
	}
}

// dropAll forgets every bundle after the session was lost (the keys are gone
// with it) and closes their topics. Loads and acquisitions begun under the
// lost session are refused from now on (epoch).
func (o *ownership) dropAll() {
	o.mu.Lock()
	o.s.metrics.bundleReleased.WithLabelValues("session_lost").Add(float64(len(o.owned)))
	o.owned = map[string]OwnerInfo{}
	o.epoch++
	o.released.Add(1)
	o.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, t := range o.s.openTopics() {
		_ = t.close(ctx)
	}
}

// releaseAll closes every owned bundle's topics and deletes its key (clean
// shutdown: the bundles are free at once).
func (o *ownership) releaseAll(ctx context.Context) {
	o.mu.Lock()
	keys := make([]string, 0, len(o.owned))
	for k := range o.owned {
		keys = append(keys, k)
	}
	o.mu.Unlock()
	for _, t := range o.s.openTopics() {
		_ = t.close(ctx)
	}
	for _, k := range keys {
		o.deleteOwner(ctx, k)
	}
	o.s.metrics.bundleReleased.WithLabelValues("shutdown").Add(float64(len(keys)))
}

func (o *ownership) deleteOwner(ctx context.Context, bk string) {
	key := bundlesPath + "/" + bk
	if kv, err := o.md.Get(ctx, key); err == nil {
		var oi OwnerInfo
		if json.Unmarshal(kv.Value, &oi) == nil && oi.Instance == o.instance {
			_ = o.md.Delete(ctx, key, kv.Version)
		}
	}
	o.mu.Lock()
	delete(o.owned, bk)
	o.released.Add(1)
	o.mu.Unlock()
}

// namespaceBundles returns the bundles of a namespace from its policies.
func (s *Service) namespaceBundles(p Policies) bundle.Boundaries {
	if p.Bundles != nil {
		if b, err := bundle.Parse(p.Bundles.Boundaries); err == nil {
			return b
		}
	}
	return bundle.Even(s.cfg.DefaultBundles)
}

// bundleOf returns the bundle of topic t under namespace policies p.
func (s *Service) bundleOf(p Policies, t TopicName) bundle.Range {
	return s.namespaceBundles(p).Find(bundle.Hash(t.String()))
}

// getOwner reads a bundle's owner. A key left by a dead earlier instance of
// this broker is removed and reported absent.
func (o *ownership) getOwner(ctx context.Context, key string) (OwnerInfo, bool, error) {
	kv, err := o.md.Get(ctx, key)
	if errors.Is(err, metadata.ErrNotFound) {
		return OwnerInfo{}, false, nil
	}
	if err != nil {
		return OwnerInfo{}, false, err
	}
	var oi OwnerInfo
	if err := json.Unmarshal(kv.Value, &oi); err != nil {
		return OwnerInfo{}, false, fmt.Errorf("broker: corrupt ownership record %s: %w", key, err)
	}
	if oi.BrokerID == o.info.BrokerID && oi.Instance != o.instance {
		_ = o.md.Delete(ctx, key, kv.Version)
		return OwnerInfo{}, false, nil
	}
	return oi, true, nil
}

// acquire makes this broker the owner of a bundle if nobody owns it, and
// returns the owner either way.
func (o *ownership) acquire(ctx context.Context, tenant, ns string, r bundle.Range) (OwnerInfo, error) {
	bk := bundleKey(tenant, ns, r)
	o.mu.Lock()
	if oi, ok := o.owned[bk]; ok {
		o.mu.Unlock()
		return oi, nil
	}
	if o.unloading[bk] {
		o.mu.Unlock()
		return OwnerInfo{}, protocol.ErrServiceNotReady.WithMessage("bundle " + bk + " is being unloaded")
	}
	sess, epoch := o.sess, o.epoch
	o.mu.Unlock()
	key := ownerKey(tenant, ns, r)
	for range 5 {
		oi, ok, err := o.getOwner(ctx, key)
		if err != nil {
			return OwnerInfo{}, err
		}
		if ok && oi.HandoverTo != "" && oi.HandoverTo == o.s.ServiceURL() {
			// Being handed to us: wait for the owner to let go.
			if err := o.waitReleased(ctx, key); err != nil {
				return OwnerInfo{}, err
			}
			continue
		}
		if ok {
			if oi.Instance == o.instance && !o.noteOwned(bk, oi, epoch) {
				return OwnerInfo{}, errLeaseLost(bk)
			}
			return oi, nil
		}
		me := o.self()
		me.AcquiredAt = time.Now().UnixMilli()
		b, _ := json.Marshal(me)
		_, err = sess.CreateEphemeral(ctx, key, b)
		if err == nil {
			if !o.noteOwned(bk, me, epoch) {
				// The session ended meanwhile: the key went with it.
				return OwnerInfo{}, errLeaseLost(bk)
			}
			o.s.metrics.bundleAcquired.Inc()
			o.s.log.Info("bundle acquired", "bundle", bk)
			return me, nil
		}
		if !errors.Is(err, metadata.ErrExists) {
			return OwnerInfo{}, protocol.ErrServiceNotReady.WithMessage("acquire bundle " + bk + ": " + err.Error())
		}
	}
	return OwnerInfo{}, protocol.ErrServiceNotReady.WithMessage("bundle " + bk + " ownership is contended")
}

// waitReleased polls until the ownership key is gone (bounded: a handover
// takes as long as closing the bundle's topics).
func (o *ownership) waitReleased(ctx context.Context, key string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := o.md.Get(ctx, key); errors.Is(err, metadata.ErrNotFound) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return protocol.ErrServiceNotReady.WithMessage("bundle handover did not complete")
}

// markHandover records in the ownership key that the bundle is moving to
// dest.
func (o *ownership) markHandover(ctx context.Context, bk, dest string) {
	key := bundlesPath + "/" + bk
	kv, err := o.md.Get(ctx, key)
	if err != nil {
		return
	}
	var oi OwnerInfo
	if json.Unmarshal(kv.Value, &oi) != nil || oi.Instance != o.instance {
		return
	}
	oi.HandoverTo = dest
	b, _ := json.Marshal(oi)
	if _, err := o.session().PutEphemeral(ctx, key, b, kv.Version); err != nil {
		o.s.log.Warn("bundle handover mark failed", "bundle", bk, "err", err)
	}
}

// noteOwned records that this broker owns bk, found or acquired under
// session epoch; it refuses (false) once that session is lost.
func (o *ownership) noteOwned(bk string, oi OwnerInfo, epoch uint64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if epoch != o.epoch || !o.sessionLiveLocked() {
		return false
	}
	o.owned[bk] = oi
	return true
}

// checkOwned is called before a topic is opened: this broker must own the
// topic's bundle, taking it when it is free (a client sent here by an
// unload's assigned-broker URL arrives without a lookup). It returns the
// lease the load holds.
func (s *Service) checkOwned(ctx context.Context, p Policies, t TopicName) (lease, error) {
	r := s.bundleOf(p, t)
	oi, err := s.own.acquire(ctx, t.Tenant, t.Namespace, r)
	if err != nil {
		return lease{}, err
	}
	if oi.Instance != s.own.instance {
		return lease{}, protocol.ErrServiceNotReady.WithMessage(fmt.Sprintf(
			"Namespace bundle %s/%s/%s for topic %s is served by %s, not by this broker", t.Tenant, t.Namespace, r, t, oi.BrokerID))
	}
	bk := bundleKey(t.Tenant, t.Namespace, r)
	s.own.mu.Lock()
	l := lease{bundle: bk, epoch: s.own.epoch}
	s.own.mu.Unlock()
	if !s.own.holds(l) {
		return lease{}, errLeaseLost(bk)
	}
	return l, nil
}

// publishTopic makes a loaded topic the registry's entry for key if its
// load's lease still holds (see ownership); otherwise it closes the topic
// and removes the load from the registry, and returns why.
func (s *Service) publishTopic(ctx context.Context, key string, f *topicFuture, l lease) error {
	for {
		rel := s.own.released.Load()
		if !s.own.holds(l) {
			break
		}
		s.mu.Lock()
		if s.own.released.Load() != rel {
			s.mu.Unlock()
			continue // a release ran meanwhile: check the lease again
		}
		if s.topics[key].fut == f {
			s.topics[key] = topicSlot{topic: f.topic}
		}
		s.mu.Unlock()
		return nil
	}
	s.log.Warn("topic load dropped: bundle ownership lost while loading", "topic", f.topic.name.String(), "bundle", l.bundle)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_ = f.topic.close(cctx)
	s.mu.Lock()
	if s.topics[key].fut == f {
		delete(s.topics, key)
	}
	s.mu.Unlock()
	return errLeaseLost(l.bundle)
}

// Lookup answers where topic is served. An owned bundle answers with its
// owner. A free bundle is taken by this broker when it is the least loaded
// or when the request is authoritative (another broker redirected it here);
// otherwise the client is redirected to the least loaded broker.
func (s *Service) Lookup(ctx context.Context, topic string, authoritative bool) (res LookupResult, err error) {
	defer func() {
		switch {
		case err != nil:
			s.metrics.lookups.WithLabelValues("failed").Inc()
		case res.Redirect:
			s.metrics.lookups.WithLabelValues("redirect").Inc()
		default:
			s.metrics.lookups.WithLabelValues("connect").Inc()
		}
	}()
	t, err := ParseTopicName(topic)
	if err != nil {
		return LookupResult{}, protocol.ErrInvalidTopicName.WithMessage(err.Error())
	}
	p, err := s.namespacePolicies(ctx, t)
	if err != nil {
		return LookupResult{}, err
	}
	r := s.bundleOf(p, t)
	bk := bundleKey(t.Tenant, t.Namespace, r)
	s.own.mu.Lock()
	oi, mine := s.own.owned[bk]
	s.own.mu.Unlock()
	if !mine {
		var ok bool
		oi, ok, err = s.own.getOwner(ctx, ownerKey(t.Tenant, t.Namespace, r))
		if err != nil {
			return LookupResult{}, err
		}
		if ok && oi.Instance != s.own.instance && s.own.ownerGone(ctx, oi) {
			// Its process is gone but its session has not expired yet:
			// answer once the ownership key vanishes instead of sending the
			// client to a dead address (whose reconnect backoff would
			// otherwise decide when it comes back).
			if s.own.awaitRelease(ctx, ownerKey(t.Tenant, t.Namespace, r), oi) {
				oi, ok, err = s.own.getOwner(ctx, ownerKey(t.Tenant, t.Namespace, r))
				if err != nil {
					return LookupResult{}, err
				}
			}
		}
		if !ok && !authoritative {
			if c, cerr := s.own.leastLoaded(ctx); cerr == nil && c.BrokerID != s.cfg.AdvertisedAddr {
				return LookupResult{BrokerURL: c.ServiceURL, HTTPURL: c.WebServiceURL,
					BrokerURLTLS: c.ServiceURLTLS, HTTPURLTLS: c.WebServiceURLTLS, Redirect: true}, nil
			}
		}
		if !ok {
			if oi, err = s.own.acquire(ctx, t.Tenant, t.Namespace, r); err != nil {
				return LookupResult{}, err
			}
		}
	}
	return LookupResult{BrokerURL: oi.NativeURL, HTTPURL: oi.HTTPURL, BrokerURLTLS: oi.NativeURLTLS, HTTPURLTLS: oi.HTTPURLTLS}, nil
}

// Brokers lists the registered brokers, sorted by id.
func (s *Service) Brokers(ctx context.Context) ([]BrokerInfo, error) {
	ids, err := s.md.Children(ctx, brokersPath)
	if err != nil {
		return nil, err
	}
	out := make([]BrokerInfo, 0, len(ids))
	for _, id := range ids {
		kv, err := s.md.Get(ctx, brokersPath+"/"+id)
		if err != nil {
			continue // gone meanwhile
		}
		var bi BrokerInfo
		if json.Unmarshal(kv.Value, &bi) == nil {
			out = append(out, bi)
		}
	}
	return out, nil
}

// LeaderBroker returns the load manager leader's registration.
func (s *Service) LeaderBroker(ctx context.Context) (BrokerInfo, error) {
	kv, err := s.own.session().Leader(ctx, leaderPath)
	if err != nil {
		return BrokerInfo{}, err
	}
	var bi BrokerInfo
	return bi, json.Unmarshal(kv.Value, &bi)
}

// BrokerID is this broker's id (its advertised address).
func (s *Service) BrokerID() string { return s.cfg.AdvertisedAddr }

// leastLoaded picks the broker with the fewest owned bundles, then topics;
// ties go to the smallest id.
func (o *ownership) leastLoaded(ctx context.Context) (BrokerInfo, error) {
	bs, err := o.s.Brokers(ctx)
	if err != nil {
		return BrokerInfo{}, err
	}
	if len(bs) == 0 {
		return BrokerInfo{}, errors.New("broker: no brokers registered")
	}
	self := o.currentInfo()
	for i := range bs {
		if bs[i].BrokerID == self.BrokerID {
			bs[i].Load = self.Load // our own report is fresher in memory
		}
	}
	slices.SortFunc(bs, func(a, b BrokerInfo) int {
		if a.Load.Bundles != b.Load.Bundles {
			return a.Load.Bundles - b.Load.Bundles
		}
		if a.Load.Topics != b.Load.Topics {
			return a.Load.Topics - b.Load.Topics
		}
		return strings.Compare(a.BrokerID, b.BrokerID)
	})
	return bs[0], nil
}

// OwnedBundles lists the bundles this broker owns ("tenant/ns/0xlo_0xhi").
func (s *Service) OwnedBundles() []string {
	s.own.mu.Lock()
	defer s.own.mu.Unlock()
	out := make([]string, 0, len(s.own.owned))
	for k := range s.own.owned {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// BundleOwner returns the owner of a namespace bundle, if any.
func (s *Service) BundleOwner(ctx context.Context, tenant, ns string, r bundle.Range) (OwnerInfo, bool, error) {
	return s.own.getOwner(ctx, ownerKey(tenant, ns, r))
}

// NamespaceBundles returns the bundles of a namespace.
func (s *Service) NamespaceBundles(ctx context.Context, tenant, ns string) (bundle.Boundaries, error) {
	p, _, err := s.res.GetNamespace(ctx, tenant, ns)
	if err != nil {
		return nil, err
	}
	return s.namespaceBundles(p), nil
}

// UnloadBundle closes every topic of a bundle this broker owns and releases
// it. Clients are told to reconnect; with dest (an active broker) they go
// straight to its URL of their kind without a lookup. A bundle owned
// elsewhere is ErrNotOwned (the admin layer forwards the request to the
// owner).
func (s *Service) UnloadBundle(ctx context.Context, tenant, ns string, r bundle.Range, dest *BrokerInfo) error {
	bk := bundleKey(tenant, ns, r)
	s.own.mu.Lock()
	_, ok := s.own.owned[bk]
	if ok {
		s.own.unloading[bk] = true
		s.own.released.Add(1)
	}
	s.own.mu.Unlock()
	if !ok {
		return ErrNotOwned
	}
	defer func() {
		s.own.mu.Lock()
		delete(s.own.unloading, bk)
		s.own.mu.Unlock()
	}()
	var to assignment
	if dest != nil {
		to = assignment{url: dest.ServiceURL, urlTLS: dest.ServiceURLTLS}
		s.own.markHandover(ctx, bk, dest.ServiceURL)
	}
	var errs []error
	for _, t := range s.openTopics() {
		if t.name.Tenant != tenant || t.name.Namespace != ns || !r.Contains(bundle.Hash(t.name.String())) {
			continue
		}
		t.assignedURL.Store(&to)
		errs = append(errs, t.close(ctx))
	}
	s.own.deleteOwner(ctx, bk)
	s.metrics.bundleReleased.WithLabelValues("unload").Inc()
	s.log.Info("bundle unloaded", "bundle", bk, "dest", to.url)
	return errors.Join(errs...)
}

// ErrNotOwned: the bundle is not owned by this broker.
var ErrNotOwned = errors.New("broker: bundle not owned by this broker")

// SplitBundle splits a bundle this broker owns at its midpoint, updating the
// namespace's bundles; the two halves stay owned here (unless unload) and the
// topics keep running (with unload they are closed and reassigned).
func (s *Service) SplitBundle(ctx context.Context, tenant, ns string, r bundle.Range, unload bool) error {
	bk := bundleKey(tenant, ns, r)
	s.own.mu.Lock()
	_, ok := s.own.owned[bk]
	s.own.mu.Unlock()
	if !ok {
		return ErrNotOwned
	}
	var halves []bundle.Range
	err := s.res.UpdateNamespace(ctx, tenant, ns, func(p *Policies) error {
		b := s.namespaceBundles(*p)
		nb, err := b.Split(r)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrPrecondition, err)
		}
		p.Bundles = &BundlesData{Boundaries: nb.Strings(), NumBundles: nb.Count()}
		halves = nil
		for _, h := range nb.Ranges() {
			if h.Lo >= r.Lo && h.Hi <= r.Hi {
				halves = append(halves, h)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Take the halves before giving up the parent, so the topics never lack
	// an owner.
	for _, h := range halves {
		if _, err := s.own.acquire(ctx, tenant, ns, h); err != nil {
			s.log.Warn("split: acquire half failed", "bundle", bundleKey(tenant, ns, h), "err", err)
		}
	}
	s.own.deleteOwner(ctx, bk)
	s.metrics.bundleReleased.WithLabelValues("split").Inc()
	s.log.Info("bundle split", "bundle", bk, "halves", len(halves))
	if unload {
		var errs []error
		for _, h := range halves {
			if err := s.UnloadBundle(ctx, tenant, ns, h, nil); err != nil && !errors.Is(err, ErrNotOwned) {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	return nil
}
