package broker

// Write fencing for a planned failover: Pulsar's blue-green migration
// (PIP-188) at namespace or cluster level. A persistent topic is fenced
// when its namespace's policies say "migrated": true, or when this
// cluster's own record does (POST /admin/v2/clusters/{c}/migrate). The
// clients go to the target's URLs: the namespace's migratedClusterUrl when
// set (Magnetar stores one per namespace, as Pulsar PR 23788 proposes, so
// different namespaces of one cluster can fail over to different
// clusters), else the cluster record's migratedClusterUrl.
//
// Both records are followed by watches (the namespace policy watch,
// policywatch.go, and a view of the cluster records), so every broker
// owning a topic of the namespace applies the fence as soon as the change
// is delivered. A fenced topic (one migrationRun, owned by the topic):
//
//   - stores no SEND of a client producer read after the fence: it is
//     dropped unanswered, as the SENDs of a producer the broker closed are;
//     the client keeps it pending and re-sends it to the target. SENDs
//     already on their way to the ledger complete and are acknowledged.
//   - refuses new client producers with ServiceNotReady (retriable)
//     naming the target cluster and its URL.
//   - once every SEND in flight is stored, notes the fence position (the
//     last entry then) and waits until the replicator toward the target
//     (every replicator when the target's name is not known) has
//     replicated everything up to it; then each client producer is sent
//     TopicMigrated with the target's broker URLs and closed, so it
//     reconnects there and re-sends what was pending. Producers move only
//     after the drain, so the target stores each producer's messages in
//     order: everything stored here first, through replication, then what
//     the producer sends there.
//   - keeps its replicators running, and keeps accepting remote clusters'
//     replicator producers: the target replicates what it receives back
//     here, so a later failback finds this cluster caught up. (Pulsar
//     refuses replicated writes into a migrated topic instead; it has no
//     failback.)
//   - serves consumers entries up to the fence position only (what was
//     stored here before the fence; later entries came from other clusters,
//     which hold them too). A consumer whose subscription has acknowledged
//     everything up to the fence position is sent TopicMigrated and
//     closed, so it re-subscribes on the target; consumers connecting
//     later are served the same way.
//
// Clearing the flag ("migrated": false) unfences: SENDs are stored again,
// and producers whose SENDs were dropped are closed so they reconnect
// here and re-send them. Non-persistent topics are not fenced.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
)

// Policy and cluster-record fields (Pulsar's names, plus Magnetar's
// migratedClusterName).
const (
	migratedField     = "migrated"
	migratedURLField  = "migratedClusterUrl"
	migratedNameField = "migratedClusterName"
)

// Poll intervals of a fenced topic: while its producers wait for the
// drain, then while consumers still drain.
const (
	migrationPollProducers = 10 * time.Millisecond
	migrationPollConsumers = 50 * time.Millisecond
)

// ClusterURL is where a migrated namespace's clients go (Pulsar's
// ClusterUrl).
type ClusterURL struct {
	ServiceURL       string `json:"serviceUrl,omitempty"`
	ServiceURLTLS    string `json:"serviceUrlTls,omitempty"`
	BrokerServiceURL string `json:"brokerServiceUrl,omitempty"`
	BrokerServiceTLS string `json:"brokerServiceUrlTls,omitempty"`
}

// Empty reports whether no URL is set.
func (u ClusterURL) Empty() bool { return u == ClusterURL{} }

// Validate checks each URL set has a host and its scheme: http or https
// for serviceUrl, https for serviceUrlTls, pulsar or pulsar+ssl for
// brokerServiceUrl, pulsar+ssl for brokerServiceUrlTls; and that a broker
// URL is set.
func (u ClusterURL) Validate() error {
	if u.BrokerServiceURL == "" && u.BrokerServiceTLS == "" {
		return errors.New("brokerServiceUrl or brokerServiceUrlTls is required")
	}
	for _, c := range []struct {
		field, val string
		schemes    []string
	}{
		{"serviceUrl", u.ServiceURL, []string{"http", "https"}},
		{"serviceUrlTls", u.ServiceURLTLS, []string{"https"}},
		{"brokerServiceUrl", u.BrokerServiceURL, []string{"pulsar", "pulsar+ssl"}},
		{"brokerServiceUrlTls", u.BrokerServiceTLS, []string{"pulsar+ssl"}},
	} {
		if c.val == "" {
			continue
		}
		p, err := url.Parse(c.val)
		if err != nil || !slices.Contains(c.schemes, p.Scheme) || p.Host == "" {
			return fmt.Errorf("%s %q: want %s://host:port", c.field, c.val, strings.Join(c.schemes, " or "))
		}
	}
	return nil
}

