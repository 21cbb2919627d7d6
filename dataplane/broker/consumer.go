package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	pb "github.com/magnetar-dev/magnetar/api/pulsarwire"
	"github.com/magnetar-dev/magnetar/dataplane/auth"
	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
	"google.golang.org/protobuf/proto"
)

func posOf(id *pb.MessageIdData) ledger.Position {
	return ledger.Position{LedgerID: int64(id.GetLedgerId()), EntryID: int64(id.GetEntryId())}
}

// startPosition maps a reader's start message id to a cursor start:
// earliest (-1:-1), latest (MaxInt64:MaxInt64) or an entry.
func startPosition(id *pb.MessageIdData) ledger.Position {
	p := posOf(id)
	switch {
	case p.LedgerID < 0 || p.EntryID < 0 && p.LedgerID <= 0:
		return ledger.Earliest
	case p.LedgerID == math.MaxInt64:
		return ledger.Latest
	}
	return p
}

func (c *conn) handleSubscribe(cs *pb.CommandSubscribe) {
	reqID, consID := cs.GetRequestId(), cs.GetConsumerId()
	if _, dup := c.consumer(consID); dup {
		c.send(protocol.NewSuccess(reqID))
		return
	}
	tn, err := ParseTopicName(cs.GetTopic())
	if err != nil {
		c.sendError(reqID, protocol.ErrInvalidTopicName.WithMessage(err.Error()))
		return
	}
	if cs.GetSubscription() == "" {
		c.sendError(reqID, protocol.ErrNotAllowed.WithMessage("empty subscription name"))
		return
	}
	ctx, cancel := c.ctx()
	defer cancel()
	if err := c.authorize(ctx, auth.ActionConsume, tn, cs.GetSubscription()); err != nil {
		c.sendError(reqID, err)
		return
	}
	t, err := c.s.GetTopic(ctx, tn, cs.GetForceTopicCreation())
	if err != nil {
		c.sendError(reqID, err)
		return
	}
	// An AUTO_CONSUME consumer reads whatever the topic's schema is: it
	// registers nothing.
	if sc := cs.GetSchema(); sc != nil && t.ml != nil && sc.GetType() != pb.Schema_AutoConsume {
		if _, err := c.s.schemas.addSchema(ctx, tn, sc); err != nil {
			c.sendError(reqID, err)
			return
		}
	}
	if cs.GetReadCompacted() && (t.ml == nil || cs.GetSubType() != pb.CommandSubscribe_Exclusive && cs.GetSubType() != pb.CommandSubscribe_Failover) {
		c.sendError(reqID, protocol.ErrNotAllowed.WithMessage("Read compacted is only allowed on persistent topics with Exclusive or Failover subscriptions"))
		return
	}
	initial := ledger.InitialLatest
	if cs.GetInitialPosition() == pb.CommandSubscribe_Earliest {
		initial = ledger.InitialEarliest
	}
	var start *ledger.Position
	if id := cs.GetStartMessageId(); id != nil && !cs.GetDurable() {
		p := startPosition(id)
		start = &p
	}
	// A reader's cursor starts at its start entry inclusive: the client
	// drops the start message itself unless it asked for it (Pulsar's
	// brokers position readers one entry early for the same reason).
	// A reader starting at an entry gets that entry too (inclusive);
	// starting at latest it gets only what comes next.
	inclusive := start != nil && *start != ledger.Latest && *start != ledger.Earliest
	if err := t.admitSubscribe(c.nc.RemoteAddr(), cs.GetConsumerName(), consID); err != nil {
		c.sendError(reqID, err)
		return
	}
	sub, err := t.subscription(ctx, cs.GetSubscription(), cs.GetDurable(), initial, start, inclusive, cs.GetSubType())
	if err != nil {
		c.sendError(reqID, err)
		return
	}
	if cs.GetReplicateSubscriptionState() && t.ml != nil {
		sub.markReplicated()
	}
	cons := &Consumer{
		sub: sub, conn: c, id: consID, name: cs.GetConsumerName(), priority: cs.GetPriorityLevel(),
		metadata: kvMap(cs.GetMetadata()), readCompacted: cs.GetReadCompacted(),
	}
	if ks := cs.GetKeySharedMeta(); ks != nil {
		if ks.GetKeySharedMode() == pb.KeySharedMode_STICKY {
			cons.sticky = ks.GetHashRanges()
		}
		cons.outOfOrder = ks.GetAllowOutOfOrderDelivery()
	}
	// As in Pulsar, the subscription exists before the consumer is
	// counted (a refused consumer leaves it).
	if err := t.checkMaxConsumers(); err != nil {
		c.sendError(reqID, err)
		return
	}
	if err := sub.addConsumer(cons, cs.GetSubType()); err != nil {
		c.sendError(reqID, err)
		return
	}
	c.consumers[consID] = cons
	c.send(protocol.NewSuccess(reqID))
	sub.announceActive()
}

