package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/magnetar-dev/magnetar/api/pulsarwire"
	"github.com/magnetar-dev/magnetar/dataplane/auth"
	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
	"github.com/magnetar-dev/magnetar/dataplane/replication"
)

// Producer is a client producer attached to a topic through a connection.
type Producer struct {
	conn      *conn
	topic     *Topic
	uid       uint64 // broker-wide unique
	id        uint64
	requestID uint64
	name      string
	mode      pb.ProducerAccessMode
	epoch     uint64
	metadata  map[string]string
	// closed is set when the broker closes the producer (unload, fencing):
	// the client reconnects with the same producer id.
	closed atomic.Bool
	// replicator: a remote cluster's replicator (replication.go), always
	// deduplicated; replMsgs and replBytes count what it stored.
	replicator          bool
	replMsgs, replBytes atomic.Uint64
	// inflight counts the SENDs on their way to the ledger; dropped is
	// set once a SEND was dropped by a migration fence (migration.go).
	inflight atomic.Int64
	dropped  atomic.Bool
}

// closeByBroker tells the client to reconnect this producer.
func (p *Producer) closeByBroker() {
	p.closed.Store(true)
	a := p.topic.assigned()
	p.conn.send(protocol.NewCloseProducer(p.id, 0, a.url, a.urlTLS))
}

// producer returns the live producer with id, forgetting one the broker
// closed.
func (c *conn) producer(id uint64) (*Producer, bool) {
	p, ok := c.producers[id]
	if ok && p.closed.Load() {
		delete(c.producers, id)
		return nil, false
	}
	return p, ok
}

// key identifies the producer broker-wide.
func (p *Producer) key() uint64 { return p.uid }

func (c *conn) handleProducer(cp *pb.CommandProducer) {
	reqID, prodID := cp.GetRequestId(), cp.GetProducerId()
	if p, dup := c.producer(prodID); dup {
		// A retried PRODUCER for a producer already created on this
		// connection: answer as before.
		c.send(protocol.NewProducerSuccess(reqID, p.name, -1, nil, &p.epoch, true))
		return
	}
	tn, err := ParseTopicName(cp.GetTopic())
	if err != nil {
		c.sendError(reqID, protocol.ErrInvalidTopicName.WithMessage(err.Error()))
		return
	}
	ctx, cancel := c.ctx()
	defer cancel()
	if err := c.authorize(ctx, auth.ActionProduce, tn, ""); err != nil {
		c.sendError(reqID, err)
		return
	}
	mode := openAutoCreate
	if isReplicatorProducer(cp.GetProducerName()) {
		mode = openReplicated
	}
	t, err := c.s.getTopic(ctx, tn, mode)
	if err != nil {
		c.sendError(reqID, err)
		return
	}
	if r := t.migration(); r != nil && mode != openReplicated {
		// Fenced for a migration (migration.go): client producers go to
		// the target; remote clusters' replicators still write here.
		// Once the producers here moved, a newcomer is sent after them:
		// TopicMigrated first (the Go, Java and C++ clients register a
		// producer's id before its PRODUCER request), then the retriable
		// refusal, after which it reconnects to the target, as Pulsar
		// redirects producers of a migrated topic with no replication
		// backlog. Before that it retries here until the drain ends.
		if r.producersMoved() {
			c.send(protocol.NewTopicMigrated(prodID, false, r.target.url.BrokerServiceURL, r.target.url.BrokerServiceTLS))
		}
		c.sendError(reqID, t.fencedError(r))
		return
	}
	name := cp.GetProducerName()
	if name == "" {
		name = c.s.generateProducerName()
	}
	p := &Producer{
		conn: c, topic: t, uid: uint64(c.s.nameSeq.Add(1)), id: prodID, requestID: reqID, name: name,
		mode: cp.GetProducerAccessMode(), metadata: kvMap(cp.GetMetadata()),
		replicator: isReplicatorProducer(name) && t.ml != nil,
	}
	if p.replicator {
		if err := t.ensureReplicationDedup(ctx); err != nil {
			c.sendError(reqID, err)
			return
		}
	}
	var schemaVersion []byte
	if sc := cp.GetSchema(); sc != nil && t.ml != nil {
		schemaVersion, err = c.s.schemas.addSchema(ctx, tn, sc)
		if err != nil {
			c.sendError(reqID, err)
			return
		}
	}
	if sub := cp.GetInitialSubscriptionName(); sub != "" && t.ml != nil {
		// The producer asks for a subscription to exist before it writes
		// (dead-letter topics), so nothing it sends is trimmed unread.
		if _, err := t.subscription(ctx, sub, true, ledger.InitialEarliest, nil, false, pb.CommandSubscribe_Shared); err != nil {
			c.sendError(reqID, err)
			return
		}
	}
	if t.ml != nil && t.ml.IsTerminated() {
		c.sendError(reqID, protocol.ErrTopicTerminated.WithMessage("Topic was terminated"))
		return
	}
	if err := t.quotaError(); err != nil {
		c.sendError(reqID, err)
		return
	}
	ready, err := t.addProducer(p)
	if err != nil {
		c.sendError(reqID, err)
		return
	}
	c.producers[prodID] = p
	lastSeq := int64(-1)
	if d := t.dedup.Load(); d != nil {
		lastSeq = d.lastSequence(name)
	}
	c.send(protocol.NewProducerSuccess(reqID, name, lastSeq, schemaVersion, &p.epoch, ready))
}

