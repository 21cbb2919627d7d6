package broker

// Topic compaction, as Pulsar has it: a compacted ledger per persistent
// topic holds the latest message of every key up to the compaction horizon
// (the position of the last entry compacted). Consumers and readers that
// subscribe with read_compacted read the compacted ledger up to the horizon
// and the topic itself after it (subscription.go); others read the topic.
//
// State. The compaction cursor (__compaction, a durable cursor of the
// managed ledger) stores it: its mark-delete position is the horizon, and
// its property sideLedger.compacted is the compacted ledger's id (a side
// ledger, ledger/sideledger.go), both written in one cursor update. Before
// a run writes a new compacted ledger, its id is stored as
// sideLedger.compacting; a run that finds that property (a crash of an
// earlier run) deletes that ledger first. Deleting the topic deletes both
// with the cursor. The cursor holds back trimming like any durable cursor:
// entries after the horizon are kept until a compaction covers them, which
// the compactionThreshold policy bounds.
//
// A run (Pulsar's two phases):
//
//  1. read the entries after the horizon up to the last confirmed entry at
//     the run's start (the new horizon) and note, per key, the position and
//     batch index of its latest message and whether it is a tombstone (an
//     empty payload, or null_value);
//  2. write a new compacted ledger: the previous compacted entries without
//     the messages whose key was seen in phase 1, then the entries of the
//     phase-1 range reduced to the latest, non-tombstone message of each
//     key. Messages without a key are left out, and so are markers.
//
// Then the cursor moves to the new horizon with the new ledger's id and the
// previous compacted ledger is deleted.
//
// Batches. A batch entry is kept whole, with the batch indexes still live
// recorded next to it; it is dispatched with those bits as the message's
// ack_set (bit set: deliver), which the clients honour by skipping the
// other messages. Message ids therefore stay those of the topic. Batches
// compressed by the producer are decompressed to read their keys
// (protocol.Decompress) and stored compressed as they came.
//
// A compacted ledger entry, in our own format:
//
//	byte    0      format version, 1
//	bytes   1..8   ledger id of the topic entry (big endian)
//	bytes   9..16  entry id of the topic entry
//	bytes  17..20  n, words of the live-index bitset; 0: the whole entry
//	n*8 bytes      the bitset, bit i of word i/64 set: batch index i is live
//	rest           the topic entry as stored (headers and payload)
//
// Automatic compaction: every CompactionCheckInterval each open persistent
// topic with a compactionThreshold (topic policy, else the namespace's
// compaction_threshold; 0 or unset: off) is compacted when the bytes after
// its horizon exceed the threshold (estimated from the mean entry size).

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	pb "github.com/magnetar-dev/magnetar/api/pulsarwire"
	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
	"google.golang.org/protobuf/proto"
)

const (
	compactionCursor     = "__compaction"
	propCompactedLedger  = ledger.SideLedgerProp + "compacted"
	propCompactingLedger = ledger.SideLedgerProp + "compacting"
	compactedFormat      = 1
	compactionReadBatch  = 100
	// The last successful run's figures, stored with the horizon so that
	// status and stats survive a reload of the topic (milliseconds; a
	// count of messages).
	propLastSucceed  = "compaction.lastSucceedTimestamp"
	propLastRemoved  = "compaction.lastRemovedEventCount"
	propLastDuration = "compaction.lastDurationMs"
)

// Compaction states, as Pulsar's LongRunningProcessStatus names them.
const (
	CompactionNotRun  = "NOT_RUN"
	CompactionRunning = "RUNNING"
	CompactionSuccess = "SUCCESS"
	CompactionError   = "ERROR"
)

// CompactionStatus is the state of a topic's compaction (GET .../compaction).
type CompactionStatus struct {
	State     string
	LastError string
}

// CompactionStats is the compaction block of a topic's stats.
type CompactionStats struct {
	LastCompactionRemovedEventCount   int64 `json:"lastCompactionRemovedEventCount"`
	LastCompactionSucceedTimestamp    int64 `json:"lastCompactionSucceedTimestamp"`
	LastCompactionFailedTimestamp     int64 `json:"lastCompactionFailedTimestamp"`
	LastCompactionDurationTimeInMills int64 `json:"lastCompactionDurationTimeInMills"`
}

// CompactedLedgerStats is the compactedLedger block of internal stats.
type CompactedLedgerStats struct {
	LedgerID        int64 `json:"ledgerId"`
	Entries         int64 `json:"entries"`
	Size            int64 `json:"size"`
	Offloaded       bool  `json:"offloaded"`
	UnderReplicated bool  `json:"underReplicated"`
}

