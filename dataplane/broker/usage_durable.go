package broker

// Durable usage counters of persistent topics: messages and payload bytes
// in (stored for producers) and out (consumed by a durable subscription)
// that survive any crash of the broker exactly, so that the region agent
// bills every stored and every consumed message once.
//
// Each counter is a function of a position in the topic's managed ledger:
//
//   - in: the messages and payload bytes of the producer entries after the
//     counter's start position and up to its position;
//   - out (one per durable subscription): the same sums over the entries
//     after the subscription's start position and up to the position its
//     counter reached, which follows the subscription's mark-delete
//     position (an entry is counted when the subscription's acknowledged
//     prefix first passes it: acknowledged, skipped or expired).
//
// Because the value at a position depends only on the entries, a counter
// recomputed after a crash from an older checkpoint reaches the same value
// at the same position; a reader that keeps the highest value it saw per
// (source, epoch) and ignores lower ones (a restarted broker recounting,
// a topic's previous owner still answering) bills every entry once. The
// epoch names the start position, so a topic or subscription deleted and
// created again is a new counter.
//
// State, all in cursor properties (stored by the managed ledger together
// with the cursor's mark-delete position, so each snapshot is consistent):
//
//	cursor "magnetar.usage" of the topic (holds back trimming):
//	  magnetar.usage.in.start      "L:E"        in's start position
//	  magnetar.usage.in            "L:E:M:B"    in counted through L:E: M messages, B bytes
//	  magnetar.usage.out.<sub>     "S:s:L:E:M:B" sub's start S:s, counted through L:E
//	the subscription's own cursor:
//	  magnetar.usage.start         "L:E"        the subscription's start position
//
// A checkpoint is taken every usageCheckpointEvery entries in, at the first
// entry of a new ledger, whenever an out counter moves and at every report.
// The usage cursor's mark-delete position is kept at or below every
// counter's position (properties are set before the cursor moves), so the
// entries a recount after a crash must read are never trimmed. A
// subscription's start is set before any consumer attaches, so a stored
// cursor without it has never stored an acknowledgement and its
// mark-delete position is its start.
//
// An acknowledgement only asks for its subscription's out counter to be
// brought up to date (requestOut): the entries it passed, which may have
// to be read from the bookies, are counted by the topic's out worker, a
// goroutine that runs while such requests wait and coalesces them, so an
// acknowledgement never waits for a storage read. A report and the
// topic's close count synchronously, so what they see is up to date.
//
// Concurrency: topicUsage.mu guards the counters and the worker's state;
// outMu serializes the out counting (which reads entries) and is taken
// before mu. Cursor methods are called under mu (they never call back).
// The out worker is owned by the topicUsage: stop ends it and waits for
// it.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/magnetar-dev/magnetar/billing"
	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
)

const (
	usageCursor        = "magnetar.usage"
	usageInStartProp   = "magnetar.usage.in.start"
	usageInProp        = "magnetar.usage.in"
	usageOutPropPrefix = "magnetar.usage.out."
	usageSubStartProp  = "magnetar.usage.start"
	// usageReadBatch is how many entries one read of a recount takes.
	usageReadBatch = 500
	// usageCheckpointEvery is how many entries in may count between two
	// checkpoints (a recount after a crash reads at most about as many,
	// plus what the cursor persistence interval held).
	usageCheckpointEvery = 64
	// usageReadTimeout bounds one read of a recount.
	usageReadTimeout = 30 * time.Second
)

// internalCursor reports whether a durable cursor is the broker's own (not
// a subscription): deduplication's and usage metering's.
func internalCursor(name string) bool {
	return name == dedupCursor || name == usageCursor || name == compactionCursor
}

// usagePoint is a counter: the sums through pos.
type usagePoint struct {
	pos         ledger.Position
	msgs, bytes int64
}

func (p usagePoint) String() string {
	b := make([]byte, 0, 48)
	for i, v := range []int64{p.pos.LedgerID, p.pos.EntryID, p.msgs, p.bytes} {
		if i > 0 {
			b = append(b, ':')
		}
		b = strconv.AppendInt(b, v, 10)
	}
	return string(b)
}

