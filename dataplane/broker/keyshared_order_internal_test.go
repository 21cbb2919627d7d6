package broker

import (
	"slices"
	"testing"

	pb "github.com/magnetar-dev/magnetar/api/pulsarwire"
	"github.com/magnetar-dev/magnetar/dataplane/ledger"
)

func TestHeldHashes(t *testing.T) {
	a, b := &Consumer{name: "a"}, &Consumer{name: "b"}
	var h heldHashes
	p := func(e int64) ledger.Position { return ledger.Position{LedgerID: 1, EntryID: e} }
	if h.heldByOther(b, 7) {
		t.Fatal("empty tracker holds a hash")
	}
	h.add(a, p(1), 7)
	h.add(a, p(2), 7)
	h.add(a, p(3), 9)
	if !h.heldByOther(b, 7) || h.heldByOther(a, 7) {
		t.Fatal("hash 7 should be held by a only")
	}
	if got, freed, ok := h.release(p(1)); got != 7 || freed || !ok {
		t.Fatalf("release first of two: hash %d freed %v ok %v", got, freed, ok)
	}
	if !h.heldByOther(b, 7) {
		t.Fatal("hash 7 freed while a still holds an entry of it")
	}
	if _, _, ok := h.release(p(1)); ok {
		t.Fatal("released the same entry twice")
	}
	if got, freed, _ := h.release(p(2)); got != 7 || !freed {
		t.Fatalf("release last: hash %d freed %v", got, freed)
	}
	if h.heldByOther(b, 7) || !h.heldByOther(b, 9) {
		t.Fatal("wrong holds after release")
	}
	h.reset()
	if h.heldByOther(b, 9) || h.hashOf(p(3)) != noHash {
		t.Fatal("reset kept state")
	}
}

// keySharedFixture is a Key_Shared subscription with two auto-split
// consumers: lo owns hashes 0..32767 and hi 32768..65535.
func keySharedFixture() (s *Subscription, lo, hi *Consumer) {
	s = newSubscription(nil, "s", nil, pb.CommandSubscribe_Key_Shared)
	hi = &Consumer{name: "hi", pending: map[ledger.Position]int{}, permits: 100}
	lo = &Consumer{name: "lo", pending: map[ledger.Position]int{}, permits: 100}
	for _, c := range []*Consumer{hi, lo} {
		s.consumers = append(s.consumers, c)
		s.splitAddLocked(c)
	}
	return s, lo, hi
}

const hashLo, hashLo2, hashHi = int32(100), int32(200), int32(40000)

func ksPos(e int64) ledger.Position { return ledger.Position{LedgerID: 1, EntryID: e} }

func takenEntries(rs []replayEntry) []int64 {
	var out []int64
	for _, r := range rs {
		out = append(out, r.pos.EntryID)
	}
	return out
}

func TestKeySharedReplayScan(t *testing.T) {
	for _, tt := range []struct {
		name    string
		setup   func(s *Subscription, lo, hi *Consumer)
		replay  []replayEntry
		max     int
		want    []int64 // entries taken, in order
		wantOut bool    // with allowOutOfOrderDelivery
	}{{
		name:   "free hashes go in position order",
		replay: []replayEntry{{ksPos(1), hashLo, 1}, {ksPos(2), hashHi, 1}, {ksPos(3), hashLo, 1}},
		max:    10, want: []int64{1, 2, 3},
	}, {
		name: "a hash still held by its previous owner waits, others go",
		setup: func(s *Subscription, lo, hi *Consumer) {
			s.trackPendingLocked(hi, ksPos(0), 1, hashLo) // hi got it before lo joined
		},
		replay: []replayEntry{{ksPos(1), hashLo, 1}, {ksPos(2), hashHi, 1}, {ksPos(3), hashLo, 1}, {ksPos(4), hashLo2, 1}},
		max:    10, want: []int64{2, 4},
	}, {
		name: "out-of-order delivery ignores the hold",
		setup: func(s *Subscription, lo, hi *Consumer) {
			s.outOfOrder = true
			s.trackPendingLocked(hi, ksPos(0), 1, hashLo)
		},
		replay: []replayEntry{{ksPos(1), hashLo, 1}, {ksPos(2), hashHi, 1}},
		max:    10, want: []int64{1, 2},
	}, {
		name:   "permits are budgeted per consumer; a blocked hash blocks its later entries",
		setup:  func(s *Subscription, lo, hi *Consumer) { lo.permits = 2 },
		replay: []replayEntry{{ksPos(1), hashLo, 1}, {ksPos(2), hashLo2, 5}, {ksPos(3), hashLo, 1}, {ksPos(4), hashHi, 1}, {ksPos(5), hashLo2, 1}},
		// lo's 2 permits go to entries 1 and 2 (a batch may overdraw, as
		// in Pulsar); 3 and 5 wait; hi's entry 4 goes.
		max: 10, want: []int64{1, 2, 4},
	}, {
		name:   "a consumer without permits does not block the other",
		setup:  func(s *Subscription, lo, hi *Consumer) { lo.permits = 0 },
		replay: []replayEntry{{ksPos(1), hashLo, 1}, {ksPos(2), hashHi, 1}, {ksPos(3), hashLo2, 1}, {ksPos(4), hashHi, 1}},
		max:    10, want: []int64{2, 4},
	}, {
		name:   "at most max entries",
		replay: []replayEntry{{ksPos(1), hashLo, 1}, {ksPos(2), hashHi, 1}, {ksPos(3), hashLo, 1}},
		max:    2, want: []int64{1, 2},
	}, {
		name:   "an entry of unknown hash is left to deliver",
		setup:  func(s *Subscription, lo, hi *Consumer) { lo.permits, hi.permits = 0, 0 },
		replay: []replayEntry{{ksPos(1), hashLo, 1}, {ksPos(2), noHash, 1}},
		max:    10, want: []int64{2},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			s, lo, hi := keySharedFixture()
			if tt.setup != nil {
				tt.setup(s, lo, hi)
			}
			for _, r := range tt.replay {
				s.addReplayLocked(r, false)
			}
			got := takenEntries(s.takeKeySharedReplayLocked(tt.max))
			if !slices.Equal(got, tt.want) {
				t.Fatalf("took %v, want %v", got, tt.want)
			}
			// What was not taken stays, in order, and the per-hash index
			// matches it.
			var left []int64
			count := map[int32]int{}
			for _, r := range s.replay {
				left = append(left, r.pos.EntryID)
				if r.hash != noHash {
					count[r.hash]++
				}
			}
			if len(left)+len(got) != len(tt.replay) || !slices.IsSorted(left) {
				t.Fatalf("left %v after taking %v", left, got)
			}
			if len(count) != len(s.replayHashes) {
				t.Fatalf("replay index %v, replay counts %v", s.replayHashes, count)
			}
			for h, n := range count {
				if s.replayHashes[h] != n {
					t.Fatalf("replay index %v, replay counts %v", s.replayHashes, count)
				}
			}
		})
	}
}