// compactor is a topic's compaction state, made on first use.
type compactor struct {
	loadMu sync.Mutex // serializes loading the view; taken before mu

	mu      sync.Mutex
	state   string
	lastErr string
	stats   CompactionStats
	view    *compactedView // nil: nothing compacted
	loaded  bool           // view reflects the stored state
	cancel  context.CancelFunc
	done    chan struct{} // closed when the running compaction ends
}

// setView replaces the view; loaded false makes the next use load it from
// the compaction cursor.
func (cp *compactor) setView(v *compactedView, loaded bool) {
	cp.loadMu.Lock()
	defer cp.loadMu.Unlock()
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.view, cp.loaded = v, loaded
}

// compactedView is one compacted ledger; it never changes once built.
type compactedView struct {
	ledgerID int64
	horizon  ledger.Position
	refs     []compactedRef // by position
	size     int64
	rd       *ledger.SideReader
}

// compactedRef is one entry of a compacted ledger.
type compactedRef struct {
	pos ledger.Position
	// live is the batch indexes to deliver (bit i of word i/64); nil: all.
	live []int64
}

// compactedEntry is a compacted-ledger entry as read.
type compactedEntry struct {
	compactedRef
	data []byte
}

// search returns the index of the first entry at or after p.
func (v *compactedView) search(p ledger.Position) int {
	return sort.Search(len(v.refs), func(i int) bool { return !v.refs[i].pos.Less(p) })
}

// read returns entries i..i+n-1 (fewer at the end).
func (v *compactedView) read(ctx context.Context, i, n int) ([]compactedEntry, error) {
	if i >= len(v.refs) || n <= 0 {
		return nil, nil
	}
	last := min(i+n, len(v.refs)) - 1
	datas, err := v.rd.Read(ctx, int64(i), int64(last))
	if err != nil {
		return nil, err
	}
	out := make([]compactedEntry, 0, len(datas))
	for _, b := range datas {
		pos, live, data, err := decodeCompacted(b)
		if err != nil {
			return nil, fmt.Errorf("compacted ledger %d: %w", v.ledgerID, err)
		}
		out = append(out, compactedEntry{compactedRef{pos, live}, data})
	}
	return out, nil
}

// lookup returns the compacted entry at p, if p is one.
func (v *compactedView) lookup(ctx context.Context, p ledger.Position) (compactedEntry, bool, error) {
	i := v.search(p)
	if i >= len(v.refs) || v.refs[i].pos != p {
		return compactedEntry{}, false, nil
	}
	es, err := v.read(ctx, i, 1)
	if err != nil || len(es) == 0 {
		return compactedEntry{}, false, err
	}
	return es[0], true, nil
}

func encodeCompacted(pos ledger.Position, live []int64, data []byte) []byte {
	b := make([]byte, 21+8*len(live)+len(data))
	b[0] = compactedFormat
	binary.BigEndian.PutUint64(b[1:], uint64(pos.LedgerID))
	binary.BigEndian.PutUint64(b[9:], uint64(pos.EntryID))
	binary.BigEndian.PutUint32(b[17:], uint32(len(live)))
	for i, w := range live {
		binary.BigEndian.PutUint64(b[21+8*i:], uint64(w))
	}
	copy(b[21+8*len(live):], data)
	return b
}

func decodeCompacted(b []byte) (ledger.Position, []int64, []byte, error) {
	if len(b) < 21 || b[0] != compactedFormat {
		return ledger.Position{}, nil, nil, errors.New("bad compacted entry header")
	}
	pos := ledger.Position{LedgerID: int64(binary.BigEndian.Uint64(b[1:])), EntryID: int64(binary.BigEndian.Uint64(b[9:]))}
	n := int(binary.BigEndian.Uint32(b[17:]))
	if n > (len(b)-21)/8 {
		return ledger.Position{}, nil, nil, errors.New("bad compacted entry bitset")
	}
	var live []int64
	if n > 0 {
		live = make([]int64, n)
		for i := range live {
			live[i] = int64(binary.BigEndian.Uint64(b[21+8*i:]))
		}
	}
	return pos, live, b[21+8*n:], nil
}

func bitIsSet(bits []int64, i int) bool {
	return bits == nil || (i/64 < len(bits) && bits[i/64]&(1<<(i%64)) != 0)
}

// keyedMsg is what compaction needs of one message.
type keyedMsg struct {
	key       string
	hasKey    bool
	tombstone bool
	producer  string
	// chunk is set for a chunk of a chunked message (an entry of its own).
	chunk *chunkInfo
}