// usagePos formats p as "L:E" (also Earliest, which Position.String names).
func usagePos(p ledger.Position) string { return fmt.Sprintf("%d:%d", p.LedgerID, p.EntryID) }

// parseUsagePos reads what usagePos wrote.
func parseUsagePos(s string) (ledger.Position, bool) {
	v, ok := parseInts(s, 2)
	if !ok {
		return ledger.Position{}, false
	}
	return ledger.Position{LedgerID: v[0], EntryID: v[1]}, true
}

func parseInts(s string, n int) ([]int64, bool) {
	f := strings.Split(s, ":")
	if len(f) != n {
		return nil, false
	}
	out := make([]int64, n)
	for i, x := range f {
		v, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return nil, false
		}
		out[i] = v
	}
	return out, true
}

func parsePoint(s string) (usagePoint, bool) {
	v, ok := parseInts(s, 4)
	if !ok || v[2] < 0 || v[3] < 0 {
		return usagePoint{}, false
	}
	return usagePoint{ledger.Position{LedgerID: v[0], EntryID: v[1]}, v[2], v[3]}, true
}

// subUsage is one durable subscription's out counter.
type subUsage struct {
	cur   *ledger.Cursor
	start ledger.Position
	point usagePoint
}

// topicUsage is a persistent topic's durable counters.
type topicUsage struct {
	t   *Topic
	cur *ledger.Cursor // usageCursor

	outMu sync.Mutex
	mu    sync.Mutex
	start ledger.Position
	in    usagePoint
	subs  map[string]*subUsage
	// Entries counted in since the last checkpoint, and the ledger of the
	// in counter's position then.
	sinceCheckpoint  int
	checkpointLedger int64

	// The out worker: the subscriptions whose counters it is asked to
	// advance, whether it runs, whether stop was called; outCtx ends its
	// reads at stop.
	outWanted  map[string]struct{}
	outRunning bool
	outStopped bool
	outCtx     context.Context
	outCancel  context.CancelFunc
	outWG      sync.WaitGroup
}

// loadTopicUsage opens the topic's usage cursor and brings the in counter
// up to the last stored entry (reading the entries after its checkpoint).
// A topic that had no usage cursor starts counting at its last entry.
func loadTopicUsage(ctx context.Context, t *Topic) (*topicUsage, error) {
	cur, err := t.ml.OpenCursor(ctx, usageCursor, ledger.InitialLatest)
	if err != nil {
		return nil, fmt.Errorf("usage: cursor: %w", err)
	}
	u := &topicUsage{t: t, cur: cur, subs: map[string]*subUsage{}}
	u.outCtx, u.outCancel = context.WithCancel(context.Background())
	props := cur.Properties()
	var ok bool
	if u.start, ok = parseUsagePos(props[usageInStartProp]); !ok {
		// Never checkpointed: nothing acknowledged on the cursor yet, so
		// its mark-delete position is where it was created.
		u.start = cur.MarkDeletePosition()
		cur.SetProperty(usageInStartProp, usagePos(u.start))
	}
	if u.in, ok = parsePoint(props[usageInProp]); !ok || u.in.pos.Less(u.start) {
		u.in = usagePoint{pos: u.start}
	}
	end := t.ml.LastConfirmed()
	for u.in.pos.Less(end) {
		n, err := u.count(ctx, u.in.pos, end, true, &u.in)
		if err != nil {
			return nil, fmt.Errorf("usage: recount %s: %w", t.name, err)
		}
		if n == 0 {
			break
		}
	}
	u.mu.Lock()
	u.checkpointLocked()
	u.mu.Unlock()
	return u, nil
}

