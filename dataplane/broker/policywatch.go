package broker

// Live namespace policies. A loaded topic runs with a snapshot of its
// namespace's policies (Topic.pol), taken when it opens. One watch per
// broker on /admin/policies follows every change of a namespace record and
// refreshes the snapshot of each loaded topic of that namespace, so a
// policy change applies without an unload, as in Pulsar:
//
//   - message TTL: the next expiry pass (Config.MessageTTLCheckInterval);
//   - backlog quotas: the next SEND or producer creation re-evaluates the
//     quota (its cached verdict is dropped), and the next periodic quota pass
//     (Config.BacklogQuotaCheckInterval) applies consumer_backlog_eviction
//     and message_age;
//   - retention: at once; consumed ledgers are checked again;
//   - persistence (ensemble, write and ack quorums): the ledgers created
//     from now on (the next rollover); entries already written keep theirs;
//   - deduplication on/off: switched on a loaded topic. Enabling rebuilds
//     the producers' last sequence ids in the background (from the last
//     snapshot and the entries after it); SENDs accepted while that runs
//     are neither checked nor recorded, so a client's re-send of one of
//     them may be stored twice (Pulsar has the same window). Disabling
//     drops the state and deletes the dedup cursor, so it no longer holds
//     back trimming;
//   - rate limits and the max_* limits (ratelimits.go): re-resolved at once;
//     buckets are re-rated in place; counts apply to the next producer,
//     consumer or subscription. Topic-level policies and resource groups
//     are followed the same way (policyfollow.go).
//
// Only at open (an unload applies a change): the auto-topic-creation
// override (it matters only before the topic exists) and bundles (a split
// or unload moves topics anyway). Schema compatibility and partitioned
// auto-creation are read from the store where they are used. Not enforced at
// all yet: the other namespace policies kept in Policies.Other (doc.go
// lists what is enforced).
//
// Ordering: every snapshot carries the metadata version (store revision)
// of the record it came from, and a topic only moves to a newer one, so
// the watch, the resynchronisation after a broken watch and a topic that
// was opening while a change arrived can race without going backwards. The
// watch records the newest snapshot of each namespace before it walks the
// loaded topics; a topic that finishes opening checks that record after it
// became visible to the walk (catchUpPolicies), so no change falls between.
//
// Opening a topic takes the broker's snapshot of its namespace without
// reading the store while the watch runs: that snapshot is the newest the
// watch delivered, or the broker's own last write of the record (Resources
// tells the Service of every namespace record it writes, so a policy set
// through this broker right before an unload applies at the reopen:
// TestDeduplicationRebuiltFromEntries), or what an earlier open read. A
// change made through another broker reaches a topic opened meanwhile by
// the watch, as it reaches every loaded topic (the open is only as stale as
// the watch's delivery delay; Pulsar's brokers cache policies the same
// way). A deletion leaves a tombstone, so a slow read cannot bring a
// deleted namespace back. Without a live watch (broken, being re-created)
// opens read the record, and a new watch starts from an empty set of
// snapshots (policyWatch.gen). The snapshot is shared: the topics of a
// namespace hold one. Reading at every open cost 12% of the standalone's
// CPU when creating topics (docs/benchmarks.md).
//
// Lock order: Topic.pol.mu before Topic.mu; policyWatch.mu is a leaf (never
// held while calling into topics or the Service).

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
)

// policyRewatchBackoff is the pause before the policy watch is re-created
// after it ended (store restart, compaction, lost leader).
const policyRewatchBackoff = 500 * time.Millisecond

// policySnapshot is one version of a namespace's policies as topics use
// them: the record, and the fields the broker interprets decoded once.
type policySnapshot struct {
	Policies
	version int64                   // metadata version of the record
	deleted bool                    // a tombstone: the record was deleted at version
	quotas  map[string]backlogQuota // backlog_quota_map, by quota type
}

func newPolicySnapshot(p Policies, version int64) *policySnapshot {
	s := &policySnapshot{Policies: p, version: version}
	if raw, ok := p.Other["backlog_quota_map"]; ok {
		var m map[string]backlogQuota
		if json.Unmarshal(raw, &m) == nil {
			s.quotas = m
		}
	}
	return s
}

func (s *policySnapshot) dedupEnabled() bool {
	return s.DeduplicationEnabled != nil && *s.DeduplicationEnabled
}