// chunkInfo is a chunk's place in its message.
type chunkInfo struct {
	uuid    string
	id, num int32
}

// entryMessages returns the messages of a topic entry. Entries that do not
// parse, and markers, have none (they are left out of the compacted view).
func entryMessages(data []byte) ([]keyedMsg, error) {
	meta, payload, err := protocol.ParseHeadersAndPayload(data)
	if err != nil || meta.MarkerType != nil {
		return nil, nil
	}
	if !protocol.IsBatch(meta) {
		m := keyedMsg{key: meta.GetPartitionKey(), hasKey: meta.PartitionKey != nil && !meta.GetNullPartitionKey(),
			producer: meta.GetProducerName()}
		if meta.GetNumChunksFromMsg() > 1 {
			m.chunk = &chunkInfo{uuid: meta.GetUuid(), id: meta.GetChunkId(), num: meta.GetNumChunksFromMsg()}
		}
		if meta.GetCompression() == pb.CompressionType_NONE {
			m.tombstone = len(payload) == 0
		} else {
			m.tombstone = meta.GetUncompressedSize() == 0
		}
		m.tombstone = m.tombstone || meta.GetNullValue()
		return []keyedMsg{m}, nil
	}
	if meta.GetCompression() != pb.CompressionType_NONE {
		plain, err := protocol.Decompress(meta, payload)
		if errors.Is(err, protocol.ErrCompressed) {
			return nil, fmt.Errorf("compaction: %w", err)
		}
		if err != nil {
			return nil, nil
		}
		meta, payload = &pb.MessageMetadata{NumMessagesInBatch: meta.NumMessagesInBatch, ProducerName: meta.ProducerName}, plain
	}
	msgs, err := protocol.ParseBatch(meta, payload)
	if err != nil {
		return nil, nil
	}
	out := make([]keyedMsg, len(msgs))
	for i, sm := range msgs {
		out[i] = keyedMsg{
			key:       sm.Meta.GetPartitionKey(),
			hasKey:    sm.Meta.PartitionKey != nil && !sm.Meta.GetNullPartitionKey(),
			tombstone: len(sm.Payload) == 0 || sm.Meta.GetNullValue(),
			producer:  meta.GetProducerName(),
		}
	}
	return out, nil
}

// compactor returns the topic's compaction state.
func (t *Topic) compactor() *compactor {
	if cp := t.compaction.Load(); cp != nil {
		return cp
	}
	t.compaction.CompareAndSwap(nil, &compactor{state: CompactionNotRun})
	return t.compaction.Load()
}

// compactionCursorIfAny returns the topic's compaction cursor, nil if no
// compaction ever ran.
func (t *Topic) compactionCursorIfAny() *ledger.Cursor {
	for _, c := range t.ml.Cursors() {
		if c.Name() == compactionCursor {
			return c
		}
	}
	return nil
}

func propLedger(props map[string]string, key string) (int64, bool) {
	v, ok := props[key]
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(v, 10, 64)
	return id, err == nil && id >= 0
}

