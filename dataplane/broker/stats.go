package broker

// Topic statistics in the JSON shapes of Pulsar's admin API (TopicStats,
// PersistentTopicInternalStats). Rates are not measured yet and are zero.

import (
	"context"
	"maps"
	"sort"
	"strconv"

	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
)

// PublisherStats describes one producer.
type PublisherStats struct {
	AccessMode              string            `json:"accessMode"`
	ProducerID              int64             `json:"producerId"`
	MsgRateIn               float64           `json:"msgRateIn"`
	MsgThroughputIn         float64           `json:"msgThroughputIn"`
	AverageMsgSize          float64           `json:"averageMsgSize"`
	ChunkedMessageRate      float64           `json:"chunkedMessageRate"`
	SupportsPartialProducer bool              `json:"supportsPartialProducer"`
	ProducerName            string            `json:"producerName"`
	Address                 string            `json:"address"`
	ConnectedSince          string            `json:"connectedSince"`
	ClientVersion           string            `json:"clientVersion"`
	Metadata                map[string]string `json:"metadata"`
}

// ConsumerStats describes one consumer.
type ConsumerStats struct {
	BlockedConsumerOnUnackedMsgs bool              `json:"blockedConsumerOnUnackedMsgs"`
	AvailablePermits             int               `json:"availablePermits"`
	UnackedMessages              int               `json:"unackedMessages"`
	MsgRateOut                   float64           `json:"msgRateOut"`
	MsgThroughputOut             float64           `json:"msgThroughputOut"`
	MsgRateRedeliver             float64           `json:"msgRateRedeliver"`
	ConsumerName                 string            `json:"consumerName"`
	BytesOutCounter              int64             `json:"bytesOutCounter"`
	MsgOutCounter                int64             `json:"msgOutCounter"`
	MessageAckRate               float64           `json:"messageAckRate"`
	ChunkedMessageRate           float64           `json:"chunkedMessageRate"`
	AvgMessagesPerEntry          int               `json:"avgMessagesPerEntry"`
	Address                      string            `json:"address"`
	ConnectedSince               string            `json:"connectedSince"`
	ClientVersion                string            `json:"clientVersion"`
	LastAckedTimestamp           int64             `json:"lastAckedTimestamp"`
	LastConsumedTimestamp        int64             `json:"lastConsumedTimestamp"`
	LastConsumedFlowTimestamp    int64             `json:"lastConsumedFlowTimestamp"`
	Metadata                     map[string]string `json:"metadata"`
}

// SubscriptionStats describes one subscription.
type SubscriptionStats struct {
	MsgRateOut                       float64           `json:"msgRateOut"`
	MsgThroughputOut                 float64           `json:"msgThroughputOut"`
	MsgRateRedeliver                 float64           `json:"msgRateRedeliver"`
	MsgRateExpired                   float64           `json:"msgRateExpired"`
	MsgBacklog                       int64             `json:"msgBacklog"`
	MsgBacklogNoDelayed              int64             `json:"msgBacklogNoDelayed"`
	MsgDelayed                       int64             `json:"msgDelayed"`
	UnackedMessages                  int64             `json:"unackedMessages"`
	Type                             string            `json:"type"`
	ActiveConsumerName               string            `json:"activeConsumerName,omitempty"`
	BytesOutCounter                  int64             `json:"bytesOutCounter"`
	MsgOutCounter                    int64             `json:"msgOutCounter"`
	MessageAckRate                   float64           `json:"messageAckRate"`
	ChunkedMessageRate               float64           `json:"chunkedMessageRate"`
	BacklogSize                      int64             `json:"backlogSize"`
	EarliestMsgPublishTimeInBacklog  int64             `json:"earliestMsgPublishTimeInBacklog"`
	TotalMsgExpired                  int64             `json:"totalMsgExpired"`
	LastExpireTimestamp              int64             `json:"lastExpireTimestamp"`
	LastMarkDeleteAdvancedTimestamp  int64             `json:"lastMarkDeleteAdvancedTimestamp"`
	LastConsumedFlowTimestamp        int64             `json:"lastConsumedFlowTimestamp"`
	LastConsumedTimestamp            int64             `json:"lastConsumedTimestamp"`
	LastAckedTimestamp               int64             `json:"lastAckedTimestamp"`
	Consumers                        []ConsumerStats   `json:"consumers"`
	IsDurable                        bool              `json:"isDurable"`
	IsReplicated                     bool              `json:"isReplicated"`
	AllowOutOfOrderDelivery          bool              `json:"allowOutOfOrderDelivery"`
	ConsumersAfterMarkDeletePosition map[string]string `json:"consumersAfterMarkDeletePosition"`
	NonContiguousDeletedRanges       int               `json:"nonContiguousDeletedMessagesRanges"`
	NonContiguousDeletedRangesSize   int               `json:"nonContiguousDeletedMessagesRangesSerializedSize"`
	DelayedMessageIndexSizeInBytes   int64             `json:"delayedMessageIndexSizeInBytes"`
	SubscriptionProperties           map[string]string `json:"subscriptionProperties"`
	BlockedOnUnackedMsgs             bool              `json:"blockedSubscriptionOnUnackedMsgs"`
}