func kvMap(kvs []*pb.KeyValue) map[string]string {
	if len(kvs) == 0 {
		return nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue()
	}
	return m
}

// handleSend persists one SEND. The reader blocks here while the broker's
// pending-publish memory is full: that pauses reading this socket, Pulsar's
// producer back-pressure.
func (c *conn) handleSend(s *pb.CommandSend, data []byte) error {
	prodID, seq := s.GetProducerId(), s.GetSequenceId()
	p, ok := c.producers[prodID]
	if !ok {
		// Unknown producer: the client is out of sync; Pulsar closes.
		return fmt.Errorf("SEND for unknown producer %d", prodID)
	}
	if p.closed.Load() {
		// Sent before the client saw CLOSE_PRODUCER. Drop it without an
		// answer: the client re-creates the producer (at the broker the
		// close named, if any) and re-sends every unreceipted message
		// there. Closing the whole connection, as Pulsar does, would also
		// disconnect the connection's other producers and consumers and
		// make them look the topic up again, defeating an unload's
		// assigned broker URL.
		return nil
	}
	highest := s.GetHighestSequenceId()
	if data == nil {
		c.send(protocol.NewSendError(prodID, seq, pb.ServerError_UnknownError, "SEND without payload"))
		return nil
	}
	if err := protocol.VerifyChecksum(data); err != nil {
		c.send(protocol.NewSendError(prodID, seq, pb.ServerError_ChecksumError, "checksum mismatch"))
		return nil
	}
	if len(data) > c.s.cfg.MaxMessageSize+protocol.FrameHeadroom {
		c.send(protocol.NewSendError(prodID, seq, pb.ServerError_NotAllowedError, "message too large"))
		return nil
	}
	if p.replicator && s.GetMarker() {
		// A replicated subscription's state: applied, never stored.
		if err := p.topic.onReplSubMarker(strings.TrimPrefix(p.name, replication.Prefix), data); err != nil {
			c.s.log.Warn("bad replicated subscription state", "topic", p.topic.name.String(), "err", err)
		}
		c.sendFrame(outFrame{isReceipt: true, receipt: sendReceipt{producerID: prodID, sequenceID: seq, highestSequenceID: highest,
			ledgerID: ^uint64(0), entryID: ^uint64(0)}})
		return nil
	}
	if t := p.topic; t.ml != nil && (t.ml.IsTerminated() || t.quotaError() != nil) {
		// Over quota or terminated: close the producer (the client then
		// learns why when it tries to re-create it). The message is not
		// stored; the client fails or re-sends it.
		p.closeByBroker()
		return nil
	}
	if !p.replicator {
		// Counted before the fence is checked: once the migration sees no
		// SEND in flight after fencing, none can be stored (migration.go).
		p.inflight.Add(1)
		if p.topic.migration() != nil {
			p.inflight.Add(-1)
			p.dropped.Store(true)
			return nil // before deduplication records it; the client re-sends it where it reconnects
		}
	}
	dd := p.topic.dedup.Load()
	if dd != nil && !p.replicator && !p.topic.dedupOn.Load() {
		dd = nil // kept for replicators only
	}
	var dk dedupSend
	if dd != nil && p.replicator {
		dk = dedupSend{producer: p.name, seq: int64(seq), highest: int64(seq), chunkID: -1}
	} else if dd != nil {
		dk = dedupSend{producer: p.name, seq: int64(seq), highest: int64(highest), chunkID: -1}
		if s.GetIsChunk() {
			// Chunk ids live in the message metadata; only chunks pay
			// for decoding it here.
			if meta, _, err := protocol.ParseHeadersAndPayload(data); err == nil && meta.NumChunksFromMsg != nil {
				dk.chunkID, dk.numChunks = meta.GetChunkId(), meta.GetNumChunksFromMsg()
			}
		}
	}
	if dd != nil {
		switch dd.admit(dk) {
		case dup:
			// Stored before: acknowledge without storing it again (Pulsar
			// answers with position -1:-1).
			c.sendFrame(outFrame{isReceipt: true, receipt: sendReceipt{producerID: prodID, sequenceID: seq, highestSequenceID: highest,
				ledgerID: ^uint64(0), entryID: ^uint64(0)}})
			p.doneSending()
			return nil
		case dupUnknown:
			// The earlier copy may still fail: neither store nor confirm.
			// The client reconnects and re-sends; by then the earlier
			// write has settled.
			c.send(protocol.NewSendError(prodID, seq, pb.ServerError_PersistenceError,
				"deduplication: an earlier copy of this message is still being written"))
			p.doneSending()
			return nil
		}
	}
	n := int64(len(data))
	start := time.Now() // before the waits for a send slot and the byte budget
	if !c.acquireSendSlot() {
		p.doneSending()
		return errors.New("connection closed")
	}
	if !c.s.pending.acquire(n, c.closeCh) {
		c.releaseSendSlot()
		p.doneSending()
		return errors.New("connection closed")
	}
	op := publishOps.Get().(*publishOp)
	num := s.GetNumMessages()
	*op = publishOp{c: c, p: p, dd: dd, prodID: prodID, seq: seq, highest: highest,
		dedup: dk, size: n, numMessages: num, payload: int64(protocol.PayloadSize(data)), start: start}
	// data is the reader's fresh buffer: the topic keeps it without a copy.
	t := p.topic
	t.publish(data, op)
	// The publish rate: charged once the SEND is on its way (its size is
	// known only now), pausing this connection's reads while over.
	if !c.throttlePublish(t, int64(max(num, 1)), n) {
		return errors.New("connection closed")
	}
	return nil
}

