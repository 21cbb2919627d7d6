package broker

// Replicated subscriptions. A consumer that subscribes with
// replicate_subscription_state makes its durable subscription replicated
// (kept in the cursor's properties, so it survives reloads). Every second,
// each replicator of the topic sends the remote the state of each
// replicated subscription that changed (and every replSubResend
// regardless), as a marker SEND on its connection: never stored, never
// delivered to consumers. The remote applies it to its subscription of the
// same name, creating it if missing.
//
// The state is expressed in origins, not positions, so it needs no
// position snapshots between clusters: every entry has an origin (cluster,
// position there): its own for a message published here, replicated_from
// and the source position property for a replicated one. Because each
// origin's messages arrive in every cluster in the origin's order, the
// entries at or before the subscription's mark-delete position are exactly
// the entries whose origin position is at or before a per-origin bound (a
// vector). The state is that vector plus the origins of the individually
// acknowledged entries above mark-delete (Pulsar's PIP-33 carries only the
// mark-delete position). The remote acknowledges every entry of its own
// topic whose origin is within the vector or among those origins.
//
// Guarantee: after a failover, a consumer of the remote subscription
// receives again at most the messages acknowledged in the source during
// the last replSubInterval before the link was lost (plus the members of a
// partly acknowledged batch, which count as unacknowledged, and
// individually acknowledged entries beyond replSubMaxAcked), and never
// misses a message the source had not acknowledged. An origin's messages
// that reach the remote after the state did are acknowledged by a later
// state (at most replSubResend later). Works with any number of clusters,
// whichever are up: each pair exchanges states directly.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"
	"time"

	pb "github.com/magnetar-dev/magnetar/api/pulsarwire"
	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
	"github.com/magnetar-dev/magnetar/dataplane/replication"
)

const (
	// replSubInterval: how often states are sent (Pulsar's
	// replicatedSubscriptionsSnapshotFrequencyMillis default, 1 s).
	replSubInterval = time.Second
	// replSubResend: an unchanged state is sent again this often.
	replSubResend = 5 * time.Second
	// replSubMaxAcked bounds the individually acknowledged entries a state
	// carries; replSubScan the entries one computation or application reads.
	replSubMaxAcked = 10000
	replSubScan     = 200000
	// replicatedProp marks a replicated subscription's cursor.
	replicatedProp = "magnetar.replicated"
	// markerReplSubUpdate is the marker_type of a state SEND
	// (Pulsar's REPLICATED_SUBSCRIPTION_UPDATE number; the payload is
	// Magnetar's own JSON, replSubUpdate).
	markerReplSubUpdate = 13
)

// replSubUpdate is a replicated subscription's state on the wire.
type replSubUpdate struct {
	Subscription string `json:"subscription"`
	// Vector: per origin cluster, the highest origin position ("l:e")
	// such that every entry of that origin at or before it is consumed.
	Vector map[string]string `json:"vector"`
	// Acked: per origin cluster, origin positions ([ledger, from, to]
	// runs) consumed individually beyond the vector.
	Acked map[string][][3]int64 `json:"acked,omitempty"`
}

// replSubSource is what the source side keeps of one replicated
// subscription.
type replSubSource struct {
	mu      sync.Mutex
	scanned ledger.Position            // the vector covers entries through here
	vec     map[string]ledger.Position // origin cluster -> bound
	// sent: per remote, the last state sent and when.
	sent   map[string]string
	sentAt map[string]time.Time
	// sentMD: per remote, the mark-delete position of the last state
	// handed to its replicator (a migration waits for it, migration.go).
	sentMD map[string]ledger.Position
	// last is the state computed for the cursor state lastKey (mark-delete
	// and acknowledged runs): every remote's replicator asks each second,
	// and an unchanged cursor is not read again.
	lastKey string
	last    *replSubUpdate
}