// MigrationState is a namespace's or cluster's migration setting.
type MigrationState struct {
	Migrated bool       `json:"migrated"`
	URL      ClusterURL `json:"migratedClusterUrl"`
	// Cluster names the target (optional; found by URL among the cluster
	// records when empty).
	Cluster string `json:"migratedClusterName,omitempty"`
}

// ReadMigration reads a migration state from record fields (a namespace's
// policies or a cluster record).
func ReadMigration(fields map[string]json.RawMessage) MigrationState {
	var st MigrationState
	json.Unmarshal(fields[migratedField], &st.Migrated)
	json.Unmarshal(fields[migratedURLField], &st.URL)
	json.Unmarshal(fields[migratedNameField], &st.Cluster)
	return st
}

// WriteMigration sets (or, when not migrated, removes) a migration state
// in record fields.
func WriteMigration(fields map[string]json.RawMessage, st MigrationState) {
	delete(fields, migratedURLField)
	delete(fields, migratedNameField)
	if !st.Migrated {
		delete(fields, migratedField)
		return
	}
	fields[migratedField] = json.RawMessage("true")
	if !st.URL.Empty() {
		b, _ := json.Marshal(st.URL)
		fields[migratedURLField] = b
	}
	if st.Cluster != "" {
		b, _ := json.Marshal(st.Cluster)
		fields[migratedNameField] = b
	}
}

// migrationTarget is where a fenced topic's clients go.
type migrationTarget struct {
	url     ClusterURL
	cluster string // "" when unknown
}

func (m migrationTarget) String() string {
	u := m.url.BrokerServiceURL
	if u == "" {
		u = m.url.BrokerServiceTLS
	}
	if m.cluster == "" {
		return "cluster at " + u
	}
	return fmt.Sprintf("cluster %s (%s)", m.cluster, u)
}

// LocalClusterMigration returns this cluster's record's migration state
// (from the broker's view of the cluster records).
func (s *Service) LocalClusterMigration() MigrationState {
	raw, _, _ := s.cv.get(clustersPath + "/" + s.cfg.ClusterName)
	var fields map[string]json.RawMessage
	json.Unmarshal(raw, &fields)
	return ReadMigration(fields)
}

// migrationFor resolves the target of a topic of a namespace with pol, or
// nil when it is not migrated.
func (s *Service) migrationFor(pol *policySnapshot) *migrationTarget {
	ns := ReadMigration(pol.Other)
	cl := s.LocalClusterMigration()
	var t migrationTarget
	switch {
	case ns.Migrated && !ns.URL.Empty():
		t = migrationTarget{url: ns.URL, cluster: ns.Cluster}
	case (ns.Migrated || cl.Migrated) && !cl.URL.Empty():
		t = migrationTarget{url: cl.URL, cluster: cl.Cluster}
	default:
		return nil // not migrated, or no URL to send clients to
	}
	if t.cluster == "" {
		// The fence's drain waits for the replicator toward this cluster
		// by name: a view behind the store must not leave it unnamed.
		t.cluster = s.clusterStored(t.url)
	}
	return &t
}

// clusterAt names the cluster whose record has one of u's broker URLs, or
// "".
func (s *Service) clusterAt(u ClusterURL) string {
	s.cv.mu.Lock()
	defer s.cv.mu.Unlock()
	return clusterIn(s.cv.recs, u)
}

