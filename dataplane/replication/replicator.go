package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/magnetar-dev/magnetar/api/pulsarwire"
	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
)

// Names shared by both ends of a replication link.
const (
	// Prefix starts the replicator's cursor name on the source topic
	// (pulsar.repl.<remote cluster>) and its producer name on the remote
	// topic (pulsar.repl.<source cluster>), as in Pulsar.
	Prefix = "pulsar.repl."
	// SourcePositionProperty is the message property carrying the
	// position ("ledger:entry") of a replicated entry in its source topic.
	SourcePositionProperty = "__MSG_PROP_REPL_SOURCE_POSITION"
)

// markerWindow is how many marker SENDs (replicated subscription states) a
// replicator may have unanswered besides its data window.
const markerWindow = 256

// maxBackoff caps the pause between a replicator's connection attempts
// while its remote is unreachable: how long a healed link may wait.
const maxBackoff = 10 * time.Second

// entryBits is how many low bits of a replicated SEND's sequence id hold
// the entry id; the ledger id fills the rest.
const entryBits = 24

// SequenceOf maps a source position to the sequence id of its replicated
// SEND: increasing with the position, so the remote's deduplication, keyed
// by the replicator's producer name, drops every entry it stored before.
// ok is false for a position beyond the encoding (entry id of 2^24 or more,
// ledger id of 2^39 or more).
func SequenceOf(p ledger.Position) (uint64, bool) {
	if p.EntryID < 0 || p.EntryID >= 1<<entryBits || p.LedgerID < 0 || p.LedgerID >= 1<<(63-entryBits) {
		return 0, false
	}
	return uint64(p.LedgerID)<<entryBits | uint64(p.EntryID), true
}

// SourceSequence returns the replicated sequence id recorded in a stored
// entry's metadata, for rebuilding deduplication state from the ledger.
func SourceSequence(meta *pb.MessageMetadata) (uint64, bool) {
	for _, kv := range meta.GetProperties() {
		if kv.GetKey() == SourcePositionProperty {
			if p, ok := ledger.ParsePosition(kv.GetValue()); ok {
				return SequenceOf(p)
			}
		}
	}
	return 0, false
}

// Config is one replicator: a topic (or partition) of the local cluster
// copied to one remote cluster.
type Config struct {
	LocalCluster  string
	RemoteCluster string
	// Topic is the full topic name, the same in both clusters.
	Topic string
	// Ledger and Cursor are the local topic's managed ledger and the
	// replicator's durable cursor on it (Prefix + RemoteCluster).
	Ledger *ledger.ManagedLedger
	Cursor *ledger.Cursor
	// Connect returns a connection to the remote broker that owns Topic;
	// Release, when set, gives it back at the end of a session (default:
	// the connection is closed). Connections may be shared: a replicator
	// uses its own producer on it.
	Connect func(ctx context.Context) (*Conn, error)
	Release func(*Conn)
	// Prepare, when set, runs once per session before the producer is
	// created (for example to create the partitioned topic remotely).
	Prepare func(ctx context.Context, c *Conn) error
	// Schema returns the local schema of a schema version, so the
	// replicator can register it remotely; nil: messages with a schema
	// version are sent with it unchanged.
	Schema func(ctx context.Context, version []byte) (*pb.Schema, error)
	// Throttle, when set, waits until msgs messages of bytes may be sent
	// (the replicator dispatch rate).
	Throttle func(ctx context.Context, msgs, bytes int) error
	// Markers, when set, is asked every second for at most max marker payloads
	// (headers and payload) to send after the data sent so far: SENDs with
	// marker set, never stored by the remote (replicated subscription
	// states).
	Markers func(ctx context.Context, max int) [][]byte
	// MaxInFlight bounds the SENDs awaiting receipts (default 1000);
	// MaxInFlightBytes their bytes (default 8 MiB).
	MaxInFlight      int
	MaxInFlightBytes int
	Log              *slog.Logger
	// Confirmed, when set, is told the messages and payload bytes of every
	// entry the remote confirmed (usage metering: bytes_replicated_out).
	Confirmed func(msgs, payloadBytes int64)
}

