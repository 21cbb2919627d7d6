package broker

import (
	"slices"

	pb "github.com/magnetar-dev/magnetar/api/pulsarwire"
	"github.com/magnetar-dev/magnetar/dataplane/ledger"
)

// Bookkeeping and dispatch rules that keep Key_Shared messages in order per
// key across consumer changes; keyshared.go describes the design, why it
// was chosen and its limits.

// keySharedMaxReplay is the most entries the Key_Shared dispatcher parks in
// the replay set before it stops reading new entries.
const keySharedMaxReplay = 20000

// noHash marks a replay entry whose sticky-key hash is not known; the
// dispatcher reads it and decides when delivering.
const noHash int32 = -1

// replayEntry is an entry waiting in the replay set.
type replayEntry struct {
	pos  ledger.Position
	hash int32 // sticky-key hash under Key_Shared, else noHash
	n    int   // messages in the entry, for permit accounting
}

// hashHold is the pending entries of one hash and the consumer holding
// them.
type hashHold struct {
	c *Consumer
	n int
}

// heldHashes tracks which consumer holds pending entries of which hash. It
// is guarded by the subscription's mu.
type heldHashes struct {
	byPos  map[ledger.Position]int32
	byHash map[int32]*hashHold
}

// add records that c was sent the entry at pos of hash h.
func (t *heldHashes) add(c *Consumer, pos ledger.Position, h int32) {
	if t.byPos == nil {
		t.byPos = map[ledger.Position]int32{}
		t.byHash = map[int32]*hashHold{}
	}
	if _, dup := t.byPos[pos]; dup {
		t.release(pos)
	}
	t.byPos[pos] = h
	hold := t.byHash[h]
	if hold == nil {
		hold = &hashHold{c: c}
		t.byHash[h] = hold
	}
	// Another consumer holding h here cannot happen while ordering is on;
	// with allowOutOfOrderDelivery the count simply covers both.
	hold.n++
}

// release forgets the pending entry at pos. It returns its hash and
// whether that was the hash's last pending entry.
func (t *heldHashes) release(pos ledger.Position) (h int32, freed, ok bool) {
	h, ok = t.byPos[pos]
	if !ok {
		return noHash, false, false
	}
	delete(t.byPos, pos)
	hold := t.byHash[h]
	if hold.n--; hold.n <= 0 {
		delete(t.byHash, h)
		freed = true
	}
	return h, freed, true
}

// hashOf returns the hash of the pending entry at pos.
func (t *heldHashes) hashOf(pos ledger.Position) int32 {
	if h, ok := t.byPos[pos]; ok {
		return h
	}
	return noHash
}

// heldByOther reports whether a consumer other than c holds entries of h.
func (t *heldHashes) heldByOther(c *Consumer, h int32) bool {
	hold := t.byHash[h]
	return hold != nil && hold.c != c
}

func (t *heldHashes) reset() {
	t.byPos, t.byHash = nil, nil
}

// keySharedOrderedLocked reports whether the per-key ordering rules apply.
func (s *Subscription) keySharedOrderedLocked() bool {
	return s.subType == pb.CommandSubscribe_Key_Shared && !s.outOfOrder
}

// keySharedTargetLocked returns the consumer that may receive the entry at
// pos with hash h now, or nil if it must wait in the replay set.
func (s *Subscription) keySharedTargetLocked(pos ledger.Position, h int32) *Consumer {
	c := s.keyOwnerLocked(h)
	if c == nil || c.availableLocked() <= 0 {
		return nil
	}
	if !s.outOfOrder && (s.held.heldByOther(c, h) || s.olderInReplayLocked(pos, h)) {
		return nil
	}
	return c
}

// olderInReplayLocked reports whether an entry of hash h older than pos
// waits in the replay set.
func (s *Subscription) olderInReplayLocked(pos ledger.Position, h int32) bool {
	if s.replayHashes[h] == 0 {
		return false
	}
	if s.replay[len(s.replay)-1].pos.Compare(pos) < 0 {
		return true // everything parked is older: the common case of new reads
	}
	i, _ := slices.BinarySearchFunc(s.replay, pos, compareReplayPos)
	for _, r := range s.replay[:i] {
		if r.hash == h {
			return true
		}
	}
	return false
}

// takeKeySharedReplayLocked removes from the replay set, in position
// order, up to max entries that can be delivered now, and leaves the rest.
// It budgets permits per consumer as deliver will spend them; deliver
// checks every entry again, so this is a selection, not a promise.
func (s *Subscription) takeKeySharedReplayLocked(max int) []replayEntry {
	var out []replayEntry
	var blocked map[int32]bool
	budget := map[*Consumer]int{}
	keep := s.replay[:0]
	for i, r := range s.replay {
		if len(out) >= max {
			keep = append(keep, s.replay[i:]...)
			break
		}
		if r.hash == noHash {
			out = append(out, r) // deliver parses it and decides
			continue
		}
		ok := !blocked[r.hash]
		var c *Consumer
		if ok {
			c = s.keyOwnerLocked(r.hash)
			ok = c != nil && (s.outOfOrder || !s.held.heldByOther(c, r.hash))
		}
		if ok {
			b, seen := budget[c]
			if !seen {
				b = c.availableLocked()
			}
			if ok = b > 0; ok {
				budget[c] = b - r.n
			}
		}
		if !ok {
			if blocked == nil {
				blocked = map[int32]bool{}
			}
			blocked[r.hash] = true
			keep = append(keep, r)
			continue
		}
		out = append(out, r)
	}
	clear(s.replay[len(keep):])
	s.replay = keep
	for _, r := range out {
		s.unindexReplayLocked(r)
	}
	return out
}