// TopicStats is a topic's (or partition's) statistics.
type TopicStats struct {
	MsgRateIn              float64                      `json:"msgRateIn"`
	MsgThroughputIn        float64                      `json:"msgThroughputIn"`
	MsgRateOut             float64                      `json:"msgRateOut"`
	MsgThroughputOut       float64                      `json:"msgThroughputOut"`
	MsgInCounter           int64                        `json:"msgInCounter"`
	BytesInCounter         int64                        `json:"bytesInCounter"`
	MsgOutCounter          int64                        `json:"msgOutCounter"`
	BytesOutCounter        int64                        `json:"bytesOutCounter"`
	AverageMsgSize         float64                      `json:"averageMsgSize"`
	StorageSize            int64                        `json:"storageSize"`
	BacklogSize            int64                        `json:"backlogSize"`
	Publishers             []PublisherStats             `json:"publishers"`
	Subscriptions          map[string]SubscriptionStats `json:"subscriptions"`
	Replication            map[string]ReplicatorStats   `json:"replication"`
	DeduplicationStatus    string                       `json:"deduplicationStatus"`
	TopicCreationTimeStamp int64                        `json:"topicCreationTimeStamp"`
	LastPublishTimestamp   int64                        `json:"lastPublishTimestamp"`
	// Tiered storage (offload.go).
	OffloadedStorageSize        int64 `json:"offloadedStorageSize"`
	LastOffloadLedgerID         int64 `json:"lastOffloadLedgerId"`
	LastOffloadSuccessTimeStamp int64 `json:"lastOffloadSuccessTimeStamp"`
	LastOffloadFailureTimeStamp int64 `json:"lastOffloadFailureTimeStamp"`
	// Compaction is the last compaction's outcome (compaction.go).
	Compaction CompactionStats `json:"compaction"`
	// Migrated is set while the topic is fenced for a migration
	// (migration.go), its clients sent to MigratedClusterURL.
	Migrated            bool        `json:"migrated"`
	MigratedClusterURL  *ClusterURL `json:"migratedClusterUrl,omitempty"`
	MigratedClusterName string      `json:"migratedClusterName,omitempty"`
}

// StatsOptions are the stats query parameters the broker honours.
type StatsOptions struct {
	ExcludePublishers bool
	ExcludeConsumers  bool
}

func remoteAddr(c *conn) string {
	if c == nil || c.nc == nil {
		return ""
	}
	return c.nc.RemoteAddr().String()
}