// clusterStored is clusterAt reading the records from the metadata store
// when the view names none: the view follows a watch, which can lag a
// record just written.
func (s *Service) clusterStored(u ClusterURL) string {
	if name := s.clusterAt(u); name != "" {
		return name
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	recs, _, err := s.loadRecords(ctx, clustersPath)
	if err != nil {
		return ""
	}
	return clusterIn(recs, u)
}

// clusterIn names the cluster of recs (cluster records by key) with one of
// u's broker URLs, or "".
func clusterIn(recs map[string][]byte, u ClusterURL) string {
	for key, raw := range recs {
		var cd ClusterData
		if json.Unmarshal(raw, &cd) != nil {
			continue
		}
		if (u.BrokerServiceURL != "" && cd.BrokerServiceURL == u.BrokerServiceURL) ||
			(u.BrokerServiceTLS != "" && cd.BrokerServiceTLS == u.BrokerServiceTLS) {
			return strings.TrimPrefix(key, clustersPath+"/")
		}
	}
	return ""
}

// onClusterChange re-evaluates the fences of loaded topics when this
// cluster's record changes.
func (s *Service) onClusterChange(key string, _ []byte) {
	if key != clustersPath+"/"+s.cfg.ClusterName {
		return
	}
	for _, t := range s.openTopics() {
		t.refreshMigration()
	}
}

// migrationRun is a fenced topic's migration, run by one goroutine.
type migrationRun struct {
	target   migrationTarget
	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}

	mu sync.Mutex
	// dispatchCap: consumers get entries up to it (the last entry when
	// the fence was applied, then the fence position).
	dispatchCap ledger.Position
	fencePos    *ledger.Position // nil until every SEND in flight is stored
	moved       bool             // producers were sent away
	warned      bool             // no replicator toward the target was logged
}

func (r *migrationRun) halt() {
	r.stopOnce.Do(func() { close(r.stop) })
	<-r.done
}

// producersMoved reports whether the topic's producers were sent to the
// target (the drain ended).
func (r *migrationRun) producersMoved() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.moved
}

// migration returns the topic's fence, nil when not fenced.
func (t *Topic) migration() *migrationRun { return t.mig.Load() }

// fencedError is the answer to a new producer of a fenced topic.
func (t *Topic) fencedError(r *migrationRun) error {
	return protocol.ErrServiceNotReady.WithMessage(fmt.Sprintf(
		"Namespace %s is migrated to %s: writes are fenced here, produce to the target cluster",
		t.name.NamespaceName(), r.target))
}

// capDispatch returns the position a fenced topic's subscriptions read up
// to, if fenced.
func (t *Topic) capDispatch() (ledger.Position, bool) {
	r := t.migration()
	if r == nil {
		return ledger.Position{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dispatchCap, true
}

// refreshMigration fences or unfences the topic to match its policies and
// this cluster's record.
func (t *Topic) refreshMigration() {
	if t.ml == nil {
		return
	}
	want := t.s.migrationFor(t.policies())
	t.migMu.Lock()
	defer t.migMu.Unlock()
	cur := t.mig.Load()
	if cur != nil && want != nil && cur.target == *want {
		return
	}
	if cur == nil && want == nil {
		return
	}
	if cur != nil {
		cur.halt()
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	if want == nil {
		t.mig.Store(nil)
		// Producers whose SENDs were dropped re-send them here.
		for _, p := range t.producers {
			if p.dropped.Load() {
				p.closeByBroker()
				t.removeProducerLocked(p)
			}
		}
		t.mu.Unlock()
		t.notifySubscriptions()
		t.s.log.Info("topic unfenced: migration cleared", "topic", t.name.String())
		return
	}
	r := &migrationRun{target: *want, stop: make(chan struct{}), done: make(chan struct{}),
		dispatchCap: t.ml.LastConfirmed()}
	t.mig.Store(r)
	t.mu.Unlock()
	t.s.log.Info("topic fenced for migration", "topic", t.name.String(), "target", want.String())
	t.s.wg.Add(1)
	go t.runMigration(r)
}

// stopMigration ends a closing topic's migration goroutine.
func (t *Topic) stopMigration() {
	t.migMu.Lock()
	defer t.migMu.Unlock()
	if r := t.mig.Load(); r != nil {
		r.halt()
	}
}

// runMigration moves the fenced topic's producers, then its consumers, to
// the target until the fence is lifted or the topic closes.
func (t *Topic) runMigration(r *migrationRun) {
	defer t.s.wg.Done()
	defer close(r.done)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.s.stopping:
			return
		case <-timer.C:
		}
		wait := migrationPollConsumers
		if !t.migrateProducers(r) {
			wait = migrationPollProducers
		}
		t.migrateConsumers(r)
		timer.Reset(wait)
	}
}

// migrateProducers sends the client producers to the target once every
// SEND in flight is stored and replicated to it; it reports whether they
// were sent.
func (t *Topic) migrateProducers(r *migrationRun) bool {
	r.mu.Lock()
	moved := r.moved
	r.mu.Unlock()
	if moved {
		// A producer whose PRODUCER raced the fence follows the others.
		t.sendProducersAway(r)
		return true
	}
	for _, p := range t.producersNow() {
		if !p.replicator && p.inflight.Load() > 0 {
			r.mu.Lock()
			r.fencePos = nil // a late SEND: the fence position moves on
			r.mu.Unlock()
			return false
		}
	}
	r.mu.Lock()
	if r.fencePos == nil {
		pos := t.ml.LastConfirmed()
		r.fencePos = &pos
		if r.dispatchCap.Compare(pos) < 0 {
			r.dispatchCap = pos
		}
	}
	fence := *r.fencePos
	r.mu.Unlock()
	t.notifySubscriptions() // the cap may have moved
	if !t.replicatedUpTo(r, fence) {
		return false
	}
	t.sendProducersAway(r)
	r.mu.Lock()
	r.moved = true
	r.mu.Unlock()
	t.s.log.Info("producers migrated", "topic", t.name.String(), "target", r.target.String(), "fence", fence.String())
	return true
}

// sendProducersAway tells every client producer of the topic with no
// SEND in flight to go to the target, and closes it.
func (t *Topic) sendProducersAway(r *migrationRun) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.producers {
		if p.replicator || p.inflight.Load() > 0 {
			continue
		}
		p.conn.send(protocol.NewTopicMigrated(p.id, false, r.target.url.BrokerServiceURL, r.target.url.BrokerServiceTLS))
		p.closeByBroker()
		t.removeProducerLocked(p)
	}
}

