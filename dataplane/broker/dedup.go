package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
	"github.com/magnetar-dev/magnetar/dataplane/replication"
)

// Message deduplication (Pulsar's PIP-6), enabled per namespace or per
// topic with the deduplicationEnabled policy, the topic's value over the
// namespace's (also switched on loaded topics, see policywatch.go and
// policyfollow.go). For each producer name the broker keeps the highest
// sequence id accepted for writing (pushed) and the highest written
// (persisted). A SEND carries sequence_id (its first message) and, for a
// batch, highest_sequence_id (its last); it is judged by its first id:
//
//   - first id above pushed (or no record): new; pushed becomes
//     max(first, highest).
//   - first id not above persisted: a duplicate, answered with a receipt
//     for position -1:-1 and not stored.
//   - first id above persisted but not above pushed: the earlier copy is
//     still being written and may yet fail, so the broker cannot tell;
//     it answers SEND_ERROR (PersistenceError) and the client re-sends
//     later.
//
// Every chunk of a chunked message carries the message's sequence id, so
// only the last chunk (chunk_id == num_chunks_from_msg-1) is judged and
// recorded; earlier chunks are always stored (a re-sent chunk is stored
// again and the consumer's client drops the repeated chunk id).
//
// A new producer learns persisted as its last sequence id. When a write
// fails, pushed falls back to persisted.
//
// A remote cluster's replicator (replication.go) is judged the same way,
// by the sequence id the source derives from each entry's position, and
// every one of its SENDs counts whole (chunks and batches included). A
// replicated entry is recorded, when replayed, under the replicator's name
// and the position it carries, never under its original producer's.
//
// The persisted map is snapshotted into the managed ledger's properties
// (dedup.<producer> = seq, dedup.position = last entry covered) every
// dedupSnapshotEvery entries and when the topic closes; opening a topic
// loads the snapshot and replays the entries after it.

const (
	dedupSnapshotEvery = 1000
	dedupPropPrefix    = "dedup."
	dedupPosProp       = "dedup-snapshot-position"
	// dedupCursor holds back trimming of entries not yet in a snapshot; it
	// is internal and never shown as a subscription.
	dedupCursor = "pulsar.dedup"
)

type dedupState struct {
	mu        sync.Mutex
	pushed    map[string]int64
	persisted map[string]int64
	last      ledger.Position // last entry reflected in persisted
	sinceSnap int
	cursor    *ledger.Cursor // dedupCursor
}

// loadDedup rebuilds the state of ml from its snapshot and the entries
// written after it.
func loadDedup(ctx context.Context, ml *ledger.ManagedLedger) (*dedupState, error) {
	d := &dedupState{pushed: map[string]int64{}, persisted: map[string]int64{}, last: ledger.Earliest}
	props := ml.Properties()
	for k, v := range props {
		name, ok := strings.CutPrefix(k, dedupPropPrefix)
		if !ok {
			continue
		}
		if seq, err := strconv.ParseInt(v, 10, 64); err == nil {
			d.persisted[name] = seq
		}
	}
	// A durable cursor keeps the entries after the last snapshot from being
	// trimmed, so they can be replayed.
	cur, err := ml.OpenCursor(ctx, dedupCursor, ledger.InitialEarliest)
	if err != nil {
		return nil, fmt.Errorf("dedup: cursor: %w", err)
	}
	d.cursor = cur
	from := ml.Next(cur.MarkDeletePosition())
	if p, ok := ledger.ParsePosition(props[dedupPosProp]); ok && p.Compare(cur.MarkDeletePosition()) > 0 {
		from = ml.Next(p)
		d.last = p
	}
	// Read until nothing is left; LastConfirmed may point into a fresh,
	// empty ledger, so the reads themselves decide where the end is.
	for {
		es, err := ml.Read(ctx, from, 500, 0)
		if errors.Is(err, ledger.ErrInvalidPosition) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("dedup: replay: %w", err)
		}
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			meta, _, err := protocol.ParseHeadersAndPayload(e.Data)
			if err != nil {
				continue
			}
			d.last = e.Pos
			if from := meta.GetReplicatedFrom(); from != "" {
				// Stored by a remote cluster's replicator: its record is
				// the source position, under the replicator's name.
				if seq, ok := replication.SourceSequence(meta); ok {
					name := replication.Prefix + from
					if int64(seq) > d.persisted[name] || !hasKey(d.persisted, name) {
						d.persisted[name] = int64(seq)
					}
				}
				continue
			}
			k := dedupSend{producer: meta.GetProducerName(), seq: int64(meta.GetSequenceId()),
				highest: int64(meta.GetHighestSequenceId()), chunkID: -1}
			if meta.NumChunksFromMsg != nil {
				k.chunkID, k.numChunks = meta.GetChunkId(), meta.GetNumChunksFromMsg()
			}
			if !k.judged() {
				continue
			}
			if seq := k.top(); seq > d.persisted[k.producer] || !hasKey(d.persisted, k.producer) {
				d.persisted[k.producer] = seq
			}
		}
		from = ml.Next(es[len(es)-1].Pos)
	}
	for k, v := range d.persisted {
		d.pushed[k] = v
	}
	return d, nil
}

