package billing

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"
)

// Sample is one scrape of one broker process: its counters since the
// process started and its sampled gauges, summed over the namespaces it
// serves for one cluster.
type Sample struct {
	// Source identifies the broker within the cluster (its address).
	Source string
	// Epoch identifies the broker process; a new process has a new epoch
	// and counters that start at zero.
	Epoch string
	// Counters are cumulative values of counter meters.
	Counters map[Meter]int64
	// Gauges are sampled values of gauge meters.
	Gauges map[Meter]int64
	// Durable marks a counter that outlives broker processes (a topic's,
	// reported by whichever broker serves the topic): a value below the
	// cursor in the same epoch is a stale or recounting report and is
	// ignored, and of several samples of the source in one scrape the
	// highest counts.
	Durable bool
}

// Cursor is the last counters seen of one source.
type Cursor struct {
	Epoch    string          `json:"epoch"`
	Counters map[Meter]int64 `json:"counters"`
}

// Total is the running total of one key.
type Total struct {
	Key      Key   `json:"key"`
	Quantity int64 `json:"quantity"`
	// Revision grows by one whenever Quantity changes.
	Revision int64 `json:"revision"`
	// Sent is the revision the control plane acknowledged.
	Sent int64 `json:"sent"`
}

// Record is a total to send.
type Record struct {
	Key            Key
	IdempotencyKey string
	Quantity       int64
	Revision       int64
}

// Rollup is the region agent's metering state: a cursor per broker and a
// total per (organization, cluster, meter, hour). See the package doc.
type Rollup struct {
	// Cursors by cluster, then by source.
	Cursors map[string]map[string]Cursor `json:"cursors"`
	// Totals by idempotency key.
	Totals map[string]*Total `json:"totals"`
}

// NewRollup returns an empty roll-up.
func NewRollup() *Rollup {
	return &Rollup{Cursors: map[string]map[string]Cursor{}, Totals: map[string]*Total{}}
}

// UnmarshalRollup decodes what Marshal wrote.
func UnmarshalRollup(b []byte) (*Rollup, error) {
	r := NewRollup()
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("billing: roll-up state: %w", err)
	}
	if r.Cursors == nil {
		r.Cursors = map[string]map[string]Cursor{}
	}
	if r.Totals == nil {
		r.Totals = map[string]*Total{}
	}
	return r, nil
}

// Marshal encodes the roll-up (JSON).
func (r *Rollup) Marshal() ([]byte, error) { return json.Marshal(r) }

// Observe adds one scrape of a cluster's brokers at now. Counter increments
// since each source's cursor go to now's hour; gauges summed over the
// samples raise the hour's peak. extra are gauges of the cluster itself
// (its brokers and bookies). Sources missing from samples keep their
// cursors (a broker that did not answer is counted at its next answer).
func (r *Rollup) Observe(org, cluster string, now time.Time, samples []Sample, extra map[Meter]int64) error {
	hour := Hour(now)
	cursors := r.Cursors[cluster]
	if cursors == nil {
		cursors = map[string]Cursor{}
		r.Cursors[cluster] = cursors
	}
	inc := map[Meter]int64{}
	gauges := map[Meter]int64{}
	for m, v := range extra {
		gauges[m] += v
	}
	for _, s := range samples {
		if s.Source == "" || s.Epoch == "" {
			return fmt.Errorf("billing: sample of cluster %s without source or epoch", cluster)
		}
		for m, v := range s.Counters {
			if v < 0 {
				return fmt.Errorf("billing: %s %s: negative counter %s", cluster, s.Source, m)
			}
		}
		if !s.Durable {
			if c, ok := cursors[s.Source]; ok && c.Epoch == s.Epoch {
				for m, v := range s.Counters {
					if v < c.Counters[m] {
						return fmt.Errorf("billing: %s %s: counter %s went back from %d to %d in epoch %s",
							cluster, s.Source, m, c.Counters[m], v, s.Epoch)
					}
				}
			}
		}
	}
	for _, s := range samples {
		prev, seen := cursors[s.Source]
		next := Cursor{Epoch: s.Epoch, Counters: map[Meter]int64{}}
		same := seen && prev.Epoch == s.Epoch
		for m, v := range s.Counters {
			d := v
			if same {
				d = v - prev.Counters[m]
				if d < 0 { // a durable counter's stale report
					d, v = 0, prev.Counters[m]
				}
			}
			inc[m] += d
			next.Counters[m] = v
		}
		if same {
			for m, v := range prev.Counters {
				if _, ok := next.Counters[m]; !ok {
					next.Counters[m] = v
				}
			}
		}
		cursors[s.Source] = next
		for m, v := range s.Gauges {
			gauges[m] += v
		}
	}
	for m, d := range inc {
		if d != 0 {
			r.bump(Key{org, cluster, m, hour}, func(q int64) int64 { return q + d })
		}
	}
	for m, v := range gauges {
		r.bump(Key{org, cluster, m, hour}, func(q int64) int64 { return max(q, v) })
	}
	return nil
}

// bump applies f to the key's total, creating it, and raises the revision
// if the total changed (a new total with quantity 0 is recorded too, so
// every observed hour has a record).
func (r *Rollup) bump(k Key, f func(int64) int64) {
	id := k.IdempotencyKey()
	t := r.Totals[id]
	if t == nil {
		t = &Total{Key: k}
		r.Totals[id] = t
		t.Quantity = f(0)
		t.Revision = 1
		return
	}
	if q := f(t.Quantity); q != t.Quantity {
		t.Quantity = q
		t.Revision++
	}
}

// Pending returns the totals whose newest revision is not acknowledged, in
// (hour, cluster, meter) order.
func (r *Rollup) Pending() []Record {
	var out []Record
	for id, t := range r.Totals {
		if t.Revision > t.Sent {
			out = append(out, Record{Key: t.Key, IdempotencyKey: id, Quantity: t.Quantity, Revision: t.Revision})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Key, out[j].Key
		if !a.Hour.Equal(b.Hour) {
			return a.Hour.Before(b.Hour)
		}
		if a.Cluster != b.Cluster {
			return a.Cluster < b.Cluster
		}
		return meterOrder(a.Meter) < meterOrder(b.Meter)
	})
	return out
}

// Ack records that the control plane holds revision of the key.
func (r *Rollup) Ack(idempotencyKey string, revision int64) {
	if t := r.Totals[idempotencyKey]; t != nil && revision > t.Sent {
		t.Sent = min(revision, t.Revision)
	}
}

// Prune forgets acknowledged totals of hours before cutoff, and the cursors
// of clusters not in keep (deleted clusters).
func (r *Rollup) Prune(cutoff time.Time, keep map[string]bool) {
	for id, t := range r.Totals {
		if t.Key.Hour.Before(cutoff) && t.Sent >= t.Revision {
			delete(r.Totals, id)
		}
	}
	if keep != nil {
		for c := range r.Cursors {
			if !keep[c] {
				delete(r.Cursors, c)
			}
		}
	}
}