// dedupPolicy is the deduplicationEnabled policy that applies to a topic:
// its topic-level value (tp, Service.topicPolicies) where set, else the
// namespace's.
func dedupPolicy(ns *policySnapshot, tp map[string]json.RawMessage) bool {
	if raw, ok := tp["deduplicationEnabled"]; ok {
		var on bool
		if json.Unmarshal(raw, &on) == nil {
			return on
		}
	}
	return ns.dedupEnabled()
}

// topicPolicies is a topic's current snapshot. Readers load cur without a
// lock; mu serializes the changes and the switching of deduplication.
type topicPolicies struct {
	cur       atomic.Pointer[policySnapshot]
	mu        sync.Mutex
	dedupBusy bool // deduplication state is being loaded (under mu)
}

// policies returns the snapshot the topic runs with.
func (t *Topic) policies() *policySnapshot {
	if p := t.pol.cur.Load(); p != nil {
		return p
	}
	return &policySnapshot{}
}

// policyWatch holds the newest snapshot the broker knows of each namespace
// ("tenant/ns"): from the watch, from its own writes (Resources'
// onNamespace) and from reads at topic opens. While the watch runs (live)
// that is the namespace's current record, up to the watch's delivery delay,
// and a topic opens with it without reading the store.
type policyWatch struct {
	mu     sync.Mutex
	latest map[string]*policySnapshot
	// live: a watch runs and every entry of latest was learnt while it
	// did. gen counts the watches created: an entry read from the store
	// is kept only if no watch was created while it was being read (the
	// read could predate the new watch's start and miss a change).
	live bool
	gen  uint64
	// authGen is the Service's authorization generation (authz.go).
	authGen *atomic.Uint64
}

// recordLocked keeps snap as the newest of namespace name unless one at
// least as new is held, and returns the one held afterwards.
func (pw *policyWatch) recordLocked(name string, snap *policySnapshot) *policySnapshot {
	if cur := pw.latest[name]; cur != nil && cur.version >= snap.version {
		return cur
	}
	if pw.latest == nil {
		pw.latest = map[string]*policySnapshot{}
	}
	pw.latest[name] = snap
	return snap
}

// started records that a new watch runs: what was learnt before it may
// have missed changes and is dropped.
func (pw *policyWatch) started() {
	pw.authGen.Add(1)
	pw.mu.Lock()
	pw.gen++
	pw.latest = nil
	pw.live = true
	pw.mu.Unlock()
}

// namespaceSnapshot reads the policies of t's namespace for a topic that
// opens and returns them as the broker's snapshot of that version: the
// one it already holds for the namespace when the versions match (shared
// by the namespace's topics), else a new one, which it then holds. A
// missing namespace is TopicNotFound for the client.
func (s *Service) namespaceSnapshot(ctx context.Context, t TopicName) (*policySnapshot, error) {
	name := t.NamespaceName()
	s.pw.mu.Lock()
	if cur := s.pw.latest[name]; s.pw.live && cur != nil && !cur.deleted {
		s.pw.mu.Unlock()
		return cur, nil
	}
	gen := s.pw.gen
	s.pw.mu.Unlock()
	p, v, err := s.res.GetNamespace(ctx, t.Tenant, t.Namespace)
	if errors.Is(err, ErrNotFound) {
		return nil, protocol.ErrTopicNotFound.WithMessage("Namespace not found: " + name)
	}
	if err != nil {
		return nil, err
	}
	s.pw.mu.Lock()
	defer s.pw.mu.Unlock()
	cur := s.pw.latest[name]
	if cur != nil && cur.version == int64(v) {
		return cur, nil
	}
	snap := newPolicySnapshot(p, int64(v))
	if s.pw.gen == gen {
		s.pw.recordLocked(name, snap)
	}
	return snap, nil
}

// namespaceWritten records a namespace record this broker wrote (p nil: it
// deleted it at revision v), so its next topic opens see the write before
// the watch delivers it.
func (s *Service) namespaceWritten(name string, p *Policies, v metadata.Version) {
	s.bumpAuthGen()
	if p == nil {
		s.recordNamespaceDeleted(name, int64(v))
		return
	}
	s.publishPolicies(name, newPolicySnapshot(*p, int64(v)))
}