// markReplicated makes s a replicated subscription.
func (s *Subscription) markReplicated() {
	if s.cursor == nil || !s.durable {
		return
	}
	s.mu.Lock()
	if s.replSrc == nil {
		s.replSrc = &replSubSource{scanned: ledger.Earliest, vec: map[string]ledger.Position{},
			sent: map[string]string{}, sentAt: map[string]time.Time{}}
	}
	s.mu.Unlock()
	if s.cursor.Properties()[replicatedProp] != "true" {
		s.cursor.SetProperty(replicatedProp, "true")
	}
}

// replicated reports whether s is a replicated subscription.
func (s *Subscription) replicated() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replSrc != nil
}

// entryOrigin is an entry's origin cluster and position there.
func entryOrigin(local string, e ledger.Entry, meta *pb.MessageMetadata) (string, ledger.Position, bool) {
	if _, err := protocol.ParseHeadersAndPayloadInto(e.Data, meta); err != nil {
		return "", ledger.Position{}, false
	}
	from := meta.GetReplicatedFrom()
	if from == "" {
		return local, e.Pos, true
	}
	for _, kv := range meta.GetProperties() {
		if kv.GetKey() == replication.SourcePositionProperty {
			if p, ok := ledger.ParsePosition(kv.GetValue()); ok {
				return from, p, true
			}
		}
	}
	return "", ledger.Position{}, false
}

// replicatedSubscriptionUpdates returns at most max marker payloads to
// send to remote now: the states of the topic's replicated subscriptions that
// changed since last sent there, or were last sent replSubResend ago.
func (t *Topic) replicatedSubscriptionUpdates(ctx context.Context, remote string, max int) [][]byte {
	t.mu.Lock()
	subs := make([]*Subscription, 0, len(t.subs))
	for _, s := range t.subs {
		subs = append(subs, s)
	}
	t.mu.Unlock()
	var out [][]byte
	for _, s := range subs {
		if len(out) >= max {
			break // the others go at the next call
		}
		s.mu.Lock()
		src := s.replSrc
		s.mu.Unlock()
		if src == nil {
			continue
		}
		u, err := t.replSubState(ctx, s, src)
		if err != nil {
			t.s.log.Warn("replicated subscription state failed", "topic", t.name.String(), "subscription", s.name, "err", err)
			continue
		}
		b, _ := json.Marshal(u)
		src.mu.Lock()
		due := string(b) != src.sent[remote] || time.Since(src.sentAt[remote]) >= replSubResend
		if due {
			src.sent[remote], src.sentAt[remote] = string(b), time.Now()
			if md, ok := ledger.ParsePosition(u.Vector[t.s.cfg.ClusterName]); ok {
				setKey(&src.sentMD, remote, md)
			}
		}
		src.mu.Unlock()
		if due {
			out = append(out, t.replSubMarker(b))
		}
	}
	return out
}

// replSubMarker wraps a state in message headers for a marker SEND.
func (t *Topic) replSubMarker(payload []byte) []byte {
	meta := &pb.MessageMetadata{
		ProducerName: new(replication.Prefix + t.s.cfg.ClusterName), SequenceId: new(uint64(0)),
		PublishTime: new(uint64(time.Now().UnixMilli())), ReplicatedFrom: new(t.s.cfg.ClusterName),
		MarkerType: new(int32(markerReplSubUpdate)),
	}
	hp, _ := protocol.AppendHeadersAndPayload(nil, meta, payload)
	return hp
}