// replicatedUpTo reports whether the replicator toward the target (every
// replicator when the target's name is unknown) has replicated every
// entry up to pos. Without such a replicator nothing can drain: producers
// move at once.
func (t *Topic) replicatedUpTo(r *migrationRun, pos ledger.Position) bool {
	reps := t.replicators()
	if r.target.cluster != "" {
		rep, ok := reps[r.target.cluster]
		if !ok {
			r.mu.Lock()
			if !r.warned {
				r.warned = true
				t.s.log.Warn("migration target is not a replication cluster of the topic: nothing drains to it",
					"topic", t.name.String(), "target", r.target.String())
			}
			r.mu.Unlock()
			return true
		}
		return rep.Cursor().MarkDeletePosition().Compare(pos) >= 0
	}
	for _, rep := range reps {
		if rep.Cursor().MarkDeletePosition().Compare(pos) < 0 {
			return false
		}
	}
	return true
}

// migrateConsumers sends to the target the consumers of each subscription
// that acknowledged everything up to the fence position.
func (t *Topic) migrateConsumers(r *migrationRun) {
	r.mu.Lock()
	moved, fence := r.moved, r.fencePos
	r.mu.Unlock()
	if !moved || fence == nil {
		return
	}
	for _, s := range t.subscriptionsNow() {
		// Readers (non-durable) stay: they would re-subscribe on the
		// target from a message id of this cluster.
		if s.cursor == nil || !s.durable || s.cursor.MarkDeletePosition().Compare(*fence) < 0 {
			continue
		}
		if src := s.replSrcState(); src != nil && r.target.cluster != "" {
			// A replicated subscription moves once its state as of the
			// fence went to the target: the consumer resumes there after
			// what it acknowledged here.
			src.mu.Lock()
			md, sent := src.sentMD[r.target.cluster]
			src.mu.Unlock()
			if !sent || md.Compare(*fence) < 0 {
				continue
			}
		}
		s.mu.Lock()
		consumers := append([]*Consumer(nil), s.consumers...)
		s.mu.Unlock()
		for _, c := range consumers {
			if c.closed.Load() {
				continue
			}
			c.conn.send(protocol.NewTopicMigrated(c.id, true, r.target.url.BrokerServiceURL, r.target.url.BrokerServiceTLS))
			c.closeByBroker()
			s.removeConsumer(c)
			t.s.log.Info("consumer migrated", "topic", t.name.String(), "sub", s.name, "target", r.target.String())
		}
	}
}

// subscriptionsNow returns the topic's subscriptions.
func (t *Topic) subscriptionsNow() []*Subscription {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Collect(maps.Values(t.subs))
}

// producersNow returns the topic's producers.
func (t *Topic) producersNow() []*Producer {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Collect(maps.Values(t.producers))
}