// recordNamespaceDeleted leaves a tombstone: a read of the record that
// started before the deletion and ends after it cannot put the old policies
// back.
func (s *Service) recordNamespaceDeleted(name string, rev int64) {
	s.pw.mu.Lock()
	defer s.pw.mu.Unlock()
	s.pw.recordLocked(name, &policySnapshot{version: rev, deleted: true})
}

// startPolicyWatch starts following namespace policy changes. The first
// watch is created before Start returns, so no topic can open unwatched; if
// the store refuses it, the loop keeps retrying.
func (s *Service) startPolicyWatch() {
	ctx, cancel := s.stopContext(0)
	w, err := s.md.Watch(ctx, policiesPath, 0)
	if err != nil {
		s.log.Warn("namespace policy watch failed; retrying", "err", err)
		w = nil
	} else {
		s.pw.started()
	}
	s.wg.Add(1)
	go s.policyWatchLoop(ctx, cancel, w)
}

// policyWatchLoop applies namespace policy changes until the broker stops.
func (s *Service) policyWatchLoop(ctx context.Context, cancel context.CancelFunc, w metadata.Watcher) {
	defer s.wg.Done()
	defer cancel()
	for {
		if w != nil {
			for ev := range w.Events() {
				s.onPolicyEvent(ev)
			}
			err := w.Err()
			w.Close()
			w = nil
			s.pw.mu.Lock()
			s.pw.live = false // opens read the store until a new watch runs
			s.pw.mu.Unlock()
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("namespace policy watch ended; restarting", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(policyRewatchBackoff):
		}
		nw, err := s.md.Watch(ctx, policiesPath, 0)
		if err != nil {
			s.log.Warn("namespace policy watch failed; retrying", "err", err)
			continue
		}
		w = nw
		// Changes made while no watch ran are only in the store: forget
		// what was learnt meanwhile, then read again the namespaces of
		// loaded topics.
		s.pw.started()
		s.resyncPolicies(ctx)
	}
}

// onPolicyEvent applies one change under /admin/policies; tenant records
// (one segment) are not namespace policies and are skipped.
func (s *Service) onPolicyEvent(ev metadata.Event) {
	s.bumpAuthGen()
	rest, ok := strings.CutPrefix(ev.Key, policiesPath+"/")
	if !ok {
		return
	}
	tenant, ns, ok := strings.Cut(rest, "/")
	if !ok || strings.Contains(ns, "/") {
		return
	}
	name := tenant + "/" + ns
	if ev.Type == metadata.EventDelete {
		s.recordNamespaceDeleted(name, ev.Revision)
		return
	}
	var p Policies
	if err := json.Unmarshal(ev.Value, &p); err != nil {
		s.log.Warn("namespace policies unreadable", "namespace", name, "err", err)
		return
	}
	s.publishPolicies(name, newPolicySnapshot(p, ev.Revision))
}

// publishPolicies records snap as the newest of namespace name, then hands
// it to every loaded topic of the namespace.
func (s *Service) publishPolicies(name string, snap *policySnapshot) {
	// The one held may be the same version (the broker's own write and the
	// watch's event of it race) or a newer one: topics get the held one, so
	// a namespace's topics share one snapshot per version.
	s.pw.mu.Lock()
	snap = s.pw.recordLocked(name, snap)
	s.pw.mu.Unlock()
	if snap.deleted {
		return // deleted since: nothing to apply
	}
	for _, t := range s.openTopics() {
		if t.name.NamespaceName() == name {
			t.applyPolicies(snap)
		}
	}
}

// resyncPolicies re-reads the policies of every namespace with a loaded
// topic (after the watch was broken).
func (s *Service) resyncPolicies(ctx context.Context) {
	seen := map[string]bool{}
	for _, t := range s.openTopics() {
		name := t.name.NamespaceName()
		if seen[name] {
			continue
		}
		seen[name] = true
		p, v, err := s.res.GetNamespace(ctx, t.name.Tenant, t.name.Namespace)
		if err != nil {
			continue // deleted meanwhile, or the store is down again
		}
		s.publishPolicies(name, newPolicySnapshot(p, int64(v)))
	}
}

// catchUpPolicies gives a topic that just finished opening the newest
// snapshot the watch saw while it was opening, if that is newer than the
// one it opened with.
func (s *Service) catchUpPolicies(t *Topic) {
	s.pw.mu.Lock()
	snap := s.pw.latest[t.name.NamespaceName()]
	s.pw.mu.Unlock()
	if snap != nil && !snap.deleted {
		t.applyPolicies(snap)
	}
}

// applyPolicies moves the topic to snap unless it already runs with the
// same or a newer version, and applies what changed.
func (t *Topic) applyPolicies(snap *policySnapshot) {
	t.pol.mu.Lock()
	defer t.pol.mu.Unlock()
	prev := t.pol.cur.Load()
	if prev != nil && snap.version <= prev.version {
		return
	}
	t.pol.cur.Store(snap)
	t.mu.Lock()
	t.quota.checked = 0 // the next SEND re-evaluates the quota
	closed := t.closed
	t.mu.Unlock()
	t.refreshLimitsLocked()
	if closed || t.ml == nil {
		return
	}
	t.refreshMigration()
	if prev == nil || !sameLedgerConfig(ledgerConfig(prev.Policies), ledgerConfig(snap.Policies)) {
		if err := t.ml.Reconfigure(ledgerConfig(snap.Policies)); err != nil {
			t.s.log.Warn("apply retention/persistence policies failed", "topic", t.name.String(), "err", err)
		}
	}
	t.switchDedupLocked(t.dedupOn.Load() || t.replIn.Load())
	if prev == nil || !slices.Equal(prev.ReplicationClusters, snap.ReplicationClusters) ||
		string(prev.Other["allowed_clusters"]) != string(snap.Other["allowed_clusters"]) {
		t.refreshReplication()
	}
}

func sameLedgerConfig(a, b *ledger.Config) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// followDedupLocked switches deduplication of a loaded persistent topic to
// the policy in force (after a topic-level policy change). Called with
// t.pol.mu held.
func (t *Topic) followDedupLocked() {
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed || t.ml == nil {
		return
	}
	t.switchDedupLocked(t.dedupOn.Load() || t.replIn.Load())
}

// switchDedupLocked turns deduplication on or off to match want. Called
// with t.pol.mu held.
func (t *Topic) switchDedupLocked(want bool) {
	have := t.dedup.Load() != nil
	switch {
	case want && !have && !t.pol.dedupBusy:
		t.pol.dedupBusy = true
		t.s.wg.Add(1)
		go t.enableDedup()
	case !want && have:
		t.dedup.Store(nil)
		t.dropDedupCursor()
	}
}

// enableDedup loads the deduplication state of a loaded topic and installs
// it, unless the policy was turned off again (or the topic closed) while
// it loaded.
func (t *Topic) enableDedup() {
	defer t.s.wg.Done()
	ctx, cancel := t.s.stopContext(time.Minute)
	defer cancel()
	d, err := loadDedup(ctx, t.ml)
	t.pol.mu.Lock()
	defer t.pol.mu.Unlock()
	t.pol.dedupBusy = false
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	want := t.dedupOn.Load() || t.replIn.Load()
	switch {
	case err != nil:
		// It stays off until the next policy change or reload.
		t.s.log.Warn("enable deduplication failed", "topic", t.name.String(), "err", err)
	case closed:
	case want:
		t.dedup.Store(d)
		t.s.log.Info("deduplication enabled", "topic", t.name.String())
	default:
		t.dropDedupCursor()
	}
}

// dropDedupCursor deletes the dedup cursor so it no longer holds back
// trimming. The last snapshot stays in the ledger's properties: enabling
// again replays from it.
func (t *Topic) dropDedupCursor() {
	ctx, cancel := t.s.stopContext(10 * time.Second)
	defer cancel()
	if err := t.ml.DeleteCursor(ctx, dedupCursor); err != nil && !errors.Is(err, ledger.ErrNotFound) {
		t.s.log.Warn("disable deduplication: delete cursor failed", "topic", t.name.String(), "err", err)
	}
}

// stopContext returns a context that ends after d (0: no limit) or when
// the broker stops, whichever comes first. Its watcher goroutine ends with
// the context.
func (s *Service) stopContext(d time.Duration) (context.Context, context.CancelFunc) {
	var ctx context.Context
	var cancel context.CancelFunc
	if d > 0 {
		ctx, cancel = context.WithTimeout(context.Background(), d)
	} else {
		ctx, cancel = context.WithCancel(context.Background())
	}
	go func() {
		select {
		case <-s.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
