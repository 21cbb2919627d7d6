// Package bundle is the arithmetic of namespace bundles: a namespace's
// 32-bit hash space split into contiguous ranges, the hash of a topic name,
// the range a topic falls in, and splitting a range. It is pure (no I/O, no
// clock) so the broker's ownership and the load manager can rely on it and
// tests can cover it exhaustively.
//
// Compatibility with Apache Pulsar, so admin tools show the same values:
//   - a topic's hash is the CRC-32 (IEEE) of its full name
//     ("persistent://tenant/ns/topic-partition-0"), as a uint32;
//   - boundaries are written "0x%08x"; a namespace starts with N equal
//     ranges (default 4) over [0x00000000, 0xffffffff];
//   - a range is named "0x<lower>_0x<upper>"; it holds hashes lower <= h <
//     upper, except the last range, which also holds 0xffffffff.
package bundle