// compactedView returns the topic's compacted view, loading it from the
// compaction cursor on first use; nil when nothing was compacted.
func (t *Topic) compactedView(ctx context.Context) (*compactedView, error) {
	if t.ml == nil {
		return nil, nil
	}
	cp := t.compactor()
	cp.mu.Lock()
	if cp.loaded {
		v := cp.view
		cp.mu.Unlock()
		return v, nil
	}
	cp.mu.Unlock()
	cp.loadMu.Lock()
	defer cp.loadMu.Unlock()
	cp.mu.Lock()
	loaded, v := cp.loaded, cp.view
	cp.mu.Unlock()
	if loaded {
		return v, nil
	}
	if cur := t.compactionCursorIfAny(); cur != nil {
		if id, ok := propLedger(cur.Properties(), propCompactedLedger); ok {
			var err error
			if v, err = loadCompactedView(ctx, t.ml, id, cur.MarkDeletePosition()); err != nil {
				return nil, err
			}
		}
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if !cp.loaded {
		cp.view, cp.loaded = v, true
	}
	return cp.view, nil
}

// loadCompactedView reads a compacted ledger's index.
func loadCompactedView(ctx context.Context, ml *ledger.ManagedLedger, id int64, horizon ledger.Position) (*compactedView, error) {
	rd, err := ml.OpenSideLedger(ctx, id)
	if err != nil {
		return nil, err
	}
	v := &compactedView{ledgerID: id, horizon: horizon, rd: rd, size: rd.Size()}
	n := rd.Entries()
	for first := int64(0); first < n; first += compactionReadBatch {
		datas, err := rd.Read(ctx, first, min(first+compactionReadBatch, n)-1)
		if err != nil {
			return nil, fmt.Errorf("read compacted ledger %d: %w", id, err)
		}
		for _, b := range datas {
			pos, live, _, err := decodeCompacted(b)
			if err != nil {
				return nil, fmt.Errorf("compacted ledger %d: %w", id, err)
			}
			v.refs = append(v.refs, compactedRef{pos, live})
		}
	}
	return v, nil
}

// CompactTopic starts compacting t (Pulsar's PUT .../compaction);
// ErrConflict while a compaction of t runs.
func (s *Service) CompactTopic(ctx context.Context, t TopicName) error {
	tp, err := s.persistentTopic(ctx, t)
	if err != nil {
		return err
	}
	return tp.startCompaction()
}

// TopicCompactionStatus returns the state of t's compaction.
func (s *Service) TopicCompactionStatus(ctx context.Context, t TopicName) (CompactionStatus, error) {
	tp, err := s.persistentTopic(ctx, t)
	if err != nil {
		return CompactionStatus{}, err
	}
	cp := tp.compactor()
	cp.mu.Lock()
	st := CompactionStatus{State: cp.state, LastError: cp.lastErr}
	cp.mu.Unlock()
	if st.State == CompactionNotRun {
		if _, ok := tp.storedCompaction(); ok {
			st.State = CompactionSuccess // by an earlier load of the topic
		}
	}
	return st, nil
}

// storedCompaction returns the figures of the last successful compaction
// that wrote a compacted ledger, as its compaction cursor stores them; ok
// is false when none did.
func (t *Topic) storedCompaction() (CompactionStats, bool) {
	if t.ml == nil {
		return CompactionStats{}, false
	}
	cur := t.compactionCursorIfAny()
	if cur == nil {
		return CompactionStats{}, false
	}
	props := cur.Properties()
	if _, ok := propLedger(props, propCompactedLedger); !ok {
		return CompactionStats{}, false
	}
	num := func(k string) int64 {
		v, _ := strconv.ParseInt(props[k], 10, 64)
		return v
	}
	return CompactionStats{
		LastCompactionRemovedEventCount:   num(propLastRemoved),
		LastCompactionSucceedTimestamp:    num(propLastSucceed),
		LastCompactionDurationTimeInMills: num(propLastDuration),
	}, true
}

// startCompaction runs a compaction in the background.
func (t *Topic) startCompaction() error {
	cp := t.compactor()
	cp.mu.Lock()
	if cp.state == CompactionRunning {
		cp.mu.Unlock()
		return fmt.Errorf("%w: Compaction already in progress", ErrConflict)
	}
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		cp.mu.Unlock()
		return fmt.Errorf("%w: topic is closing", ErrPrecondition)
	}
	ctx, cancel := t.s.stopContext(0)
	cp.state, cp.lastErr, cp.cancel, cp.done = CompactionRunning, "", cancel, make(chan struct{})
	done := cp.done
	cp.mu.Unlock()
	t.s.wg.Add(1)
	go func() {
		defer t.s.wg.Done()
		defer close(done)
		defer cancel()
		start := time.Now()
		removed, err := t.compact(ctx, start)
		cp.mu.Lock()
		defer cp.mu.Unlock()
		cp.stats.LastCompactionDurationTimeInMills = time.Since(start).Milliseconds()
		t.s.metrics.compactionSeconds.Observe(time.Since(start).Seconds())
		if err != nil {
			t.s.metrics.compactions.WithLabelValues("error").Inc()
			cp.state, cp.lastErr = CompactionError, err.Error()
			cp.stats.LastCompactionFailedTimestamp = time.Now().UnixMilli()
			t.s.log.Warn("compaction failed", "topic", t.name.String(), "err", err)
			return
		}
		t.s.metrics.compactions.WithLabelValues("success").Inc()
		t.s.metrics.compactionRemoved.Add(float64(removed))
		cp.state = CompactionSuccess
		cp.stats.LastCompactionRemovedEventCount = removed
		cp.stats.LastCompactionSucceedTimestamp = time.Now().UnixMilli()
	}()
	return nil
}

