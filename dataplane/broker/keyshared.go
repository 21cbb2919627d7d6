package broker

import (
	"encoding/binary"
	"math/bits"
)

// Key_Shared hashing and auto-split ranges.
//
// A message's sticky key (ordering key, else partition key) is hashed with
// Murmur3 (x86, 32-bit, seed 0), masked to 31 bits and reduced modulo
// keyHashRange, the scheme Pulsar's brokers use, so keys spread across
// consumers the same way. Under AUTO_SPLIT the first consumer owns the
// whole range; each new consumer takes the lower half of the largest range
// (the earliest such range on ties); a leaving consumer's ranges go to the
// owner of the adjacent range above (or below, for the top range).
//
// Key_Shared ordering per key across consumer changes.
//
// The guarantee: the messages of one key are first delivered in the order
// they were published, even while consumers join and leave, and a key is
// never outstanding (delivered, not yet acknowledged) on two consumers at
// once. Moving a hash range between consumers must therefore wait for the
// old owner.
//
// Choice: Pulsar 4's "draining hashes" (PIP-379) rather than the older
// "recently joined consumers" rule, because it stalls only the hashes that
// actually moved while their old owner still holds messages of them, not
// every key of the newcomer until the mark-delete position catches up. We
// state it as one invariant instead of as an event on range changes:
//
//	an entry of hash h may go to consumer c only if no other consumer
//	holds a pending entry of h.
//
// heldHashes counts, per hash, the pending entries and the consumer that
// holds them. A hash that moved (a join split a range, a leave merged one,
// a STICKY consumer closed) while its old owner still holds entries is the
// "draining" hash of PIP-379: its entries wait in the replay set until the
// old owner acknowledges them, asks for their redelivery or closes (all of
// which release them), then go to the new owner. No event is needed when
// ranges change, so auto-split and STICKY ranges are covered alike, and a
// hash that moves back to its old owner flows again at once.
//
// Two more rules keep per-key order:
//
//   - An entry read from the cursor whose hash has entries waiting in the
//     replay set is itself parked in the replay set: those are older
//     (redelivered, or parked earlier) and go first.
//   - The replay set is scanned in position order; once an entry of hash h
//     cannot go, no later entry of h goes in that scan.
//
// Blocked entries never block other keys: the dispatcher picks from the
// replay set only what can go now and keeps reading new entries while
// some consumer has permits, parking entries it cannot deliver. What bounds
// this is keySharedMaxReplay: once that many entries are parked, no new
// entries are read until some drain (Pulsar has the same look-ahead limit),
// so a consumer that never acknowledges nor reads can stall the
// subscription once it holds back that many entries. A single stuck key
// (its old owner never acknowledges) stalls only that key until the client
// releases it (ack timeout, negative ack, close).
//
// Limits and choices where Pulsar was ambiguous or we differ:
//   - The rule works on hashes, not keys: two keys with the same hash wait
//     for each other, as in Pulsar.
//   - Counted in entries, not messages: a batch entry carries one key
//     (producers must use key-based batching, as Pulsar requires).
//   - Delayed messages (deliver_at_time) are not ordered against their key:
//     they are delayed on purpose.
//   - Consumers may declare allowOutOfOrderDelivery; then only the owner
//     and permits count. As in Pulsar, all consumers of a subscription
//     must agree on it (and on AUTO_SPLIT versus STICKY); one that differs
//     is refused with ConsumerBusy.
//   - Non-persistent topics keep no pending entries and are not ordered
//     across consumer changes (their messages are dropped without permits
//     anyway).
//   - The scan of the replay set is linear in its size (at most
//     keySharedMaxReplay plus redeliveries) under s.mu, once per dispatch
//     round.

const keyHashRange = 65536

// murmur3x86_32 is MurmurHash3's x86 32-bit variant.
func murmur3x86_32(data []byte, seed uint32) uint32 {
	const c1, c2 = 0xcc9e2d51, 0x1b873593
	h := seed
	n := len(data)
	for len(data) >= 4 {
		k := binary.LittleEndian.Uint32(data)
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
		h = bits.RotateLeft32(h, 13)
		h = h*5 + 0xe6546b64
		data = data[4:]
	}
	var k uint32
	switch len(data) {
	case 3:
		k ^= uint32(data[2]) << 16
		fallthrough
	case 2:
		k ^= uint32(data[1]) << 8
		fallthrough
	case 1:
		k ^= uint32(data[0])
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
	}
	h ^= uint32(n)
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// keyHash maps a sticky key into 0..keyHashRange-1.
func keyHash(key string) int32 {
	return int32((murmur3x86_32([]byte(key), 0) & 0x7fffffff) % keyHashRange)
}

// keyRange is a slice [start, end] of the hash space owned by a consumer.
type keyRange struct {
	start, end int32
	c          *Consumer
}

// splitAddLocked gives c the lower half of the largest range.
func (s *Subscription) splitAddLocked(c *Consumer) {
	if len(s.ranges) == 0 {
		s.ranges = []keyRange{{0, keyHashRange - 1, c}}
		return
	}
	best := 0
	for i, r := range s.ranges {
		if r.end-r.start > s.ranges[best].end-s.ranges[best].start {
			best = i
		}
	}
	r := s.ranges[best]
	if r.start == r.end {
		return // nothing left to split: c gets no keys
	}
	mid := r.start + (r.end-r.start)/2
	s.ranges[best].start = mid + 1
	s.ranges = append(s.ranges[:best], append([]keyRange{{r.start, mid, c}}, s.ranges[best:]...)...)
}

// splitRemoveLocked hands c's ranges to their neighbours.
func (s *Subscription) splitRemoveLocked(c *Consumer) {
	for i := 0; i < len(s.ranges); {
		if s.ranges[i].c != c {
			i++
			continue
		}
		switch {
		case len(s.ranges) == 1:
			s.ranges = nil
			return
		case i+1 < len(s.ranges):
			s.ranges[i+1].start = s.ranges[i].start
		default:
			s.ranges[i-1].end = s.ranges[i].end
		}
		s.ranges = append(s.ranges[:i], s.ranges[i+1:]...)
	}
}

// autoSplitOwnerLocked returns the consumer owning hash h.
func (s *Subscription) autoSplitOwnerLocked(h int32) *Consumer {
	for _, r := range s.ranges {
		if h >= r.start && h <= r.end {
			return r.c
		}
	}
	return nil
}