func hasKey(m map[string]int64, k string) bool { _, ok := m[k]; return ok }

// lastSequence is the last persisted sequence id of a producer, or -1.
func (d *dedupState) lastSequence(name string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s, ok := d.persisted[name]; ok {
		return s
	}
	return -1
}

// dedupSend is what deduplication needs to know about one SEND.
type dedupSend struct {
	producer  string
	seq       int64 // sequence_id: the first message of a batch
	highest   int64 // highest_sequence_id: the last of a batch (0 if unset)
	chunkID   int32 // -1 unless the SEND is a chunk
	numChunks int32
}

// judged reports whether the SEND takes part in deduplication: every SEND
// but a chunk other than the last of its message.
func (k dedupSend) judged() bool { return k.chunkID < 0 || k.chunkID == k.numChunks-1 }

// top is the highest sequence id the SEND covers.
func (k dedupSend) top() int64 { return max(k.seq, k.highest) }

// dupStatus is the verdict on a SEND.
type dupStatus int

const (
	notDup     dupStatus = iota // store it
	dup                         // stored before: receipt -1:-1, do not store
	dupUnknown                  // an earlier copy is still being written: SEND_ERROR
)

// admit judges a SEND and, when it is new, records it as pushed.
func (d *dedupState) admit(k dedupSend) dupStatus {
	if !k.judged() {
		return notDup
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if last, ok := d.pushed[k.producer]; ok && k.seq <= last {
		if p, ok := d.persisted[k.producer]; ok && k.seq <= p {
			return dup
		}
		return dupUnknown
	}
	d.pushed[k.producer] = k.top()
	return notDup
}

// done records the outcome of an admitted write; it reports whether a
// snapshot is due.
func (d *dedupState) done(k dedupSend, pos ledger.Position, err error) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	name := k.producer
	if err != nil {
		if p, ok := d.persisted[name]; ok {
			d.pushed[name] = p
		} else {
			delete(d.pushed, name)
		}
		return false
	}
	if k.judged() {
		if seq := k.top(); seq > d.persisted[name] || !hasKey(d.persisted, name) {
			d.persisted[name] = seq
		}
	}
	if d.last.Compare(pos) < 0 {
		d.last = pos
	}
	d.sinceSnap++
	return d.sinceSnap >= dedupSnapshotEvery
}

// snapshot stores the persisted map in the managed ledger's properties.
func (d *dedupState) snapshot(ctx context.Context, ml *ledger.ManagedLedger) error {
	d.mu.Lock()
	props := make(map[string]string, len(d.persisted)+1)
	for k, v := range d.persisted {
		props[dedupPropPrefix+k] = strconv.FormatInt(v, 10)
	}
	last := d.last
	props[dedupPosProp] = fmt.Sprintf("%d:%d", last.LedgerID, last.EntryID)
	d.sinceSnap = 0
	d.mu.Unlock()
	if err := ml.SetProperties(ctx, props); err != nil {
		return err
	}
	if last.EntryID >= 0 {
		// Entries up to the snapshot are no longer needed for replay.
		return d.cursor.AckCumulative(last)
	}
	return nil
}