// TestKeySharedDrainLifecycle walks one hash through a consumer join: held
// by the old owner, parked, released by acknowledgement, then delivered to
// the new owner.
func TestKeySharedDrainLifecycle(t *testing.T) {
	s := newSubscription(nil, "s", nil, pb.CommandSubscribe_Key_Shared)
	a := &Consumer{name: "a", pending: map[ledger.Position]int{}, permits: 100}
	s.consumers = append(s.consumers, a)
	s.splitAddLocked(a)
	if s.keySharedTargetLocked(ksPos(1), hashLo) != a {
		t.Fatal("sole consumer does not get the entry")
	}
	s.trackPendingLocked(a, ksPos(1), 1, hashLo)
	s.trackPendingLocked(a, ksPos(2), 1, hashLo)

	b := &Consumer{name: "b", pending: map[ledger.Position]int{}, permits: 100}
	s.consumers = append(s.consumers, b)
	s.splitAddLocked(b) // b takes 0..32767, hashLo with it
	if s.keyOwnerLocked(hashLo) != b {
		t.Fatal("hashLo did not move to b")
	}
	if c := s.keySharedTargetLocked(ksPos(3), hashLo); c != nil {
		t.Fatalf("entry of a draining hash went to %s", c.name)
	}
	s.addReplayLocked(replayEntry{ksPos(3), hashLo, 1}, false)
	// A newer entry of the same hash waits behind the parked one, even
	// once the hash is free.
	if _, _, unblocked := s.forgetPendingLocked(a, ksPos(1)); unblocked {
		t.Fatal("hash released while a still holds an entry")
	}
	if _, _, unblocked := s.forgetPendingLocked(a, ksPos(2)); !unblocked {
		t.Fatal("releasing the last held entry did not report the waiting hash")
	}
	if c := s.keySharedTargetLocked(ksPos(4), hashLo); c != nil {
		t.Fatal("a newer entry overtook the parked one")
	}
	if got := takenEntries(s.takeKeySharedReplayLocked(10)); !slices.Equal(got, []int64{3}) {
		t.Fatalf("took %v after the drain", got)
	}
	if s.keySharedTargetLocked(ksPos(4), hashLo) != b {
		t.Fatal("the drained hash does not flow to b")
	}

	// b closes with the entry pending: it is redelivered, ahead of newer
	// entries of the hash, which is a's again.
	s.trackPendingLocked(b, ksPos(3), 1, hashLo)
	s.consumers = s.consumers[:1]
	s.splitRemoveLocked(b)
	for p := range b.pending {
		s.redeliverPendingLocked(b, p)
	}
	if s.redeliveries[ksPos(3)] != 1 {
		t.Fatal("redelivery not counted")
	}
	if c := s.keySharedTargetLocked(ksPos(5), hashLo); c != nil {
		t.Fatal("a newer entry overtook the redelivered one")
	}
	if got := takenEntries(s.takeKeySharedReplayLocked(10)); !slices.Equal(got, []int64{3}) {
		t.Fatalf("took %v after b closed", got)
	}
}