func (c *conn) handleFlow(f *pb.CommandFlow) {
	cons, ok := c.consumer(f.GetConsumerId())
	if !ok {
		return
	}
	s := cons.sub
	s.mu.Lock()
	cons.permits += int(f.GetMessagePermits())
	cons.lastFlow = time.Now().UnixMilli()
	s.firstFlowLocked(cons)
	s.mu.Unlock()
	s.wake()
}

func (c *conn) handleAck(a *pb.CommandAck) {
	cons, ok := c.consumers[a.GetConsumerId()]
	var err error
	if !ok {
		err = protocol.ErrConsumerNotFound.WithMessage("consumer not found")
	} else if cons.sub.cursor != nil {
		err = cons.sub.ack(cons, a)
	}
	if a.RequestId != nil {
		c.send(protocol.NewAckResponse(a.GetConsumerId(), a.GetRequestId(), a.GetTxnidMostBits(), a.GetTxnidLeastBits(), err))
	}
}

// ack applies an ACK to the cursor and the consumers' pending sets. When
// that releases a Key_Shared hash whose entries wait, the dispatcher runs.
func (s *Subscription) ack(cons *Consumer, a *pb.CommandAck) error {
	var firstErr error
	wake := false
	defer func() {
		if wake {
			s.wake()
		}
	}()
	if s.durable {
		defer s.topic.usage.requestOut(s.name) // counted off this goroutine: the entries may be on the bookies
	}
	for _, id := range a.GetMessageId() {
		pos := posOf(id)
		var err error
		partial := hasUnacked(id.GetAckSet())
		switch {
		case a.GetAckType() == pb.CommandAck_Cumulative:
			if s.subType == pb.CommandSubscribe_Shared || s.subType == pb.CommandSubscribe_Key_Shared {
				err = protocol.ErrNotAllowed.WithMessage("cumulative ack is not allowed on Shared subscriptions")
				break
			}
			if partial {
				n := s.batchSize(pos, id)
				err = s.cursor.AckBatchIndexes(pos, n, ackedIndexes(id.GetAckSet(), n))
				// Everything before the batch is acknowledged too. Entries of
				// earlier ledgers are covered once the batch completes.
				if pos.EntryID > 0 && err == nil {
					err = s.cursor.AckCumulative(ledger.Position{LedgerID: pos.LedgerID, EntryID: pos.EntryID - 1})
				}
			} else {
				err = s.cursor.AckCumulative(pos)
			}
			s.mu.Lock()
			for _, c := range s.consumers {
				for p := range c.pending {
					if p.Compare(pos) < 0 || (p == pos && !partial) {
						_, _, unblocked := s.forgetPendingLocked(c, p)
						wake = wake || unblocked
					}
				}
			}
			s.mu.Unlock()
		case partial:
			n := s.batchSize(pos, id)
			err = s.cursor.AckBatchIndexes(pos, n, ackedIndexes(id.GetAckSet(), n))
		default:
			err = s.cursor.Ack(pos)
			s.mu.Lock()
			_, _, unblocked := s.forgetPendingLocked(s.pendingOwnerLocked(cons, pos), pos)
			wake = wake || unblocked
			delete(s.redeliveries, pos)
			s.mu.Unlock()
		}
		if err != nil && firstErr == nil && !errors.Is(err, ledger.ErrInvalidPosition) {
			firstErr = s.ackError(pos, err)
		}
	}
	return firstErr
}

// ackError is what the client is told when its acknowledgement of pos
// was not applied: which acknowledgement and why, rather than a bare
// internal error.
func (s *Subscription) ackError(pos ledger.Position, err error) error {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return err
	}
	what := fmt.Sprintf("acknowledgement of %d:%d on subscription %s of %s not applied: ", pos.LedgerID, pos.EntryID, s.name, s.topic.name)
	switch {
	case errors.Is(err, ledger.ErrClosed), errors.Is(err, ledger.ErrFenced):
		return protocol.ErrServiceNotReady.WithMessage(what + "the subscription is closed (its topic is closing or moving to another broker); the message may be delivered again")
	case errors.Is(err, ledger.ErrInvalidArgument):
		return protocol.ErrNotAllowed.WithMessage(what + err.Error())
	}
	return protocol.ErrUnknown.WithMessage(what + err.Error())
}