// count adds the entries after from and up to through (one read of at
// most usageReadBatch entries) to p, and returns how many it read. in
// selects the in rule: entries of replicators are not counted.
func (u *topicUsage) count(ctx context.Context, from, through ledger.Position, in bool, p *usagePoint) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, usageReadTimeout)
	defer cancel()
	if h := usageReadHook.Load(); h != nil {
		(*h)(u.t.name)
	}
	want := usageReadBatch
	if from.LedgerID == through.LedgerID && from.EntryID >= 0 && through.EntryID > from.EntryID {
		// Entries of one ledger are numbered without gaps: read only
		// those up to through.
		want = int(min(through.EntryID-from.EntryID, usageReadBatch))
	}
	es, err := u.t.ml.Read(ctx, u.t.ml.Next(from), want, 0)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range es {
		if through.Less(e.Pos) {
			break
		}
		msgs, bytes, billed := entryUsage(e.Data, in)
		if billed {
			p.msgs += msgs
			p.bytes += bytes
		}
		p.pos = e.Pos
		n++
	}
	if n == 0 && len(es) == 0 {
		return 0, nil
	}
	if n == 0 {
		// The next stored entry is past through (the entries between were
		// trimmed, which the usage cursor prevents): nothing to count.
		p.pos = through
	}
	return max(n, 1), nil
}

// usageReadHook, when set (tests), runs before every read of a recount.
var usageReadHook atomic.Pointer[func(TopicName)]

// entryUsage is what an entry counts: its messages and payload bytes, and
// whether it is billed at all (markers are not; replicated entries are not
// billed in).
func entryUsage(data []byte, in bool) (msgs, bytes int64, billed bool) {
	meta, _, err := protocol.ParseHeadersAndPayload(data)
	if err != nil {
		return 1, int64(len(data)), true
	}
	if meta.MarkerType != nil {
		return 0, 0, false
	}
	if in && meta.GetReplicatedFrom() != "" {
		return 0, 0, false
	}
	return int64(max(protocol.NumMessages(meta), 1)), int64(protocol.PayloadSize(data)), true
}

// added counts an entry a producer stored at pos (add callbacks run in
// position order).
func (u *topicUsage) added(pos ledger.Position, msgs int32, payload int64) {
	if u == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.in.pos.Less(pos) {
		return // counted by the recount at load
	}
	u.in = usagePoint{pos: pos, msgs: u.in.msgs + int64(max(msgs, 1)), bytes: u.in.bytes + payload}
	u.sinceCheckpoint++
	// Every usageCheckpointEvery entries, and at the first entry of a new
	// ledger (so the previous ledger is not held back from trimming).
	if u.sinceCheckpoint >= usageCheckpointEvery || pos.LedgerID != u.checkpointLedger {
		u.checkpointLocked()
	}
}

// track registers a durable subscription's cursor (a new subscription, or
// one found at load) before any consumer attaches.
func (u *topicUsage) track(name string, cur *ledger.Cursor) {
	if u == nil || cur == nil || !cur.IsDurable() || internalCursor(name) {
		return
	}
	props := cur.Properties()
	start, ok := parseUsagePos(props[usageSubStartProp])
	if !ok {
		start = cur.MarkDeletePosition()
		cur.SetProperty(usageSubStartProp, usagePos(start))
	}
	s := &subUsage{cur: cur, start: start, point: usagePoint{pos: start}}
	if v, ok := parseInts(u.cur.Properties()[usageOutPropPrefix+name], 6); ok && v[0] == start.LedgerID && v[1] == start.EntryID &&
		v[4] >= 0 && v[5] >= 0 {
		if p := (usagePoint{ledger.Position{LedgerID: v[2], EntryID: v[3]}, v[4], v[5]}); !p.pos.Less(start) {
			s.point = p
		}
	}
	u.mu.Lock()
	u.subs[name] = s
	u.checkpointLocked()
	u.mu.Unlock()
}

// untrack forgets a deleted subscription.
func (u *topicUsage) untrack(name string) {
	if u == nil {
		return
	}
	u.mu.Lock()
	delete(u.subs, name)
	u.cur.SetProperty(usageOutPropPrefix+name, "")
	u.checkpointLocked()
	u.mu.Unlock()
}

// requestOut asks the out worker to advance sub's counter (an
// acknowledgement moved its mark-delete position), starting the worker
// unless it runs. It never reads entries.
func (u *topicUsage) requestOut(sub string) {
	if u == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.outStopped {
		return
	}
	if u.outWanted == nil {
		u.outWanted = map[string]struct{}{}
	}
	u.outWanted[sub] = struct{}{}
	if u.outRunning {
		return
	}
	u.outRunning = true
	u.outWG.Add(1)
	go u.outWork()
}

