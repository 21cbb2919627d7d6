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
