package broker

// Records the broker follows besides namespace policies (policywatch.go):
// topic-level policies (/admin/topic-policies) and resource groups
// (/admin/resourcegroups). Each is a recordView: every record under the
// prefix, read once at Start as of a store revision and kept current by a
// watch from the next revision; when the watch breaks, the view reads
// everything again and reports what changed. A topic opening while the
// view is live looks its records up in memory; while it is not, it reads
// the store (topicPolicies), so an open never depends on a broken watch.
// A change re-resolves the topic's limits and switches its deduplication
// (the topic-level deduplicationEnabled over the namespace's).
//
// Lock order: recordView.mu is a leaf; onChange runs without it.

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// recordView is every record under prefix, by key.
type recordView struct {
	prefix string
	mu     sync.Mutex
	live   bool
	recs   map[string][]byte
}

func (v *recordView) get(key string) ([]byte, bool, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	val, ok := v.recs[key]
	return val, ok, v.live
}

// load reads every record under v.prefix, as of the returned revision or
// later.
func (s *Service) loadRecords(ctx context.Context, prefix string) (map[string][]byte, int64, error) {
	rev, err := s.md.Revision(ctx)
	if err != nil {
		return nil, 0, err
	}
	recs := map[string][]byte{}
	var walk func(key string) error
	walk = func(key string) error {
		kids, err := s.md.Children(ctx, key)
		if err != nil {
			return err
		}
		for _, k := range kids {
			child := key + "/" + k
			kv, err := s.md.Get(ctx, child)
			switch {
			case err == nil:
				recs[child] = kv.Value
			case !errors.Is(err, metadata.ErrNotFound):
				return err
			}
			if err := walk(child); err != nil {
				return err
			}
		}
		return nil
	}
	return recs, rev, walk(prefix)
}

// followRecords fills v and keeps it current until the broker stops,
// calling onChange for every key whose value changed (nil: deleted) after
// the first load. The first load and watch happen before it returns (a
// failure is retried in the background).
func (s *Service) followRecords(v *recordView, onChange func(key string, val []byte)) {
	ctx, cancel := s.stopContext(0)
	w := s.startRecordWatch(ctx, v, onChange)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		for {
			if w != nil {
				for ev := range w.Events() {
					var val []byte
					if ev.Type != metadata.EventDelete {
						val = ev.Value
					}
					v.mu.Lock()
					if val == nil {
						delete(v.recs, ev.Key)
					} else {
						v.recs[ev.Key] = val
					}
					v.mu.Unlock()
					onChange(ev.Key, val)
				}
				err := w.Err()
				w.Close()
				v.mu.Lock()
				v.live = false
				v.mu.Unlock()
				if ctx.Err() != nil {
					return
				}
				s.log.Warn("policy watch ended; restarting", "prefix", v.prefix, "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(policyRewatchBackoff):
			}
			w = s.startRecordWatch(ctx, v, onChange)
		}
	}()
}

// startRecordWatch loads v's records, reports the differences from what
// it held, and watches from the load's revision on; nil on failure.
func (s *Service) startRecordWatch(ctx context.Context, v *recordView, onChange func(string, []byte)) metadata.Watcher {
	recs, rev, err := s.loadRecords(ctx, v.prefix)
	if err != nil {
		s.log.Warn("policy records unreadable; retrying", "prefix", v.prefix, "err", err)
		return nil
	}
	w, err := s.md.Watch(ctx, v.prefix, rev+1)
	if err != nil {
		s.log.Warn("policy watch failed; retrying", "prefix", v.prefix, "err", err)
		return nil
	}
	v.mu.Lock()
	old := v.recs
	v.recs, v.live = recs, true
	v.mu.Unlock()
	for k, val := range recs {
		if o, ok := old[k]; !ok || string(o) != string(val) {
			onChange(k, val)
		}
	}
	for k := range old {
		if _, ok := recs[k]; !ok {
			onChange(k, nil)
		}
	}
	return w
}

// topicPolicies returns the topic-level policies of t's base topic: the
// local scope's over the global scope's. nil when none are set.
func (s *Service) topicPolicies(t TopicName) map[string]json.RawMessage {
	local, global := topicPoliciesKey(t, false), topicPoliciesKey(t, true)
	read := func(key string) map[string]json.RawMessage {
		val, ok, live := s.tpv.get(key)
		if !live {
			ctx, cancel := s.stopContext(10 * time.Second)
			defer cancel()
			kv, err := s.md.Get(ctx, key)
			if err != nil {
				return nil
			}
			val, ok = kv.Value, true
		}
		if !ok {
			return nil
		}
		var m map[string]json.RawMessage
		json.Unmarshal(val, &m)
		return m
	}
	g, l := read(global), read(local)
	if len(g) == 0 {
		return l
	}
	out := maps.Clone(g)
	maps.Copy(out, l)
	return out
}

// onTopicPolicyChange applies a change of a topic-level policy record to
// the open topics (partitions included) it governs.
func (s *Service) onTopicPolicyChange(key string, _ []byte) {
	base := strings.TrimSuffix(key, "/global")
	s.refreshTopicLimits(func(t *Topic) bool {
		if topicPoliciesKey(t.name, false) != base {
			return false
		}
		t.refreshReplication()
		return true
	})
}

// startPolicyFollowers starts following topic policies and resource
// groups.
func (s *Service) startPolicyFollowers() {
	s.followRecords(&s.tpv, s.onTopicPolicyChange)
	s.followRecords(&s.rgv, s.onResourceGroupChange)
	s.followRecords(&s.cv, s.onClusterChange)
}
