package pulsaradmin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/magnetar-dev/magnetar/api/pulsarwire"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
)

// Topics lists a namespace's topics of one domain (persistent or
// non-persistent) by their full names, the partitions of partitioned
// topics included ("...-partition-N") once they exist.
func (c *Client) Topics(ctx context.Context, tenant, ns string, persistent bool) ([]string, error) {
	var out []string
	err := c.do(ctx, http.MethodGet, path(TopicName{Persistent: persistent}.domain(), tenant, ns), nil, &out)
	return out, err
}

// PartitionedTopics lists a namespace's partitioned topics of one domain
// by their full names.
func (c *Client) PartitionedTopics(ctx context.Context, tenant, ns string, persistent bool) ([]string, error) {
	var out []string
	err := c.do(ctx, http.MethodGet, path(TopicName{Persistent: persistent}.domain(), tenant, ns, "partitioned"), nil, &out)
	return out, err
}

// TopicStats is the part of Pulsar's TopicStats (and of the aggregate
// PartitionedTopicStats) that callers read; Raw holds the whole answer.
type TopicStats struct {
	MsgRateIn        float64                      `json:"msgRateIn"`
	MsgRateOut       float64                      `json:"msgRateOut"`
	MsgThroughputIn  float64                      `json:"msgThroughputIn"`
	MsgThroughputOut float64                      `json:"msgThroughputOut"`
	MsgInCounter     int64                        `json:"msgInCounter"`
	BytesInCounter   int64                        `json:"bytesInCounter"`
	MsgOutCounter    int64                        `json:"msgOutCounter"`
	BytesOutCounter  int64                        `json:"bytesOutCounter"`
	StorageSize      int64                        `json:"storageSize"`
	BacklogSize      int64                        `json:"backlogSize"`
	Publishers       []json.RawMessage            `json:"publishers"`
	Subscriptions    map[string]SubscriptionStats `json:"subscriptions"`
	// Metadata.Partitions is set for a partitioned topic's stats.
	Metadata struct {
		Partitions int `json:"partitions"`
	} `json:"metadata"`
	Raw json.RawMessage `json:"-"`
}

// SubscriptionStats is the part of Pulsar's SubscriptionStats callers read.
type SubscriptionStats struct {
	Type            string            `json:"type"`
	MsgBacklog      int64             `json:"msgBacklog"`
	UnackedMessages int64             `json:"unackedMessages"`
	MsgOutCounter   int64             `json:"msgOutCounter"`
	MsgRateOut      float64           `json:"msgRateOut"`
	Consumers       []json.RawMessage `json:"consumers"`
}

// Stats reads a topic's stats: GET .../stats for a non-partitioned topic
// or a partition, GET .../partitioned-stats (summed over the partitions)
// for a partitioned topic.
func (c *Client) Stats(ctx context.Context, t TopicName) (*TopicStats, error) {
	n, err := c.Partitions(ctx, t)
	if err != nil {
		return nil, err
	}
	op := "stats"
	if n > 0 {
		op = "partitioned-stats"
	}
	_, raw, err := c.send(ctx, http.MethodGet, t.path(op), nil)
	if err != nil {
		return nil, err
	}
	st := &TopicStats{Raw: raw}
	if err := json.Unmarshal(raw, st); err != nil {
		return nil, fmt.Errorf("pulsaradmin: stats of %s: %w", t, err)
	}
	return st, nil
}

// Message is a message read through the admin API (peek, examine), with
// the metadata Pulsar sends in X-Pulsar-* headers.
type Message struct {
	// ID is "ledger:entry:partition", partition -1 for a non-partitioned
	// topic, as Pulsar's Java client prints message ids; messages of a
	// batch add ":index" (Split).
	ID           string
	PublishTime  time.Time
	EventTime    time.Time
	ProducerName string
	SequenceID   uint64
	Key          string
	Properties   map[string]string
	// BatchSize is the number of messages in a batch entry (Payload is the
	// raw batch until Split), 0 for a single message.
	BatchSize int
	Payload   []byte
}

// PeekMessages reads up to n messages of a subscription's backlog from its
// first unacknowledged one, without acknowledging anything (GET
// .../subscription/{sub}/position/{i} for i from 1). A batch counts as one
// position. It stops early at the end of the backlog.
func (c *Client) PeekMessages(ctx context.Context, t TopicName, sub string, n int) ([]Message, error) {
	return c.messages(ctx, n, func(i int) string { return t.path("subscription", sub, "position", strconv.Itoa(i)) })
}