// publishOp is one SEND on its way through the topic. It is the managed
// ledger's add callback; ops are pooled, so the produce path allocates no
// closure per message.
type publishOp struct {
	c           *conn
	p           *Producer
	dd          *dedupState
	prodID      uint64
	seq         uint64
	highest     uint64
	dedup       dedupSend // set when dd is
	size        int64
	numMessages int32
	payload     int64     // payload bytes, for usage metering (usage.go)
	start       time.Time // when the SEND was read (publishSeconds)
}

var publishOps = sync.Pool{New: func() any { return new(publishOp) }}

// AddComplete answers the SEND once the entry is stored (or failed). It
// runs exactly once per op; the op is recycled first.
func (op *publishOp) AddComplete(pos ledger.Position, err error) {
	c, p, dd := op.c, op.p, op.dd
	prodID, seq, highest, dk, n, num := op.prodID, op.seq, op.highest, op.dedup, op.size, op.numMessages
	payload := op.payload
	c.s.metrics.publishSeconds.Observe(time.Since(op.start).Seconds())
	*op = publishOp{}
	publishOps.Put(op)

	defer p.doneSending() // after the answer is queued
	if err == nil && p.topic.ml != nil {
		p.topic.notifySubscriptions() // stored: wake the dispatchers
	}
	c.s.pending.release(n)
	c.releaseSendSlot()
	if dd != nil && dd.done(dk, pos, err) {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := dd.snapshot(ctx, p.topic.ml); err != nil {
				c.s.log.Warn("dedup snapshot failed", "topic", p.topic.name.String(), "err", err)
			}
		}()
	}
	if err != nil {
		if errors.Is(err, ledger.ErrTerminated) {
			p.closeByBroker()
			return
		}
		code, msg := protocol.ServerErrorOf(mapLedgerError(err))
		c.send(protocol.NewSendError(prodID, seq, code, msg))
		return
	}
	c.s.metrics.inMessages.Add(float64(max(num, 1)))
	c.s.metrics.inBytes.Add(float64(n))
	p.topic.in.add(int(num), int(n))
	if p.replicator {
		p.replMsgs.Add(uint64(max(num, 1)))
		p.replBytes.Add(uint64(n))
	} else {
		c.s.metrics.usage.in(p.topic.name, num, payload) // replicated in is billed at the source, as replicated out
		p.topic.usage.added(pos, num, payload)
	}
	c.sendFrame(outFrame{isReceipt: true, receipt: sendReceipt{producerID: prodID, sequenceID: seq, highestSequenceID: highest,
		ledgerID: uint64(pos.LedgerID), entryID: uint64(pos.EntryID)}})
}

// doneSending ends one SEND counted in inflight.
func (p *Producer) doneSending() {
	if !p.replicator {
		p.inflight.Add(-1)
	}
}

// mapLedgerError maps managed-ledger errors to Pulsar errors.
func mapLedgerError(err error) error {
	switch {
	case errors.Is(err, ledger.ErrTerminated):
		return protocol.ErrTopicTerminated.WithMessage("topic was terminated")
	case errors.Is(err, ledger.ErrFenced), errors.Is(err, ledger.ErrClosed):
		return protocol.ErrServiceNotReady.WithMessage(err.Error())
	}
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return err
	}
	return protocol.ErrPersistence.WithMessage(err.Error())
}

func (c *conn) handleCloseProducer(cp *pb.CommandCloseProducer) {
	if p, ok := c.producers[cp.GetProducerId()]; ok {
		delete(c.producers, cp.GetProducerId())
		p.topic.removeProducer(p)
	}
	c.send(protocol.NewSuccess(cp.GetRequestId()))
}