// Stats is a replicator's state, as topic stats show it.
type Stats struct {
	Connected      bool
	ConnectedSince time.Time
	RemoteAddr     string
	MsgOut         uint64 // messages sent and confirmed since start
	BytesOut       uint64
	// MsgRateOut and ByteRateOut are per second over the last second the
	// replicator was connected.
	MsgRateOut, ByteRateOut float64
	Backlog                 int64 // entries not yet replicated (or skipped)
	// OldestPending is the publish time of the oldest entry sent and not
	// yet confirmed, zero when none is pending.
	OldestPending time.Time
	LastError     string
}

// Replicator copies a topic's entries to the same topic in a remote
// cluster, in order, each exactly once: entries that came from another
// cluster (replicated_from) and entries whose replicate_to leaves the
// remote out are skipped; the others are re-sent with replicated_from set
// to the local cluster and their source position as SourcePositionProperty,
// under the sequence id SequenceOf(position), by a producer named Prefix +
// LocalCluster. The remote deduplicates by that name and id, so resending
// after a crash or reconnect stores nothing twice; the cursor advances only
// over entries the remote confirmed.
//
// Run owns the replicator's work; Wake and Stats may be called from any
// goroutine.
type Replicator struct {
	cfg  Config
	wake chan struct{}

	msgOut, bytesOut atomic.Uint64

	mu        sync.Mutex
	rateMsgs  float64
	rateBytes float64
	connected bool
	since     time.Time
	addr      string
	oldest    time.Time
	lastErr   string

	// schemas maps local schema versions to remote ones (one session).
	schemas map[string][]byte
}

// New returns a replicator; Run starts it.
func New(cfg Config) *Replicator {
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 1000
	}
	if cfg.MaxInFlightBytes <= 0 {
		cfg.MaxInFlightBytes = 8 << 20
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Replicator{cfg: cfg, wake: make(chan struct{}, 1)}
}

// Wake tells the replicator new entries may be there.
func (r *Replicator) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Remote is the remote cluster's name.
func (r *Replicator) Remote() string { return r.cfg.RemoteCluster }

// Cursor is the replicator's cursor.
func (r *Replicator) Cursor() *ledger.Cursor { return r.cfg.Cursor }

// Stats returns the replicator's current state.
func (r *Replicator) Stats() Stats {
	r.mu.Lock()
	st := Stats{Connected: r.connected, ConnectedSince: r.since, RemoteAddr: r.addr, OldestPending: r.oldest, LastError: r.lastErr,
		MsgRateOut: r.rateMsgs, ByteRateOut: r.rateBytes}
	r.mu.Unlock()
	st.MsgOut, st.BytesOut = r.msgOut.Load(), r.bytesOut.Load()
	st.Backlog = r.cfg.Cursor.Backlog()
	return st
}