// ExamineMessages reads up to n messages of a topic from its first
// (earliest) or last (latest, then going back) message, whatever the
// subscriptions (GET .../examinemessage?initialPosition=...&messagePosition=i).
func (c *Client) ExamineMessages(ctx context.Context, t TopicName, earliest bool, n int) ([]Message, error) {
	from := "latest"
	if earliest {
		from = "earliest"
	}
	return c.messages(ctx, n, func(i int) string {
		return t.path("examinemessage") + "?" + url.Values{"initialPosition": {from}, "messagePosition": {strconv.Itoa(i)}}.Encode()
	})
}

// messages GETs the messages at positions 1 to n, path(i) naming each,
// until the first position past the end.
func (c *Client) messages(ctx context.Context, n int, path func(i int) string) ([]Message, error) {
	var out []Message
	for i := 1; i <= n; i++ {
		m, err := c.message(ctx, path(i))
		if isEnd(err) {
			break
		}
		if err != nil {
			return out, err
		}
		out = append(out, m)
	}
	return out, nil
}

// isEnd says there is no message at that position: the backlog or the
// topic ends before it (404 "Message not found", as Pulsar; a missing topic
// is 404 with another reason).
func isEnd(err error) bool {
	e, ok := err.(*Error)
	return ok && e.Status == http.StatusNotFound && strings.Contains(strings.ToLower(e.Reason), "message not found")
}

// message GETs one message and reads its headers.
func (c *Client) message(ctx context.Context, p string) (Message, error) {
	h, body, err := c.send(ctx, http.MethodGet, p, nil)
	if err != nil {
		return Message{}, err
	}
	id := h.Get("X-Pulsar-Message-ID")
	if strings.Count(id, ":") == 1 {
		id += ":-1"
	}
	m := Message{ID: id, ProducerName: h.Get("X-Pulsar-Producer-Name"),
		Key: h.Get("X-Pulsar-Partition-Key"), Payload: body}
	m.PublishTime, _ = time.Parse(time.RFC3339Nano, h.Get("X-Pulsar-Publish-Time"))
	m.EventTime, _ = time.Parse(time.RFC3339Nano, h.Get("X-Pulsar-Event-Time"))
	m.SequenceID, _ = strconv.ParseUint(h.Get("X-Pulsar-Sequence-Id"), 10, 64)
	if v := h.Get("X-Pulsar-Num-Batch-Message"); v != "" {
		m.BatchSize, _ = strconv.Atoi(v)
	}
	// Pulsar's admin sends every property in one JSON header (which the
	// server does not canonicalize).
	for k, vs := range h {
		if strings.EqualFold(k, "X-Pulsar-PROPERTY") && len(vs) > 0 {
			if err := json.Unmarshal([]byte(vs[0]), &m.Properties); err != nil {
				return m, fmt.Errorf("pulsaradmin: GET %s: properties header %q: %w", p, vs[0], err)
			}
		}
	}
	return m, nil
}

// Split returns the messages of a batch entry, each with the batch's
// metadata, its own key, properties and event time, and ID ":index"
// appended; a single message is returned as it is. A batch whose payload
// is compressed (the admin API returns payloads as stored) cannot be split
// and is returned whole with the error.
func (m Message) Split() ([]Message, error) {
	if m.BatchSize == 0 {
		return []Message{m}, nil
	}
	parts, err := protocol.ParseBatch(&pulsarwire.MessageMetadata{NumMessagesInBatch: ptr(int32(m.BatchSize))}, m.Payload)
	if err != nil {
		return []Message{m}, fmt.Errorf("pulsaradmin: batch %s: %w", m.ID, err)
	}
	out := make([]Message, len(parts))
	for i, p := range parts {
		one := m
		one.ID = m.ID + ":" + strconv.Itoa(i)
		one.BatchSize = 0
		one.Payload = p.Payload
		one.Key = p.Meta.GetPartitionKey()
		one.Properties = nil
		if p.Meta.EventTime != nil {
			one.EventTime = time.UnixMilli(int64(p.Meta.GetEventTime())).UTC()
		}
		if len(p.Meta.GetProperties()) > 0 {
			one.Properties = make(map[string]string, len(p.Meta.GetProperties()))
			for _, kv := range p.Meta.GetProperties() {
				one.Properties[kv.GetKey()] = kv.GetValue()
			}
		}
		if p.Meta.SequenceId != nil {
			one.SequenceID = p.Meta.GetSequenceId()
		}
		out[i] = one
	}
	return out, nil
}
