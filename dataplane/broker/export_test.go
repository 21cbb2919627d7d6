package broker

import (
	"context"
	"errors"
	"strconv"

	"github.com/magnetar-dev/magnetar/dataplane/ledger"
)

// KeyHash exposes the Key_Shared key hash to the external tests.
var KeyHash = keyHash

// DedupStep feeds one SEND to a deduplication state the way handleSend and
// its completion do, and returns the verdict: "new", "dup" or "unknown".
// A new SEND is completed (persisted) unless inFlight, or failed if fail.
type DedupStep struct {
	Producer           string
	Seq, Highest       int64
	ChunkID, NumChunks int32 // ChunkID -1: not a chunk
	InFlight, Fail     bool
}

// RunDedup runs steps through a fresh state seeded with persisted and
// returns each step's verdict and the final last sequence ids.
func RunDedup(persisted map[string]int64, steps []DedupStep) ([]string, map[string]int64) {
	d := &dedupState{pushed: map[string]int64{}, persisted: map[string]int64{}}
	for k, v := range persisted {
		d.persisted[k], d.pushed[k] = v, v
	}
	var out []string
	for i, st := range steps {
		k := dedupSend{producer: st.Producer, seq: st.Seq, highest: st.Highest, chunkID: st.ChunkID, numChunks: st.NumChunks}
		switch d.admit(k) {
		case notDup:
			out = append(out, "new")
			if st.Fail {
				d.done(k, ledger.Position{}, errors.New("write failed"))
			} else if !st.InFlight {
				d.done(k, ledger.Position{LedgerID: 1, EntryID: int64(i)}, nil)
			}
		case dup:
			out = append(out, "dup")
		case dupUnknown:
			out = append(out, "unknown")
		}
	}
	last := map[string]int64{}
	for k := range d.persisted {
		last[k] = d.lastSequence(k)
	}
	return out, last
}

// SetCompactionHook makes every compaction call h at its stages ("start",
// "written": the new ledger is written, not committed); an error fails the
// run. The returned function removes it.
func SetCompactionHook(h func(stage string) error) func() {
	compactionHook = h
	return func() { compactionHook = nil }
}

// PlantCompactingLedger leaves what a compaction that crashed while writing
// leaves: a side ledger with one entry, named by the compaction cursor as
// the ledger being written. It returns the ledger's id.
func PlantCompactingLedger(ctx context.Context, s *Service, t TopicName) (int64, error) {
	tp, err := s.persistentTopic(ctx, t)
	if err != nil {
		return 0, err
	}
	w, err := tp.ml.CreateSideLedger(ctx, "compaction")
	if err != nil {
		return 0, err
	}
	w.Append([]byte("half-written"))
	if err := w.Close(ctx); err != nil {
		return 0, err
	}
	cur, err := tp.ml.OpenCursor(ctx, compactionCursor, ledger.InitialEarliest)
	if err != nil {
		return 0, err
	}
	id := strconv.FormatInt(w.ID(), 10)
	return w.ID(), cur.MarkDeleteWithProperties(ctx, cur.MarkDeletePosition(), map[string]string{propCompactingLedger: id})
}

// SideLedgerExists reports whether the side ledger id of topic t can be
// opened.
func SideLedgerExists(ctx context.Context, s *Service, t TopicName, id int64) bool {
	tp, err := s.persistentTopic(ctx, t)
	if err != nil {
		return false
	}
	_, err = tp.ml.OpenSideLedger(ctx, id)
	return err == nil
}

// SetTopicLoadHook makes every load of a persistent topic call h once the
// topic is open, before it is published to the registry. The returned
// function removes it.
func SetTopicLoadHook(h func(TopicName)) func() {
	topicLoadHook.Store(&h)
	return func() { topicLoadHook.Store(nil) }
}

// SessionID is the id of the broker's current metadata session.
func SessionID(s *Service) int64 { return s.own.session().ID() }

// OpenTopicNames lists the topics the broker serves.
func OpenTopicNames(s *Service) []string {
	var out []string
	for _, t := range s.openTopics() {
		out = append(out, t.name.String())
	}
	return out
}

// SetUsageReadHook makes every read of the usage counters' recount call h
// with the topic first. The returned function removes it.
func SetUsageReadHook(h func(TopicName)) func() {
	usageReadHook.Store(&h)
	return func() { usageReadHook.Store(nil) }
}