// Run replicates until ctx ends, reconnecting with backoff after failures.
func (r *Replicator) Run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		progressed, err := r.session(ctx)
		r.mu.Lock()
		r.connected, r.oldest, r.rateMsgs, r.rateBytes = false, time.Time{}, 0, 0
		if err != nil && ctx.Err() == nil {
			r.lastErr = err.Error()
		}
		r.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		if progressed {
			backoff = 100 * time.Millisecond
		}
		r.cfg.Log.Warn("replicator disconnected", "topic", r.cfg.Topic, "remote", r.cfg.RemoteCluster, "err", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// pending is one entry read from the cursor and not yet acknowledged on it.
type pending struct {
	pos     ledger.Position
	seq     uint64
	done    bool // confirmed by the remote, or not to be sent
	size    int
	payload int // payload bytes, for Config.Confirmed
	msgs    int32
	publish time.Time
}

// session runs one connection: it returns when the connection fails or ctx
// ends. progressed reports whether the remote confirmed anything.
func (r *Replicator) session(ctx context.Context) (progressed bool, err error) {
	conn, err := r.cfg.Connect(ctx)
	if err != nil {
		return false, err
	}
	if r.cfg.Release != nil {
		defer r.cfg.Release(conn)
	} else {
		defer conn.Close()
	}
	if r.cfg.Prepare != nil {
		if err := r.cfg.Prepare(ctx, conn); err != nil {
			return false, err
		}
	}
	producerID, events := conn.Producer(r.cfg.MaxInFlight + markerWindow)
	defer func() {
		// The connection may serve other replicators: close only this
		// producer (the broker forgets it; its unanswered SENDs are
		// re-sent by the next session and deduplicated).
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn.CloseProducer(cctx, producerID)
	}()
	last, err := conn.CreateProducer(ctx, r.cfg.Topic, producerID, Prefix+r.cfg.LocalCluster)
	if err != nil {
		return false, fmt.Errorf("create producer on %s: %w", r.cfg.RemoteCluster, err)
	}
	r.mu.Lock()
	r.connected, r.since, r.addr, r.lastErr = true, time.Now(), conn.Addr(), ""
	r.mu.Unlock()
	r.schemas = map[string][]byte{}
	r.cfg.Log.Info("replicator connected", "topic", r.cfg.Topic, "remote", r.cfg.RemoteCluster, "broker", conn.Addr(), "last_sequence_id", last)

	cur := r.cfg.Cursor
	cur.Rewind()
	var queue []pending
	inflightBytes := 0
	var bufMeta pb.MessageMetadata
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastTick, lastMsgs, lastBytes := time.Now(), r.msgOut.Load(), r.bytesOut.Load()
	for {
		// Fill the window.
		for len(queue) < r.cfg.MaxInFlight && inflightBytes < r.cfg.MaxInFlightBytes {
			ents, err := cur.ReadEntries(ctx, min(100, r.cfg.MaxInFlight-len(queue)))
			if err != nil {
				return progressed, fmt.Errorf("read: %w", err)
			}
			if len(ents) == 0 {
				break
			}
			for _, e := range ents {
				p, hp, err := r.prepare(ctx, conn, e, &bufMeta)
				if err != nil {
					return progressed, err
				}
				if !p.done && int64(p.seq) <= last {
					p.done = true // stored by the remote before
				}
				if !p.done {
					if r.cfg.Throttle != nil {
						if err := r.cfg.Throttle(ctx, int(max(p.msgs, 1)), p.size); err != nil {
							return progressed, err
						}
					}
					chunk := bufMeta.NumChunksFromMsg != nil && bufMeta.GetNumChunksFromMsg() > 1
					if err := conn.Send(producerID, p.seq, p.msgs, chunk, hp); err != nil {
						return progressed, err
					}
					inflightBytes += p.size
				}
				queue = append(queue, p)
			}
		}
		queue, err = r.ackPrefix(queue)
		if err != nil {
			return progressed, err
		}
		r.noteOldest(queue)
		select {
		case <-ctx.Done():
			return progressed, nil
		case <-conn.Done():
			return progressed, conn.Err()
		case <-r.wake:
		case now := <-tick.C:
			m, b := r.msgOut.Load(), r.bytesOut.Load()
			el := now.Sub(lastTick).Seconds()
			r.mu.Lock()
			r.rateMsgs, r.rateBytes = float64(m-lastMsgs)/el, float64(b-lastBytes)/el
			r.mu.Unlock()
			lastTick, lastMsgs, lastBytes = now, m, b
			if r.cfg.Markers != nil {
				for _, hp := range r.cfg.Markers(ctx, markerWindow/2) {
					if err := conn.SendMarker(producerID, hp); err != nil {
						return progressed, err
					}
				}
			}
		case ev := <-events:
			for {
				n, err := r.onEvent(ev, queue)
				if err != nil {
					return progressed, err
				}
				inflightBytes -= n
				progressed = true
				select {
				case ev = <-events:
					continue
				default:
				}
				break
			}
		}
	}
}

// onEvent applies a producer frame to the queue and returns the bytes it
// released.
func (r *Replicator) onEvent(ev *pb.BaseCommand, queue []pending) (int, error) {
	switch ev.GetType() {
	case pb.BaseCommand_SEND_RECEIPT:
		seq := ev.GetSendReceipt().GetSequenceId()
		for i := range queue {
			if q := &queue[i]; !q.done && q.seq == seq {
				q.done = true
				r.msgOut.Add(uint64(max(q.msgs, 1)))
				r.bytesOut.Add(uint64(q.size))
				if r.cfg.Confirmed != nil {
					r.cfg.Confirmed(int64(max(q.msgs, 1)), int64(q.payload))
				}
				return q.size, nil
			}
		}
		return 0, nil // a receipt of an earlier session's send
	case pb.BaseCommand_SEND_ERROR:
		se := ev.GetSendError()
		return 0, fmt.Errorf("remote refused entry (sequence id %d): %v: %s", se.GetSequenceId(), se.GetError(), se.GetMessage())
	case pb.BaseCommand_CLOSE_PRODUCER:
		return 0, errors.New("remote closed the producer")
	}
	return 0, nil
}

// ackPrefix acknowledges on the cursor the leading entries that are done
// and returns the rest.
func (r *Replicator) ackPrefix(queue []pending) ([]pending, error) {
	n := 0
	for n < len(queue) && queue[n].done {
		n++
	}
	if n == 0 {
		return queue, nil
	}
	if err := r.cfg.Cursor.AckCumulative(queue[n-1].pos); err != nil && !errors.Is(err, ledger.ErrInvalidPosition) {
		return queue, fmt.Errorf("acknowledge: %w", err)
	}
	return slices.Delete(queue, 0, n), nil
}

func (r *Replicator) noteOldest(queue []pending) {
	var oldest time.Time
	for _, q := range queue {
		if !q.done {
			oldest = q.publish
			break
		}
	}
	r.mu.Lock()
	r.oldest = oldest
	r.mu.Unlock()
}

// prepare decides whether an entry goes to the remote and, if so, returns
// its headers and payload as sent. meta is scratch space; on return it
// holds the entry's metadata.
func (r *Replicator) prepare(ctx context.Context, conn *Conn, e ledger.Entry, meta *pb.MessageMetadata) (pending, []byte, error) {
	p := pending{pos: e.Pos}
	payload, err := protocol.ParseHeadersAndPayloadInto(e.Data, meta)
	if err != nil {
		// Stored entries were verified when published; one that no longer
		// parses cannot be replicated and must not stop the others.
		r.cfg.Log.Error("replicator skips an unreadable entry", "topic", r.cfg.Topic, "position", e.Pos.String(), "err", err)
		p.done = true
		return p, nil, nil
	}
	if meta.GetReplicatedFrom() != "" {
		p.done = true // came from another cluster: never sent on
		return p, nil, nil
	}
	if to := meta.GetReplicateTo(); len(to) > 0 && !slices.Contains(to, r.cfg.RemoteCluster) {
		p.done = true
		return p, nil, nil
	}
	seq, ok := SequenceOf(e.Pos)
	if !ok {
		return p, nil, fmt.Errorf("position %v cannot be replicated: beyond the sequence id encoding", e.Pos)
	}
	p.seq = seq
	p.msgs = int32(protocol.NumMessages(meta))
	p.payload = len(payload)
	p.publish = time.UnixMilli(int64(meta.GetPublishTime()))
	meta.ReplicatedFrom = new(r.cfg.LocalCluster)
	meta.Properties = append(meta.Properties, &pb.KeyValue{Key: new(SourcePositionProperty),
		Value: new(strconv.FormatInt(e.Pos.LedgerID, 10) + ":" + strconv.FormatInt(e.Pos.EntryID, 10))})
	if v := meta.GetSchemaVersion(); len(v) > 0 && r.cfg.Schema != nil {
		remote, err := r.remoteSchema(ctx, conn, v)
		if err != nil {
			return p, nil, err
		}
		meta.SchemaVersion = remote
	}
	hp, err := protocol.AppendHeadersAndPayload(make([]byte, 0, len(e.Data)+64), meta, payload)
	if err != nil {
		return p, nil, err
	}
	p.size = len(hp)
	return p, hp, nil
}

// remoteSchema returns the remote version of a local schema version,
// registering the schema on the remote topic the first time.
func (r *Replicator) remoteSchema(ctx context.Context, conn *Conn, local []byte) ([]byte, error) {
	if v, ok := r.schemas[string(local)]; ok {
		return v, nil
	}
	sc, err := r.cfg.Schema(ctx, local)
	if err != nil {
		return nil, fmt.Errorf("schema version %x: %w", local, err)
	}
	if sc == nil {
		r.schemas[string(local)] = local
		return local, nil
	}
	v, err := conn.GetOrCreateSchema(ctx, r.cfg.Topic, sc)
	if err != nil {
		return nil, fmt.Errorf("register schema on %s: %w", r.cfg.RemoteCluster, err)
	}
	r.schemas[string(local)] = v
	return v, nil
}