// batchSize returns the number of messages in the batch entry at pos: from
// the ack's message id when the client sent it, else from what the cursor
// already knows, else from the entry's metadata.
func (s *Subscription) batchSize(pos ledger.Position, id *pb.MessageIdData) int {
	if n := int(id.GetBatchSize()); n > 0 {
		return n
	}
	if _, n, ok := s.cursor.BatchAckSet(pos); ok && n > 0 {
		return n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if es, err := s.topic.ml.Read(ctx, pos, 1, 0); err == nil && len(es) == 1 && es[0].Pos == pos {
		return parseEntryInfo(es[0].Data).numMessages
	}
	return len(id.GetAckSet()) * 64
}

// hasUnacked reports whether an ack_set still has unacknowledged (1) bits.
func hasUnacked(ackSet []int64) bool {
	for _, w := range ackSet {
		if w != 0 {
			return true
		}
	}
	return false
}

// ackedIndexes lists the batch indexes an ack_set marks acknowledged (0 bits).
func ackedIndexes(ackSet []int64, size int) []int {
	var out []int
	for i := 0; i < size; i++ {
		w, b := i/64, uint(i%64)
		if w >= len(ackSet) || ackSet[w]&(1<<b) == 0 {
			out = append(out, i)
		}
	}
	return out
}

func (c *conn) handleRedeliver(r *pb.CommandRedeliverUnacknowledgedMessages) {
	cons, ok := c.consumers[r.GetConsumerId()]
	if !ok {
		return
	}
	s := cons.sub
	s.mu.Lock()
	ids := r.GetMessageIds()
	if len(ids) > 0 && (s.subType == pb.CommandSubscribe_Shared || s.subType == pb.CommandSubscribe_Key_Shared) {
		for _, id := range ids {
			s.redeliverPendingLocked(cons, posOf(id))
		}
	} else {
		// Exclusive and Failover redeliver everything unacknowledged.
		for pos := range cons.pending {
			s.redeliverPendingLocked(cons, pos)
		}
	}
	s.mu.Unlock()
	s.wake()
}

func (c *conn) handleCloseConsumer(cc *pb.CommandCloseConsumer) {
	if cons, ok := c.consumers[cc.GetConsumerId()]; ok {
		delete(c.consumers, cc.GetConsumerId())
		cons.sub.removeConsumer(cons)
	}
	c.send(protocol.NewSuccess(cc.GetRequestId()))
}

func (c *conn) handleUnsubscribe(u *pb.CommandUnsubscribe) {
	reqID := u.GetRequestId()
	cons, ok := c.consumers[u.GetConsumerId()]
	if !ok {
		c.sendError(reqID, protocol.ErrConsumerNotFound.WithMessage("consumer not found"))
		return
	}
	s := cons.sub
	s.mu.Lock()
	others := len(s.consumers) > 1
	s.mu.Unlock()
	if others && !u.GetForce() {
		c.sendError(reqID, protocol.ErrConsumerBusy.WithMessage("Subscription has other connected consumers"))
		return
	}
	ctx, cancel := c.ctx()
	defer cancel()
	delete(c.consumers, u.GetConsumerId())
	s.mu.Lock()
	rest := slices.Clone(s.consumers)
	s.mu.Unlock()
	for _, o := range rest {
		if o != cons {
			o.closeByBroker()
		}
	}
	if err := s.topic.removeSubscription(ctx, s); err != nil {
		c.sendError(reqID, err)
		return
	}
	c.send(protocol.NewSuccess(reqID))
}

func (c *conn) handleSeek(sk *pb.CommandSeek) {
	reqID := sk.GetRequestId()
	cons, ok := c.consumers[sk.GetConsumerId()]
	if !ok {
		c.sendError(reqID, protocol.ErrConsumerNotFound.WithMessage("consumer not found"))
		return
	}
	s := cons.sub
	if s.cursor == nil {
		c.sendError(reqID, protocol.ErrNotAllowed.WithMessage("seek is not supported on non-persistent topics"))
		return
	}
	ctx, cancel := c.ctx()
	defer cancel()
	var target ledger.Position
	switch {
	case sk.GetMessageId() != nil:
		target = startPosition(sk.GetMessageId())
	case sk.MessagePublishTime != nil:
		ts := sk.GetMessagePublishTime()
		p, err := s.topic.ml.Search(ctx, func(e ledger.Entry) bool {
			meta, _, err := protocol.ParseHeadersAndPayload(e.Data)
			return err == nil && meta.GetPublishTime() >= ts
		})
		if err != nil {
			target = ledger.Latest
		} else {
			target = p
		}
	default:
		c.sendError(reqID, protocol.ErrNotAllowed.WithMessage("seek needs a message id or a publish time"))
		return
	}
	// As Pulsar's PersistentSubscription.resetCursor: the consumers are
	// disconnected before the reset and the SUCCESS comes last. Clients
	// take the CLOSE_CONSUMER as the cue to re-subscribe from the seek
	// position; libpulsar (C++, Python) does so only while the seek is
	// still pending, and would otherwise reconnect from where it was.
	detached, err := s.seekAndDetach(target)
	for _, o := range detached {
		if o.conn == c {
			delete(c.consumers, o.id)
		}
		o.closeByBroker()
	}
	if err != nil {
		c.sendError(reqID, err)
		return
	}
	c.send(protocol.NewSuccess(reqID))
}

// seekAndDetach detaches every consumer (without redelivering what they
// had pending: it is moot after a seek) and resets the cursor so target
// is the next entry delivered, forgetting what was dispatched. Both happen
// under the subscription's lock, so no consumer re-subscribing meanwhile
// sees the old position. The detached consumers are returned to be told
// to reconnect; they are detached even when the reset fails.
func (s *Subscription) seekAndDetach(target ledger.Position) ([]*Consumer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	detached := s.consumers
	s.consumers = nil
	for _, c := range detached {
		s.splitRemoveLocked(c)
		s.forgetAllPendingLocked(c)
	}
	return detached, s.seekLocked(target)
}

// seek resets the cursor so target is the next entry delivered and forgets
// what was dispatched.
func (s *Subscription) seek(target ledger.Position) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seekLocked(target)
}