// outWork is the out worker: it advances the counters asked for until no
// request waits, then exits. A failed count is left to the next request,
// report or close, which count from the same position.
func (u *topicUsage) outWork() {
	defer u.outWG.Done()
	for {
		u.mu.Lock()
		if len(u.outWanted) == 0 || u.outStopped {
			u.outRunning = false
			u.mu.Unlock()
			return
		}
		names := make([]string, 0, len(u.outWanted))
		for n := range u.outWanted {
			names = append(names, n)
		}
		clear(u.outWanted)
		u.mu.Unlock()
		for _, n := range names {
			if err := u.advanceOut(u.outCtx, n); err != nil && u.outCtx.Err() == nil {
				u.t.s.log.Debug("usage: counting consumed entries failed", "topic", u.t.name.String(), "subscription", n, "err", err)
			}
		}
	}
}

// stop ends the out worker (a read under way is cancelled) and waits for
// it; later requests are ignored. The topic's close then counts what is
// left itself.
func (u *topicUsage) stop() {
	if u == nil {
		return
	}
	u.mu.Lock()
	u.outStopped = true
	u.mu.Unlock()
	u.outCancel()
	u.outWG.Wait()
}

// advanceOut counts, for every subscription (or only sub, when not empty),
// the entries its mark-delete position passed since its counter's position.
func (u *topicUsage) advanceOut(ctx context.Context, sub string) error {
	if u == nil {
		return nil
	}
	u.outMu.Lock()
	defer u.outMu.Unlock()
	u.mu.Lock()
	names := make([]string, 0, len(u.subs))
	for n := range u.subs {
		if sub == "" || n == sub {
			names = append(names, n)
		}
	}
	u.mu.Unlock()
	var errs []error
	for _, n := range names {
		u.mu.Lock()
		s := u.subs[n]
		u.mu.Unlock()
		if s == nil {
			continue
		}
		md := s.cur.MarkDeletePosition()
		p := s.point // only advanceOut changes it, under outMu
		changed := false
		for p.pos.Less(md) {
			k, err := u.count(ctx, p.pos, md, false, &p)
			if err != nil {
				errs = append(errs, fmt.Errorf("usage: %s subscription %s: %w", u.t.name, n, err))
				break
			}
			if k == 0 {
				break
			}
			changed = true
		}
		if changed {
			u.mu.Lock()
			if u.subs[n] == s {
				s.point = p
				u.checkpointLocked()
			}
			u.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

// checkpointLocked stores the counters in the usage cursor's properties and
// then moves its mark-delete position up to the lowest counter's position.
func (u *topicUsage) checkpointLocked() {
	u.sinceCheckpoint, u.checkpointLedger = 0, u.in.pos.LedgerID
	u.cur.SetProperty(usageInProp, u.in.String())
	low := u.in.pos
	for n, s := range u.subs {
		u.cur.SetProperty(usageOutPropPrefix+n, fmt.Sprintf("%d:%d:%s", s.start.LedgerID, s.start.EntryID, s.point))
		if s.point.pos.Less(low) {
			low = s.point.pos
		}
	}
	if low.LedgerID >= 0 && u.cur.MarkDeletePosition().Less(low) {
		// An error means the position is not (or no longer) stored: the
		// cursor stays, which only holds back trimming.
		_ = u.cur.AckCumulative(low)
	}
}

// report returns the topic's counters as billing sources.
func (u *topicUsage) report() []billing.SourceUsage {
	if u == nil {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.sinceCheckpoint > 0 {
		u.checkpointLocked()
	}
	topic := u.t.name.String()
	out := []billing.SourceUsage{{Source: "in " + topic, Epoch: usagePos(u.start), Tenant: u.t.name.Tenant,
		Namespace: u.t.name.Namespace, MessagesIn: u.in.msgs, BytesIn: u.in.bytes}}
	names := make([]string, 0, len(u.subs))
	for n := range u.subs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := u.subs[n]
		out = append(out, billing.SourceUsage{Source: "out " + topic + " " + n, Epoch: usagePos(s.start), Tenant: u.t.name.Tenant,
			Namespace: u.t.name.Namespace, MessagesOut: s.point.msgs, BytesOut: s.point.bytes})
	}
	return out
}