// stopCompaction cancels a running compaction and waits for it (topic
// close). The stored state stays the previous compaction's.
func (t *Topic) stopCompaction() {
	cp := t.compaction.Load()
	if cp == nil {
		return
	}
	cp.mu.Lock()
	cancel, done := cp.cancel, cp.done
	cp.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// latestMsg is where a key's latest message of a run's range is.
type latestMsg struct {
	pos       ledger.Position
	idx       int
	tombstone bool
}

// scanEntries calls fn for every stored entry after `after` up to and
// including upTo.
func (t *Topic) scanEntries(ctx context.Context, after, upTo ledger.Position, fn func(ledger.Entry, []keyedMsg) error) error {
	pos := t.ml.Next(after)
	for !upTo.Less(pos) {
		es, err := t.ml.Read(ctx, pos, compactionReadBatch, 0)
		if err != nil {
			return err
		}
		if len(es) == 0 {
			return nil
		}
		for _, e := range es {
			if upTo.Less(e.Pos) {
				return nil
			}
			msgs, err := entryMessages(e.Data)
			if err != nil {
				return fmt.Errorf("entry %s: %w", e.Pos, err)
			}
			if err := fn(e, msgs); err != nil {
				return err
			}
		}
		pos = t.ml.Next(es[len(es)-1].Pos)
	}
	return nil
}

// liveBits returns the bitset of the n messages for which keep is true, nil
// when all are (or n is 1), and whether any is.
func liveBits(n int, keep func(i int) bool) ([]int64, bool) {
	bits := make([]int64, (n+63)/64)
	all, any := true, false
	for i := 0; i < n; i++ {
		if keep(i) {
			bits[i/64] |= 1 << (i % 64)
			any = true
		} else {
			all = false
		}
	}
	if all {
		return nil, any
	}
	return bits, any
}

// compactionHook, when set (tests), runs in a compaction's goroutine at
// its start ("start") and once the new compacted ledger is written, before
// it is committed ("written"); an error fails the run there.
var compactionHook func(stage string) error

// compact runs one compaction of the topic and returns how many messages
// it removed from the compacted view.
func (t *Topic) compact(ctx context.Context, start time.Time) (int64, error) {
	if h := compactionHook; h != nil {
		if err := h("start"); err != nil {
			return 0, err
		}
	}
	ml := t.ml
	old, err := t.compactedView(ctx)
	if err != nil {
		return 0, err
	}
	cur, err := ml.OpenCursor(ctx, compactionCursor, ledger.InitialEarliest)
	if err != nil {
		return 0, err
	}
	if id, ok := propLedger(cur.Properties(), propCompactingLedger); ok {
		// Left by a run that did not finish.
		if err := ml.DeleteSideLedger(ctx, id); err != nil {
			return 0, err
		}
		if err := cur.MarkDeleteWithProperties(ctx, cur.MarkDeletePosition(), map[string]string{propCompactingLedger: ""}); err != nil {
			return 0, err
		}
	}
	from, upTo := cur.MarkDeletePosition(), ml.LastConfirmed()
	if old != nil {
		from = old.horizon
	}
	if !from.Less(upTo) {
		return 0, nil // nothing new since the last compaction
	}

	// Phase 1: the latest message of every key in (from, upTo]. A chunked
	// message still being written at the end of the range moves the new
	// horizon before its first chunk (and phase 1 runs again on the
	// shorter range), so no horizon ever splits a chunked message.
	var p1 phaseOne
	for {
		if p1, err = t.compactionPhaseOne(ctx, from, upTo); err != nil {
			return 0, fmt.Errorf("compaction read: %w", err)
		}
		if p1.horizon == upTo {
			break
		}
		upTo = p1.horizon
		if !from.Less(upTo) {
			return 0, nil // only a chunked message being written since the last compaction
		}
	}
	latest := p1.latest

	// Phase 2: the new compacted ledger.
	w, err := ml.CreateSideLedger(ctx, "compaction")
	if err != nil {
		return 0, err
	}
	id := strconv.FormatInt(w.ID(), 10)
	fail := func(err error) (int64, error) {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Close(dctx)
		if derr := ml.DeleteSideLedger(dctx, w.ID()); derr == nil {
			cur.MarkDeleteWithProperties(dctx, cur.MarkDeletePosition(), map[string]string{propCompactingLedger: ""})
		}
		return 0, err
	}
	if err := cur.MarkDeleteWithProperties(ctx, cur.MarkDeletePosition(), map[string]string{propCompactingLedger: id}); err != nil {
		return fail(err)
	}
	var refs []compactedRef
	var removed int64
	emit := func(pos ledger.Position, live []int64, data []byte) {
		w.Append(encodeCompacted(pos, live, data))
		refs = append(refs, compactedRef{pos, live})
	}
	if old != nil {
		for i := 0; i < len(old.refs); i += compactionReadBatch {
			es, err := old.read(ctx, i, compactionReadBatch)
			if err != nil {
				return fail(fmt.Errorf("compaction read of compacted ledger: %w", err))
			}
			for _, e := range es {
				msgs, _ := entryMessages(e.data)
				live, any := liveBits(len(msgs), func(i int) bool {
					if !bitIsSet(e.live, i) || !msgs[i].hasKey {
						return false
					}
					_, superseded := latest[msgs[i].key]
					if superseded && (msgs[i].chunk == nil || msgs[i].chunk.id == 0) {
						removed++ // a chunked message counts once
					}
					return !superseded
				})
				if any {
					emit(e.pos, live, e.data)
				}
			}
		}
	}
	err = t.scanEntries(ctx, from, upTo, func(e ledger.Entry, msgs []keyedMsg) error {
		live, any := liveBits(len(msgs), func(i int) bool {
			m := msgs[i]
			if m.chunk != nil {
				// Every chunk of the latest complete message of its key.
				cm := p1.chunked[m.chunk.uuid]
				keep := m.hasKey && cm != nil && cm.complete && latest[m.key] == latestMsg{cm.last, 0, false}
				if !keep && m.chunk.id == 0 {
					removed++
				}
				return keep
			}
			keep := m.hasKey && !m.tombstone && latest[m.key] == latestMsg{e.Pos, i, false}
			if !keep {
				removed++
			}
			return keep
		})
		if any {
			emit(e.Pos, live, e.Data)
		}
		return nil
	})
	if err != nil {
		return fail(fmt.Errorf("compaction read: %w", err))
	}
	if err := w.Close(ctx); err != nil {
		return fail(err)
	}
	if h := compactionHook; h != nil {
		if err := h("written"); err != nil {
			return fail(err)
		}
	}
	rd, err := ml.OpenSideLedger(ctx, w.ID())
	if err != nil {
		return fail(err)
	}
	now := time.Now()
	if err := cur.MarkDeleteWithProperties(ctx, upTo, map[string]string{propCompactedLedger: id, propCompactingLedger: "",
		propLastSucceed: strconv.FormatInt(now.UnixMilli(), 10), propLastRemoved: strconv.FormatInt(removed, 10),
		propLastDuration: strconv.FormatInt(now.Sub(start).Milliseconds(), 10)}); err != nil {
		// The store may or may not have the new state; the cursor in
		// memory has it (and stores it with its next change). Serve what
		// the cursor says; a new owner reading the old record deletes the
		// new ledger as a leftover.
		t.compactor().setView(nil, false)
		return 0, err
	}
	t.compactor().setView(&compactedView{ledgerID: w.ID(), horizon: upTo, refs: refs, size: w.Size(), rd: rd}, true)
	if old != nil {
		if err := ml.DeleteSideLedger(ctx, old.ledgerID); err != nil {
			t.s.log.Warn("deleting the previous compacted ledger failed", "topic", t.name.String(), "ledger", old.ledgerID, "err", err)
		}
	}
	t.notifySubscriptions()
	return removed, nil
}

// chunkedMsg is a chunked message as phase 1 saw its chunks.
type chunkedMsg struct {
	num, next   int32           // chunks in the message, the next chunk id expected
	beforeFirst ledger.Position // the entry before its first chunk
	last        ledger.Position // its last chunk seen: the message's position once complete
	complete    bool            // every chunk seen, in order
	broken      bool            // a chunk out of order: the message is left out
}

// phaseOne is what phase 1 of a compaction learnt of its range.
type phaseOne struct {
	latest  map[string]latestMsg
	chunked map[string]*chunkedMsg // by uuid
	// horizon is the range's end, or the entry before the first chunk of
	// a chunked message its producer was still writing at that end.
	horizon ledger.Position
}

// compactionPhaseOne reads (from, upTo] and notes the latest message of
// every key. A chunked message counts at its last chunk, once all its
// chunks were seen in order; one with a missing or repeated chunk is left
// out (its producer gave it up, and resent it under another uuid).
func (t *Topic) compactionPhaseOne(ctx context.Context, from, upTo ledger.Position) (phaseOne, error) {
	p := phaseOne{latest: map[string]latestMsg{}, chunked: map[string]*chunkedMsg{}, horizon: upTo}
	writing := map[string]string{} // producer -> uuid of the chunked message it is on, "" when none
	prev := from
	err := t.scanEntries(ctx, from, upTo, func(e ledger.Entry, msgs []keyedMsg) error {
		defer func() { prev = e.Pos }()
		if len(msgs) == 1 && msgs[0].chunk != nil {
			m, c := msgs[0], msgs[0].chunk
			cm := p.chunked[c.uuid]
			if c.id == 0 && cm == nil {
				cm = &chunkedMsg{num: c.num, beforeFirst: prev}
				p.chunked[c.uuid] = cm
			}
			writing[m.producer] = c.uuid
			switch {
			case cm == nil:
				// Its first chunk lies before the range: only a
				// horizon written before chunks were kept whole left it.
			case cm.broken || cm.complete || c.id != cm.next || c.num != cm.num:
				cm.broken = true
			default:
				cm.next, cm.last = cm.next+1, e.Pos
				if cm.next == cm.num {
					cm.complete = true
					writing[m.producer] = ""
					if m.hasKey {
						p.latest[m.key] = latestMsg{e.Pos, 0, m.tombstone}
					}
				}
			}
			return nil
		}
		for i, m := range msgs {
			writing[m.producer] = ""
			if m.hasKey {
				p.latest[m.key] = latestMsg{e.Pos, i, m.tombstone}
			}
		}
		return nil
	})
	if err != nil {
		return phaseOne{}, err
	}
	for _, uuid := range writing {
		if cm := p.chunked[uuid]; uuid != "" && cm != nil && !cm.complete && !cm.broken && cm.beforeFirst.Less(p.horizon) {
			p.horizon = cm.beforeFirst
		}
	}
	return p, nil
}

// compactionThreshold returns the topic's compaction threshold in bytes (0:
// no automatic compaction): the topic policy, else the namespace's.
func (t *Topic) compactionThreshold() int64 {
	if tp := t.s.topicPolicies(t.name); tp != nil {
		if raw, ok := tp["compactionThreshold"]; ok {
			var v *int64
			if json.Unmarshal(raw, &v) == nil && v != nil {
				return *v
			}
		}
	}
	if raw, ok := t.policies().Other["compaction_threshold"]; ok {
		var v *int64
		if json.Unmarshal(raw, &v) == nil && v != nil {
			return *v
		}
	}
	return 0
}

// checkCompaction is the periodic automatic compaction pass of one topic.
func (t *Topic) checkCompaction(ctx context.Context, _ time.Time) error {
	threshold := t.compactionThreshold()
	if threshold <= 0 {
		return nil
	}
	var backlog int64
	if cur := t.compactionCursorIfAny(); cur != nil {
		backlog = cur.Backlog() * t.avgEntrySize()
	} else {
		backlog = t.ml.TotalSize()
	}
	if backlog <= threshold {
		return nil
	}
	err := t.startCompaction()
	if errors.Is(err, ErrConflict) {
		return nil
	}
	return err
}

// compactionStats returns the compaction block of topic stats.
func (t *Topic) compactionStats() CompactionStats {
	var st CompactionStats
	if cp := t.compaction.Load(); cp != nil {
		cp.mu.Lock()
		st = cp.stats
		cp.mu.Unlock()
	}
	if st.LastCompactionSucceedTimestamp == 0 {
		// No success since the topic was loaded: the last stored one.
		stored, _ := t.storedCompaction()
		st.LastCompactionSucceedTimestamp = stored.LastCompactionSucceedTimestamp
		st.LastCompactionRemovedEventCount = stored.LastCompactionRemovedEventCount
		if st.LastCompactionFailedTimestamp == 0 {
			st.LastCompactionDurationTimeInMills = stored.LastCompactionDurationTimeInMills
		}
	}
	return st
}

// compactedLedgerStats returns the compactedLedger block of internal stats
// (ledger id -1 without one).
func (t *Topic) compactedLedgerStats(ctx context.Context) CompactedLedgerStats {
	st := CompactedLedgerStats{LedgerID: -1, Entries: -1, Size: -1}
	if v, err := t.compactedView(ctx); err == nil && v != nil {
		st.LedgerID, st.Entries, st.Size = v.ledgerID, int64(len(v.refs)), v.size
	}
	return st
}

// dispatchCompacted serves a read_compacted subscription whose read
// position is at or before the compaction horizon from the compacted view,
// up to n entries, then moves the cursor's read position past what it
// served (past the horizon once the view is done). handled is false when
// the cursor is to be read instead; stop ends the dispatch round (a read
// failure, logged).
func (s *Subscription) dispatchCompacted(ctx context.Context, n int, gen uint64, tl *limiter, sl *rateBuckets) (handled, stop bool) {
	s.mu.Lock()
	rc, earliest := s.readCompacted, s.compactedEarliest
	s.mu.Unlock()
	if !rc || s.cursor == nil {
		return false, false
	}
	v, err := s.topic.compactedView(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.topic.s.log.Warn("compacted view unreadable", "topic", s.topic.name.String(), "sub", s.name, "err", err)
		}
		return true, true
	}
	// From earliest the whole view is served even when the read position
	// is past the horizon: the topic's ledgers up to it were trimmed.
	readPos := s.cursor.ReadPosition()
	if v == nil || v.horizon.Less(readPos) && !earliest {
		return false, false
	}
	i := 0
	if !earliest {
		i = v.search(readPos)
	}
	es, err := v.read(ctx, i, n)
	if err != nil {
		if ctx.Err() == nil {
			s.topic.s.log.Warn("compacted read failed", "topic", s.topic.name.String(), "sub", s.name, "err", err)
		}
		return true, true
	}
	next := v.horizon
	if len(es) > 0 && i+len(es) < len(v.refs) {
		next = es[len(es)-1].pos
	}
	entries := make([]ledger.Entry, len(es))
	live := make([][]int64, len(es))
	for j, e := range es {
		entries[j], live[j] = ledger.Entry{Pos: e.pos, Data: e.data}, e.live
	}
	_, msgs, bytes := s.deliver(entries, live, gen)
	chargeDispatch(tl, sl, msgs, bytes)
	s.mu.Lock()
	if gen == s.seekGen {
		// Read with ReadEntries, a position after an entry's ledger's
		// end moves on to the next stored entry.
		s.cursor.Seek(ledger.Position{LedgerID: next.LedgerID, EntryID: next.EntryID + 1})
		s.compactedEarliest = false
	}
	s.mu.Unlock()
	return true, false
}

