package broker

import "github.com/magnetar-dev/magnetar/dataplane/ledger"

// Hooks for the external tests of live policies: what a loaded topic runs
// with, read without reopening it.

// LoadedTopic returns the topic named t if it is open on s.
func LoadedTopic(s *Service, t TopicName) *Topic { return s.openedTopic(t) }

// LedgerConfig returns the managed-ledger configuration a loaded
// persistent topic runs with.
func (t *Topic) LedgerConfig() ledger.Config { return t.ml.Config() }

// DedupActive reports whether the topic deduplicates SENDs now.
func (t *Topic) DedupActive() bool { return t.dedup.Load() != nil }

// PolicySnapshot returns the snapshot of namespace policies the topic runs
// with, to compare by identity.
func (t *Topic) PolicySnapshot() any { return t.pol.cur.Load() }

// RateLimited reports whether the topic's publish and dispatch run under
// a rate limit (its own or its resource group's) now.
func (t *Topic) RateLimited() (publish, dispatch bool) {
	r := t.rates.Load()
	return r.publisher() != nil, r.dispatcher() != nil
}

// SubscriptionRateLimited reports whether the named subscription has a
// dispatch rate of its own.
func (t *Topic) SubscriptionRateLimited(name string) bool {
	t.mu.Lock()
	s := t.subs[name]
	t.mu.Unlock()
	return s != nil && s.rl.Load() != nil
}

// MaxUnacked returns the unacknowledged-message limits the topic enforces.
func (t *Topic) MaxUnacked() (perConsumer, perSubscription int) {
	l := t.limits()
	return l.maxUnackedPerConsumer, l.maxUnackedPerSub
}
