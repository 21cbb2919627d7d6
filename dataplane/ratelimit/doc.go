// Package ratelimit is the token bucket behind the broker's rate limits
// (publish, dispatch and subscribe rates, resource groups), in the style of
// Pulsar's PIP-322.
//
// A Bucket holds up to a period's worth of tokens and gains them
// continuously at tokens-per-period / period. Callers consume what they
// used after the fact and may drive the balance negative (the size of a
// message or an entry is only known once it is read); the caller then stops
// (pauses a connection's reads, holds a dispatcher) until Wait says the
// debt is paid. So a burst of one period's tokens is allowed after an idle
// period, and over any longer window the rate is the configured one.
//
// Time is passed in (Unix nanoseconds from the caller's clock), so the
// arithmetic is deterministic and tested with a fake clock. Refills happen
// at most every Resolution: a Bucket consumed by many goroutines is two
// atomic adds in the common case and never takes a lock.
//
// Concurrency: every method is safe for concurrent use. Refill is a
// compare-and-swap on the refill time, so concurrent refills add each
// elapsed interval once; the token count may briefly exceed the capacity by
// what concurrent refills add between their compare-and-swap and the clamp.
// SetRate changes the rate in place, so a bucket shared by several topics (a
// resource group) keeps its balance across a policy change.
package ratelimit