// TopicStats returns the statistics of the non-partitioned topic (or
// partition) t, opening it if needed.
func (s *Service) TopicStats(ctx context.Context, t TopicName, opt StatsOptions) (*TopicStats, error) {
	var tp *Topic
	var err error
	if t.Domain == NonPersistent {
		tp = s.openedTopic(t)
		if tp == nil {
			return nil, ErrNotFound
		}
	} else if tp, err = s.persistentTopic(ctx, t); err != nil {
		return nil, err
	}
	st := &TopicStats{
		Publishers:             []PublisherStats{},
		Subscriptions:          map[string]SubscriptionStats{},
		Replication:            map[string]ReplicatorStats{},
		DeduplicationStatus:    "Disabled",
		TopicCreationTimeStamp: s.topicCreated(ctx, t, tp),
		MsgInCounter:           tp.in.msgs.Load(),
		BytesInCounter:         tp.in.bytes.Load(),
		MsgOutCounter:          tp.out.msgs.Load(),
		BytesOutCounter:        tp.out.bytes.Load(),
	}
	if tp.dedupOn.Load() && tp.dedup.Load() != nil {
		// Sequence ids are being checked (not while the state is still
		// being rebuilt after the policy was turned on).
		st.DeduplicationStatus = "Enabled"
	}
	if tp.ml != nil {
		st.StorageSize = tp.ml.TotalSize()
		st.BacklogSize = st.StorageSize
		st.LastPublishTimestamp = lastPublishTime(ctx, tp.ml)
		fillOffloadStats(st, tp.ml)
		st.Compaction = tp.compactionStats()
	}
	if r := tp.migration(); r != nil {
		st.Migrated, st.MigratedClusterName = true, r.target.cluster
		st.MigratedClusterURL = &r.target.url
	}
	tp.mu.Lock()
	producers := make([]*Producer, 0, len(tp.producers))
	for _, p := range tp.producers {
		producers = append(producers, p)
	}
	subs := make([]*Subscription, 0, len(tp.subs))
	for _, sub := range tp.subs {
		subs = append(subs, sub)
	}
	tp.mu.Unlock()
	if !opt.ExcludePublishers {
		sort.Slice(producers, func(i, j int) bool { return producers[i].uid < producers[j].uid })
		for _, p := range producers {
			st.Publishers = append(st.Publishers, PublisherStats{
				AccessMode:     p.mode.String(),
				ProducerID:     int64(p.id),
				ProducerName:   p.name,
				Address:        remoteAddr(p.conn),
				ConnectedSince: p.conn.connectedSince(),
				ClientVersion:  p.conn.clientVersion,
				Metadata:       nonNil(p.metadata),
			})
		}
	}
	for _, sub := range subs {
		st.Subscriptions[sub.name] = sub.stats(opt)
	}
	tp.replicationStats(st, producers, true)
	return st, nil
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return maps.Clone(m)
}

func (sub *Subscription) stats(opt StatsOptions) SubscriptionStats {
	ss := SubscriptionStats{
		Consumers:                        []ConsumerStats{},
		IsDurable:                        sub.durable,
		IsReplicated:                     sub.replicated(),
		ConsumersAfterMarkDeletePosition: map[string]string{},
		SubscriptionProperties:           map[string]string{},
		MsgOutCounter:                    sub.out.msgs.Load(),
		BytesOutCounter:                  sub.out.bytes.Load(),
	}
	if sub.cursor != nil {
		ss.MsgBacklog = sub.cursor.Backlog()
		ss.MsgBacklogNoDelayed = ss.MsgBacklog
	}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	ss.Type = "Exclusive"
	if sub.subType >= 0 {
		ss.Type = sub.subType.String()
	}
	ss.MsgDelayed = int64(len(sub.delayed))
	if a := sub.activeConsumerLocked(); a != nil {
		ss.ActiveConsumerName = a.name
	}
	for _, c := range sub.consumers {
		unacked := 0
		for _, n := range c.pending {
			unacked += n
		}
		ss.UnackedMessages += int64(unacked)
		if opt.ExcludeConsumers {
			continue
		}
		ss.Consumers = append(ss.Consumers, ConsumerStats{
			AvailablePermits:          c.permits,
			UnackedMessages:           unacked,
			ConsumerName:              c.name,
			Address:                   remoteAddr(c.conn),
			ConnectedSince:            c.conn.connectedSince(),
			ClientVersion:             c.conn.clientVersion,
			LastConsumedFlowTimestamp: c.lastFlow,
			MsgOutCounter:             c.out.msgs.Load(),
			BytesOutCounter:           c.out.bytes.Load(),
			Metadata:                  nonNil(c.metadata),
		})
	}
	return ss
}

// lastPublishTime returns the publish time of the last stored message, or
// 0 when there is none.
func lastPublishTime(ctx context.Context, ml *ledger.ManagedLedger) int64 {
	last := ml.LastConfirmed()
	if last.EntryID < 0 {
		return 0
	}
	es, err := ml.Read(ctx, last, 1, 0)
	if err != nil || len(es) == 0 {
		return 0
	}
	meta, _, err := protocol.ParseHeadersAndPayload(es[0].Data)
	if err != nil {
		return 0
	}
	return int64(meta.GetPublishTime())
}

// LedgerStats describes one ledger in the internal stats.
type LedgerStats struct {
	LedgerID        int64  `json:"ledgerId"`
	Entries         int64  `json:"entries"`
	Size            int64  `json:"size"`
	Timestamp       int64  `json:"timestamp"`
	Offloaded       bool   `json:"offloaded"`
	Metadata        string `json:"metadata,omitempty"`
	UnderReplicated bool   `json:"underReplicated"`
}