// replSubState computes a subscription's state, advancing its vector
// over the entries newly below mark-delete.
func (t *Topic) replSubState(ctx context.Context, s *Subscription, src *replSubSource) (*replSubUpdate, error) {
	local := t.s.cfg.ClusterName
	md := s.cursor.MarkDeletePosition()
	runs, _ := s.cursor.AckedRanges(replSubMaxAcked)
	key := fmt.Sprint(md, runs)
	src.mu.Lock()
	if src.last != nil && src.lastKey == key {
		u := src.last
		src.mu.Unlock()
		return u, nil
	}
	// The scan works on a copy: the replicators' updates and the markers'
	// applies compute states concurrently.
	from, vec := src.scanned, maps.Clone(src.vec)
	src.mu.Unlock()
	if vec == nil {
		vec = map[string]ledger.Position{}
	}
	var meta pb.MessageMetadata
	if md.Compare(from) > 0 {
		// Entries in (from, md]: read once, in order.
		next := t.ml.Next(from)
		for n := 0; n < replSubScan && next.Compare(md) <= 0; {
			es, err := t.ml.Read(ctx, next, 500, 0)
			if err != nil {
				return nil, err
			}
			if len(es) == 0 {
				break
			}
			for _, e := range es {
				if e.Pos.Compare(md) > 0 {
					break
				}
				if c, p, ok := entryOrigin(local, e, &meta); ok && c != local && p.Compare(vec[c]) > 0 {
					vec[c] = p
				}
				from = e.Pos
				n++
			}
			next = t.ml.Next(es[len(es)-1].Pos)
		}
		src.mu.Lock()
		if from.Compare(src.scanned) > 0 {
			src.scanned, src.vec = from, vec
		}
		src.mu.Unlock()
	}
	u := &replSubUpdate{Subscription: s.name, Vector: map[string]string{local: md.String()}}
	for c, p := range vec {
		u.Vector[c] = p.String()
	}
	left := replSubMaxAcked
	for _, r := range runs {
		if r.LedgerID == md.LedgerID && r.To <= md.EntryID {
			continue
		}
		if left <= 0 {
			break
		}
		// Local entries are their own origin: the run as it is. Others
		// need their entries' origins.
		for pos := (ledger.Position{LedgerID: r.LedgerID, EntryID: r.From}); pos.EntryID <= r.To && left > 0; {
			es, err := t.ml.Read(ctx, pos, int(min(r.To-pos.EntryID+1, 500)), 0)
			if err != nil || len(es) == 0 {
				break
			}
			for _, e := range es {
				if e.Pos.LedgerID != r.LedgerID || e.Pos.EntryID > r.To {
					break
				}
				if c, p, ok := entryOrigin(local, e, &meta); ok {
					u.addAcked(c, p)
				}
				left--
				pos = ledger.Position{LedgerID: r.LedgerID, EntryID: e.Pos.EntryID + 1}
			}
			if es[len(es)-1].Pos.LedgerID != r.LedgerID {
				break
			}
		}
	}
	src.mu.Lock()
	src.lastKey, src.last = key, u
	src.mu.Unlock()
	return u, nil
}

// addAcked records an individually consumed origin position, extending the
// last run when contiguous.
func (u *replSubUpdate) addAcked(c string, p ledger.Position) {
	if u.Acked == nil {
		u.Acked = map[string][][3]int64{}
	}
	runs := u.Acked[c]
	if n := len(runs); n > 0 && runs[n-1][0] == p.LedgerID && runs[n-1][2]+1 == p.EntryID {
		runs[n-1][2] = p.EntryID
	} else {
		runs = append(runs, [3]int64{p.LedgerID, p.EntryID, p.EntryID})
	}
	u.Acked[c] = runs
}

// consumed reports whether the state covers an entry of origin (c, p).
func (u *replSubUpdate) consumed(vec map[string]ledger.Position, c string, p ledger.Position) bool {
	if b, ok := vec[c]; ok && p.Compare(b) <= 0 {
		return true
	}
	for _, r := range u.Acked[c] {
		if r[0] == p.LedgerID && r[1] <= p.EntryID && p.EntryID <= r[2] {
			return true
		}
	}
	return false
}