func (s *Subscription) seekLocked(target ledger.Position) error {
	if err := s.cursor.ResetCursor(target); err != nil {
		return err
	}
	s.compactedEarliest = target == ledger.Earliest || target.LedgerID < 0
	s.seekGen++
	s.replay = nil
	clear(s.replayHashes)
	s.delayed = nil
	clear(s.redeliveries)
	for _, c := range s.consumers {
		clear(c.pending)
		c.unacked, c.blocked = 0, false
	}
	s.unacked, s.blocked = 0, false
	s.held.reset()
	return nil
}

// removeConsumerQuiet detaches c without redelivering its pending entries
// (after a seek they are moot).
func (s *Subscription) removeConsumerQuiet(c *Consumer) {
	s.mu.Lock()
	if i := slices.Index(s.consumers, c); i >= 0 {
		s.consumers = slices.Delete(s.consumers, i, i+1)
		s.splitRemoveLocked(c)
		s.forgetAllPendingLocked(c)
	}
	s.mu.Unlock()
}

func (c *conn) handleGetLastMessageID(g *pb.CommandGetLastMessageId) {
	reqID := g.GetRequestId()
	cons, ok := c.consumers[g.GetConsumerId()]
	if !ok {
		c.sendError(reqID, protocol.ErrConsumerNotFound.WithMessage("consumer not found"))
		return
	}
	resp := &pb.CommandGetLastMessageIdResponse{RequestId: proto.Uint64(reqID)}
	t := cons.sub.topic
	if t.ml == nil {
		resp.LastMessageId = &pb.MessageIdData{LedgerId: proto.Uint64(math.MaxUint64), EntryId: proto.Uint64(math.MaxUint64)}
	} else {
		last := t.ml.LastConfirmed()
		id := &pb.MessageIdData{LedgerId: proto.Uint64(uint64(last.LedgerID)), EntryId: proto.Uint64(uint64(last.EntryID))}
		if last.EntryID >= 0 {
			ctx, cancel := c.ctx()
			es, err := t.ml.Read(ctx, last, 1, 0)
			cancel()
			if err == nil && len(es) == 1 {
				if meta, _, err := protocol.ParseHeadersAndPayload(es[0].Data); err == nil && protocol.IsBatch(meta) {
					id.BatchIndex = proto.Int32(int32(protocol.NumMessages(meta) - 1))
					id.BatchSize = proto.Int32(int32(protocol.NumMessages(meta)))
				}
			}
		}
		s := cons.sub
		s.mu.Lock()
		rc := s.readCompacted
		s.mu.Unlock()
		if rc {
			ctx, cancel := c.ctx()
			if cid, ok := t.lastCompactedMessage(ctx); ok {
				id = cid
			}
			cancel()
		}
		resp.LastMessageId = id
		md := cons.sub.cursor.MarkDeletePosition()
		resp.ConsumerMarkDeletePosition = &pb.MessageIdData{LedgerId: proto.Uint64(uint64(md.LedgerID)), EntryId: proto.Uint64(uint64(md.EntryID))}
	}
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_LAST_MESSAGE_ID_RESPONSE.Enum(), GetLastMessageIdResponse: resp})
}