// CursorStats describes one cursor in the internal stats.
type CursorStats struct {
	MarkDeletePosition                       string           `json:"markDeletePosition"`
	ReadPosition                             string           `json:"readPosition"`
	WaitingReadOp                            bool             `json:"waitingReadOp"`
	PendingReadOps                           int              `json:"pendingReadOps"`
	MessagesConsumedCounter                  int64            `json:"messagesConsumedCounter"`
	CursorLedger                             int64            `json:"cursorLedger"`
	CursorLedgerLastEntry                    int64            `json:"cursorLedgerLastEntry"`
	IndividuallyDeletedMessages              string           `json:"individuallyDeletedMessages"`
	LastLedgerSwitchTimestamp                string           `json:"lastLedgerSwitchTimestamp"`
	State                                    string           `json:"state"`
	Active                                   bool             `json:"active"`
	NumberOfEntriesSinceFirstNotAckedMessage int64            `json:"numberOfEntriesSinceFirstNotAckedMessage"`
	TotalNonContiguousDeletedMessagesRange   int              `json:"totalNonContiguousDeletedMessagesRange"`
	Properties                               map[string]int64 `json:"properties"`
}

// InternalStats is Pulsar's PersistentTopicInternalStats.
type InternalStats struct {
	EntriesAddedCounter  int64                  `json:"entriesAddedCounter"`
	NumberOfEntries      int64                  `json:"numberOfEntries"`
	TotalSize            int64                  `json:"totalSize"`
	CurrentLedgerEntries int64                  `json:"currentLedgerEntries"`
	CurrentLedgerSize    int64                  `json:"currentLedgerSize"`
	LastConfirmedEntry   string                 `json:"lastConfirmedEntry"`
	State                string                 `json:"state"`
	WaitingCursorsCount  int                    `json:"waitingCursorsCount"`
	PendingAddEntries    int                    `json:"pendingAddEntriesCount"`
	Ledgers              []LedgerStats          `json:"ledgers"`
	Cursors              map[string]CursorStats `json:"cursors"`
	SchemaLedgers        []any                  `json:"schemaLedgers"`
	CompactedLedger      CompactedLedgerStats   `json:"compactedLedger"`
}

func posString(p ledger.Position) string {
	return strconv.FormatInt(p.LedgerID, 10) + ":" + strconv.FormatInt(p.EntryID, 10)
}

// InternalStats returns the managed-ledger view of a persistent topic.
func (s *Service) InternalStats(ctx context.Context, t TopicName) (*InternalStats, error) {
	tp, err := s.persistentTopic(ctx, t)
	if err != nil {
		return nil, err
	}
	ml := tp.ml
	st := &InternalStats{
		NumberOfEntries:    ml.NumberOfEntries(),
		TotalSize:          ml.TotalSize(),
		LastConfirmedEntry: posString(ml.LastConfirmed()),
		State:              "LedgerOpened",
		Ledgers:            []LedgerStats{},
		Cursors:            map[string]CursorStats{},
		SchemaLedgers:      []any{},
	}
	if ml.IsTerminated() {
		st.State = "Terminated"
	}
	st.EntriesAddedCounter = st.NumberOfEntries
	ls := ml.Ledgers()
	for i, l := range ls {
		st.Ledgers = append(st.Ledgers, LedgerStats{LedgerID: l.ID, Entries: l.Entries, Size: l.Size, Timestamp: l.Timestamp, Offloaded: l.Offloaded()})
		if i == len(ls)-1 {
			st.CurrentLedgerEntries, st.CurrentLedgerSize = l.Entries, l.Size
		}
	}
	st.CompactedLedger = tp.compactedLedgerStats(ctx)
	for _, c := range ml.Cursors() {
		props := map[string]int64{}
		for k, v := range c.Properties() {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				props[k] = n
			}
		}
		st.Cursors[c.Name()] = CursorStats{
			MarkDeletePosition:                       posString(c.MarkDeletePosition()),
			ReadPosition:                             posString(c.ReadPosition()),
			IndividuallyDeletedMessages:              "[]",
			State:                                    "Open",
			NumberOfEntriesSinceFirstNotAckedMessage: c.Backlog(),
			Properties:                               props,
		}
	}
	return st, nil
}