// takeReplayLocked removes up to max entries from the front of the replay
// set: the replay rule of the other subscription types.
func (s *Subscription) takeReplayLocked(max int) []replayEntry {
	n := min(len(s.replay), max)
	out := slices.Clone(s.replay[:n])
	s.replay = slices.Delete(s.replay, 0, n)
	for _, r := range out {
		s.unindexReplayLocked(r)
	}
	return out
}

func (s *Subscription) unindexReplayLocked(r replayEntry) {
	if r.hash == noHash {
		return
	}
	if s.replayHashes[r.hash]--; s.replayHashes[r.hash] <= 0 {
		delete(s.replayHashes, r.hash)
	}
}

// replayFullLocked reports whether the Key_Shared dispatcher has parked as
// many entries as it may and must stop reading new ones.
func (s *Subscription) replayFullLocked() bool {
	return s.subType == pb.CommandSubscribe_Key_Shared && len(s.replay) >= keySharedMaxReplay
}

// trackPendingLocked records that c was sent the entry at pos.
func (s *Subscription) trackPendingLocked(c *Consumer, pos ledger.Position, n int, h int32) {
	c.pending[pos] = n
	if h != noHash {
		s.held.add(c, pos, h)
	}
	c.unacked += n
	s.unacked += n
	if s.unackedLimitedLocked() {
		lim := s.topic.limits()
		if l := lim.maxUnackedPerConsumer; l > 0 && c.unacked >= l {
			c.blocked = true
		}
		if l := lim.maxUnackedPerSub; l > 0 && s.unacked >= l {
			s.blocked = true
		}
	}
}

// forgetPendingLocked forgets that c holds the entry at pos. It returns the
// entry for redelivery, whether c held it, and whether that released a
// hash that has entries waiting (the dispatcher should then run).
func (s *Subscription) forgetPendingLocked(c *Consumer, pos ledger.Position) (r replayEntry, ok, unblocked bool) {
	n, ok := c.pending[pos]
	if !ok {
		return replayEntry{}, false, false
	}
	delete(c.pending, pos)
	r = replayEntry{pos: pos, hash: noHash, n: n}
	if h, freed, tracked := s.held.release(pos); tracked {
		r.hash = h
		unblocked = freed && s.replayHashes[h] > 0
	}
	c.unacked -= n
	s.unacked -= n
	if (c.blocked || s.blocked) && s.recheckUnackedLocked(s.topic.limits()) {
		unblocked = true
	}
	return r, true, unblocked
}

// redeliverPendingLocked moves the entry at pos from c's pending set to
// the replay set.
func (s *Subscription) redeliverPendingLocked(c *Consumer, pos ledger.Position) {
	if r, ok, _ := s.forgetPendingLocked(c, pos); ok {
		s.addReplayLocked(r, true)
	}
}

// pendingOwnerLocked returns the consumer holding pos pending: usually
// cons, the one acknowledging it, but a consumer may acknowledge a message
// after it was redelivered to another (as Pulsar does, the ack then counts
// for the one holding it, whose hold on the hash would otherwise linger).
func (s *Subscription) pendingOwnerLocked(cons *Consumer, pos ledger.Position) *Consumer {
	if _, ok := cons.pending[pos]; ok {
		return cons
	}
	for _, c := range s.consumers {
		if _, ok := c.pending[pos]; ok {
			return c
		}
	}
	return cons
}

// forgetAllPendingLocked drops everything c holds without redelivery.
func (s *Subscription) forgetAllPendingLocked(c *Consumer) {
	for pos := range c.pending {
		s.forgetPendingLocked(c, pos)
	}
}

// Unacknowledged-message limits (max_unacked_messages_per_consumer and
// _per_subscription), as in Pulsar: they apply to Shared and Key_Shared
// subscriptions, whose consumers are handed messages round-robin or by
// key. A consumer holding its limit of unacknowledged messages gets no
// more (its permits are kept) until it holds half of the limit or less; a
// subscription whose consumers hold its limit dispatches nothing until
// they hold half or less.

// unackedLimitedLocked reports whether the limits apply to the
// subscription's type.
func (s *Subscription) unackedLimitedLocked() bool {
	return s.subType == pb.CommandSubscribe_Shared || s.subType == pb.CommandSubscribe_Key_Shared
}

// recheckUnackedLocked lifts the blocks the counts or lim no longer
// justify (and sets those new limits call for); true if it lifted one.
func (s *Subscription) recheckUnackedLocked(lim *topicLimits) bool {
	limited := s.unackedLimitedLocked()
	block := func(blocked bool, n, limit int) bool {
		switch {
		case !limited || limit <= 0:
			return false
		case n >= limit:
			return true
		case blocked && n > limit/2:
			return true
		}
		return false
	}
	lifted := false
	for _, c := range s.consumers {
		was := c.blocked
		c.blocked = block(was, c.unacked, lim.maxUnackedPerConsumer)
		lifted = lifted || (was && !c.blocked)
	}
	was := s.blocked
	s.blocked = block(was, s.unacked, lim.maxUnackedPerSub)
	return lifted || (was && !s.blocked)
}

// availableLocked is the permits c may be sent messages against now: none
// while it is blocked for unacknowledged messages.
func (c *Consumer) availableLocked() int {
	if c.blocked {
		return 0
	}
	return c.permits
}
