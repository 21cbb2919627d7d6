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
// While a connection is blocked nothing else it carries is read either
// (acks, flow permits, pings of its consumers), as in Pulsar.

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
