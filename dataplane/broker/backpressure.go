package broker

// Producer back-pressure. A connection's reader goroutine handles SENDs one
// after another; when it blocks, the broker stops reading that socket, the
// client's TCP window closes and its producers' pending queues fill, which
// is how Pulsar pushes back (it turns Netty's auto-read off). Two limits
// block the reader, both released when the write is answered:
//
//   - per connection, Config.MaxPendingPublishPerConnection SENDs in flight
//     (Pulsar's maxPendingPublishRequestsPerConnection): a producer whose
//     topic stalls stops only its own connection;
//   - broker-wide, Config.MaxPendingPublishBytes of message bytes
//     (Service.pending): it bounds memory when many connections write at
//     once, and when it is exhausted every producing connection waits.
//
// A third pause is the publish rate limit (ratelimits.go): after a SEND
// the reader takes the entry's messages and bytes from its topic's publish
// buckets (the topic's publishRate and its resource group's); when a
// balance went negative it stops reading the connection until the debt is
// paid (throttleReads), so the producer is slowed, never failed. This is
// Pulsar's PIP-322 behaviour: one pause per connection whatever limit
// caused it.
//
// While a connection is blocked nothing else it carries is read either
// (acks, flow permits, pings of its consumers), as in Pulsar.

import "time"

// throttlePublish charges one SEND of msgs messages and n bytes to the
// topic's publish limiter, if it has one, and pauses the reader while the
// topic (or its resource group) is over its rate. It returns false once the
// connection closes.
func (c *conn) throttlePublish(t *Topic, msgs, n int64) bool {
	l := t.rates.Load().publisher()
	if l == nil {
		return true
	}
	now := nanotime()
	l.consume(msgs, n, now)
	for {
		d := l.wait(0, now)
		if d <= 0 {
			return true
		}
		if !c.throttleReads(d) {
			return false
		}
		// The policy may have changed meanwhile; the buckets are shared
		// with the topic's other connections, which may have taken more.
		if l = t.rates.Load().publisher(); l == nil {
			return true
		}
		now = nanotime()
	}
}

// throttleReads pauses the reader for d; false if the connection closed.
func (c *conn) throttleReads(d time.Duration) bool {
	c.throttled.Store(true)
	defer func() {
		c.mu.Lock()
		c.lastIn = time.Now()
		c.mu.Unlock()
		c.throttled.Store(false)
	}()
	c.s.metrics.publishThrottled.Inc()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.closeCh:
		return false
	}
}

// acquireSendSlot takes one of the connection's in-flight SEND slots,
// blocking the reader while all are taken. It fails once the connection
// closes.
func (c *conn) acquireSendSlot() bool {
	select {
	case c.sendSlots <- struct{}{}:
		return true
	default:
	}
	select {
	case c.sendSlots <- struct{}{}:
		return true
	case <-c.closeCh:
		return false
	}
}

// releaseSendSlot returns a slot when its SEND is answered (also after the
// connection closed: the slot was taken, so this never blocks).
func (c *conn) releaseSendSlot() { <-c.sendSlots }
