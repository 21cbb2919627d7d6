package admin

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
)

// writeMessage answers a peek or get-message request the way Pulsar does:
// the payload as the body (for a batch, the raw batch with
// X-Pulsar-Num-Batch-Message) and the metadata in X-Pulsar-* headers.
// Compressed payloads are returned as stored.
func writeMessage(q *request, tn broker.TopicName, e ledger.Entry) error {
	meta, payload, err := protocol.ParseHeadersAndPayload(e.Data)
	if err != nil {
		return failf(http.StatusInternalServerError, "Corrupt message at %d:%d", e.Pos.LedgerID, e.Pos.EntryID)
	}
	hd := q.w.Header()
	id := strconv.FormatInt(e.Pos.LedgerID, 10) + ":" + strconv.FormatInt(e.Pos.EntryID, 10)
	if idx := tn.PartitionIndex(); idx >= 0 {
		id += ":" + strconv.Itoa(idx)
	}
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("X-Pulsar-Message-ID", id)
	hd.Set("X-Pulsar-Publish-Time", time.UnixMilli(int64(meta.GetPublishTime())).UTC().Format("2006-01-02T15:04:05.000Z"))
	if meta.GetProducerName() != "" {
		hd.Set("X-Pulsar-Producer-Name", meta.GetProducerName())
	}
	hd.Set("X-Pulsar-Sequence-Id", strconv.FormatUint(meta.GetSequenceId(), 10))
	if meta.EventTime != nil {
		hd.Set("X-Pulsar-Event-Time", time.UnixMilli(int64(meta.GetEventTime())).UTC().Format("2006-01-02T15:04:05.000Z"))
	}
	if meta.PartitionKey != nil {
		hd.Set("X-Pulsar-Partition-Key", meta.GetPartitionKey())
	}
	if len(meta.GetSchemaVersion()) == 8 {
		v := int64(0)
		for _, b := range meta.GetSchemaVersion() {
			v = v<<8 | int64(b)
		}
		hd.Set("X-Pulsar-Schema-Version", strconv.FormatInt(v, 10))
	}
	if protocol.IsBatch(meta) {
		hd.Set("X-Pulsar-Num-Batch-Message", strconv.Itoa(protocol.NumMessages(meta)))
	}
	if len(meta.GetProperties()) > 0 {
		props := make(map[string]string, len(meta.GetProperties()))
		for _, kv := range meta.GetProperties() {
			props[kv.GetKey()] = kv.GetValue()
		}
		// The Java admin client matches these names case-sensitively, so
		// they are not canonicalized: X-Pulsar-PROPERTY holds them all as
		// JSON (what 4.x reads), X-Pulsar-PROPERTY-<key> one each (what
		// earlier releases read; keys that are not header tokens are only
		// in the JSON).
		b, _ := json.Marshal(props)
		hd["X-Pulsar-PROPERTY"] = []string{string(b)}
		for k, v := range props {
			if isToken(k) {
				hd["X-Pulsar-PROPERTY-"+k] = []string{v}
			}
		}
	}
	q.w.WriteHeader(http.StatusOK)
	q.w.Write(payload)
	return nil
}

// isToken reports whether s is a non-empty HTTP token (RFC 9110 5.6.2),
// the characters a header name may hold.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