// readForReplay reads the entry at pos for redelivery: from the compacted
// view for a read_compacted subscription when pos is at or before the
// horizon (ok false when the view does not hold it), else from the topic.
func (s *Subscription) readForReplay(ctx context.Context, pos ledger.Position) (ledger.Entry, []int64, bool) {
	s.mu.Lock()
	rc := s.readCompacted
	s.mu.Unlock()
	if rc {
		v, err := s.topic.compactedView(ctx)
		if err != nil {
			return ledger.Entry{}, nil, false
		}
		if v != nil && !v.horizon.Less(pos) {
			e, ok, err := v.lookup(ctx, pos)
			if err != nil || !ok {
				return ledger.Entry{}, nil, false
			}
			return ledger.Entry{Pos: e.pos, Data: e.data}, e.live, true
		}
	}
	es, err := s.topic.ml.Read(ctx, pos, 1, 0)
	if err != nil || len(es) == 0 || es[0].Pos != pos {
		return ledger.Entry{}, nil, false
	}
	return es[0], nil, true
}

// intersectBits returns the bits set in both ack_sets (a nil a: all set).
func intersectBits(a, b []int64) []int64 {
	if a == nil {
		return slices.Clone(b)
	}
	out := make([]int64, min(len(a), len(b)))
	for i := range out {
		out[i] = a[i] & b[i]
	}
	return out
}