// partitionsForClient answers PARTITIONED_METADATA: the partition count of
// a partitioned topic, 0 for a non-partitioned one. An unknown topic is
// created partitioned when the namespace's auto-creation says so.
// errTransactionsDisabled answers lookups of the transaction coordinator's
// topic.
var errTransactionsDisabled = protocol.ErrNotAllowed.WithMessage("Transactions are not enabled")

func (s *Service) partitionsForClient(ctx context.Context, topic string) (int, error) {
	tn, err := ParseTopicName(topic)
	if err != nil {
		return 0, protocol.ErrInvalidTopicName.WithMessage(err.Error())
	}
	if tn.Tenant == "pulsar" && tn.Namespace == "system" && tn.Local == "transaction_coordinator_assign" {
		// Transactions are not implemented: answer as a Pulsar broker with
		// the coordinator disabled does (clients show the message).
		return 0, errTransactionsDisabled
	}
	pol, err := s.namespacePolicies(ctx, tn)
	if err != nil {
		return 0, err
	}
	if tn.PartitionIndex() >= 0 {
		return 0, nil // a partition is itself a non-partitioned topic
	}
	n, err := s.res.Partitions(ctx, tn)
	if err != nil || n > 0 {
		return n, err
	}
	allowed, parts := s.autoCreate(pol, tn)
	if !allowed || parts == 0 {
		return 0, nil
	}
	if tn.Domain == Persistent {
		if exists, err := s.mlf.Exists(ctx, tn.ledgerName()); err != nil || exists {
			return 0, err
		}
		snap, err := s.namespaceSnapshot(ctx, tn)
		if err != nil {
			return 0, err
		}
		if room, err := s.topicsRoom(ctx, snap, tn, parts); err != nil || !room {
			if err == nil {
				err = errTooManyTopics
			}
			return 0, err
		}
	}
	if err := s.res.CreatePartitioned(ctx, tn, parts, nil); err != nil && !errors.Is(err, ErrAlreadyExists) {
		return 0, err
	}
	return s.res.Partitions(ctx, tn)
}

// topicsOfNamespace lists a namespace's topics for GET_TOPICS_OF_NAMESPACE:
// persistent topics from the managed ledgers and partitioned metadata,
// non-persistent ones from the topics open on this broker.
func (s *Service) topicsOfNamespace(ctx context.Context, ns string, mode pb.CommandGetTopicsOfNamespace_Mode) ([]string, error) {
	tenant, name, ok := cutNamespace(ns)
	if !ok {
		return nil, protocol.ErrNotAllowed.WithMessage("invalid namespace " + ns)
	}
	if _, _, err := s.res.GetNamespace(ctx, tenant, name); err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, nil // a namespace that does not exist has no topics
		}
		return nil, err
	}
	var out []string
	seen := map[string]bool{}
	add := func(t string) {
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	if mode != pb.CommandGetTopicsOfNamespace_NON_PERSISTENT {
		names, err := s.mlf.List(ctx, tenant+"/"+name+"/persistent/")
		if err != nil {
			return nil, err
		}
		prefix := tenant + "/" + name + "/persistent/"
		for _, n := range names {
			if local, ok := strings.CutPrefix(n, prefix); ok {
				add("persistent://" + tenant + "/" + name + "/" + local)
			}
		}
		parts, err := s.res.PartitionedTopics(ctx, tenant, name, Persistent)
		if err != nil {
			return nil, err
		}
		for _, p := range parts {
			n, _ := s.res.Partitions(ctx, p)
			for i := 0; i < n; i++ {
				add(p.Partition(i).String())
			}
		}
	}
	if mode != pb.CommandGetTopicsOfNamespace_PERSISTENT {
		for _, t := range s.openTopics() {
			if t.name.Domain == NonPersistent && t.name.Tenant == tenant && t.name.Namespace == name {
				add(t.name.String())
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

func cutNamespace(ns string) (tenant, name string, ok bool) {
	for i := 0; i < len(ns); i++ {
		if ns[i] == '/' {
			return ns[:i], ns[i+1:], i > 0 && i < len(ns)-1
		}
	}
	return "", "", false
}