// onReplSubMarker takes a state SEND from a remote replicator: it is
// applied in the background, the latest state of each subscription first
// replacing any not yet applied.
func (t *Topic) onReplSubMarker(from string, data []byte) error {
	meta, payload, err := protocol.ParseHeadersAndPayload(data)
	if err != nil {
		return err
	}
	if meta.GetMarkerType() != markerReplSubUpdate {
		return nil // a marker this broker does not know: ignored
	}
	var u replSubUpdate
	if err := json.Unmarshal(payload, &u); err != nil {
		return fmt.Errorf("replicated subscription state: %w", err)
	}
	if u.Subscription == "" || t.ml == nil {
		return nil
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	if t.replSubPending == nil {
		t.replSubPending = map[string]*replSubUpdate{}
	}
	_, queued := t.replSubPending[u.Subscription]
	t.replSubPending[u.Subscription] = &u
	t.mu.Unlock()
	if queued {
		return nil // the worker will take the newer state
	}
	t.s.wg.Add(1)
	go func() {
		defer t.s.wg.Done()
		t.mu.Lock()
		next := t.replSubPending[u.Subscription]
		delete(t.replSubPending, u.Subscription)
		t.mu.Unlock()
		ctx, cancel := t.s.stopContext(time.Minute)
		defer cancel()
		if err := t.applyReplSub(ctx, from, next); err != nil {
			t.s.log.Warn("apply replicated subscription state failed", "topic", t.name.String(), "subscription", next.Subscription, "err", err)
		}
	}()
	return nil
}

// applyReplSub acknowledges on the local subscription every entry the
// remote state covers.
func (t *Topic) applyReplSub(ctx context.Context, from string, u *replSubUpdate) error {
	vec := map[string]ledger.Position{}
	for c, s := range u.Vector {
		if p, ok := ledger.ParsePosition(s); ok {
			vec[c] = p
		}
	}
	s, err := t.subscription(ctx, u.Subscription, true, ledger.InitialEarliest, nil, false, -1)
	if err != nil {
		return err
	}
	s.markReplicated()
	local := t.s.cfg.ClusterName
	var meta pb.MessageMetadata
	next := t.ml.Next(s.cursor.MarkDeletePosition())
	// Each origin's entries lie here in origin order, so once an origin's
	// entry is past everything the state covers of it, no later entry of
	// that origin is covered; the scan ends when that holds for every
	// origin the state names.
	reach := map[string]ledger.Position{}
	for c, p := range vec {
		reach[c] = p
	}
	for c, runs := range u.Acked {
		for _, r := range runs {
			if p := (ledger.Position{LedgerID: r[0], EntryID: r[2]}); p.Compare(reach[c]) > 0 || !hasPos(reach, c) {
				reach[c] = p
			}
		}
	}
	past := map[string]bool{}
	var acks []ledger.Position
scan:
	for n := 0; n < replSubScan && len(past) < len(reach); {
		es, err := t.ml.Read(ctx, next, 500, 0)
		if err != nil || len(es) == 0 {
			break
		}
		for _, e := range es {
			n++
			c, p, ok := entryOrigin(local, e, &meta)
			if !ok {
				continue
			}
			if r, named := reach[c]; named && p.Compare(r) > 0 {
				past[c] = true
				if len(past) == len(reach) {
					break scan
				}
				continue
			}
			if u.consumed(vec, c, p) && !s.cursor.IsAcked(e.Pos) {
				acks = append(acks, e.Pos)
			}
		}
		next = t.ml.Next(es[len(es)-1].Pos)
	}
	s.ackPositions(acks)
	// What was just applied is the state here too: not sent back unless
	// local consumers change it.
	if src := s.replSrcState(); src != nil {
		st, err := t.replSubState(ctx, s, src)
		if err == nil {
			b, _ := json.Marshal(st)
			src.mu.Lock()
			src.sent[from] = string(b)
			src.mu.Unlock()
		}
	}
	return nil
}

func hasPos(m map[string]ledger.Position, k string) bool { _, ok := m[k]; return ok }

func (s *Subscription) replSrcState() *replSubSource {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replSrc
}

// ackPositions acknowledges entries individually, as consumer acks do.
func (s *Subscription) ackPositions(ps []ledger.Position) {
	if len(ps) == 0 {
		return
	}
	wake := false
	for _, p := range ps {
		if err := s.cursor.Ack(p); err != nil {
			continue
		}
		s.mu.Lock()
		for _, c := range s.consumers {
			if _, ok := c.pending[p]; ok {
				_, _, unblocked := s.forgetPendingLocked(c, p)
				wake = wake || unblocked
				break
			}
		}
		delete(s.redeliveries, p)
		s.mu.Unlock()
	}
	if wake {
		s.wake()
	}
}