// lastCompactedMessage returns, for a read_compacted consumer, the last
// message it can read when the topic has nothing after the compaction
// horizon: the last live message of the compacted view, or entry -1 when
// the view is empty. ok is false when the topic's last entry applies.
func (t *Topic) lastCompactedMessage(ctx context.Context) (id *pb.MessageIdData, ok bool) {
	v, err := t.compactedView(ctx)
	if err != nil || v == nil || v.horizon.Less(t.ml.LastConfirmed()) {
		return nil, false
	}
	if len(v.refs) == 0 {
		return &pb.MessageIdData{LedgerId: proto.Uint64(uint64(v.horizon.LedgerID)), EntryId: proto.Uint64(math.MaxUint64)}, true
	}
	e, found, err := v.lookup(ctx, v.refs[len(v.refs)-1].pos)
	if err != nil || !found {
		return nil, false
	}
	id = &pb.MessageIdData{LedgerId: proto.Uint64(uint64(e.pos.LedgerID)), EntryId: proto.Uint64(uint64(e.pos.EntryID))}
	if meta, _, err := protocol.ParseHeadersAndPayload(e.data); err == nil && protocol.IsBatch(meta) {
		n := protocol.NumMessages(meta)
		last := n - 1
		for last > 0 && !bitIsSet(e.live, last) {
			last--
		}
		id.BatchIndex, id.BatchSize = proto.Int32(int32(last)), proto.Int32(int32(n))
	}
	return id, true
}
