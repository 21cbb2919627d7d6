package billing

import (
	"errors"
	"testing"
	"time"
)

const (
	org = "organizations/acme"
	cl  = "organizations/acme/clusters/prod"
)

var t0 = time.Date(2026, 12, 3, 10, 15, 0, 0, time.UTC)

func sample(src, epoch string, in, bytes int64) Sample {
	return Sample{Source: src, Epoch: epoch, Counters: map[Meter]int64{MessagesIn: in, BytesIn: bytes}}
}

func quantity(r *Rollup, m Meter, hour time.Time) (int64, bool) {
	t := r.Totals[Key{org, cl, m, hour}.IdempotencyKey()]
	if t == nil {
		return 0, false
	}
	return t.Quantity, true
}

func TestRollupCounters(t *testing.T) {
	h10, h11 := Hour(t0), Hour(t0).Add(time.Hour)
	steps := []struct {
		at      time.Time
		samples []Sample
		want10  int64 // messages_in of 10:00
		want11  int64 // of 11:00
	}{
		{t0, []Sample{sample("b1", "e1", 5, 50)}, 5, 0},                                                    // first sight: everything since start
		{t0.Add(time.Minute), []Sample{sample("b1", "e1", 8, 80)}, 8, 0},                                   // +3
		{t0.Add(2 * time.Minute), []Sample{sample("b1", "e1", 8, 80)}, 8, 0},                               // nothing new
		{t0.Add(3 * time.Minute), nil, 8, 0},                                                               // broker did not answer
		{t0.Add(4 * time.Minute), []Sample{sample("b1", "e2", 2, 20)}, 10, 0},                              // restarted: new epoch counts from zero
		{t0.Add(5 * time.Minute), []Sample{sample("b1", "e2", 4, 40), sample("b2", "f1", 1, 1)}, 13, 0},    // a second broker
		{t0.Add(50 * time.Minute), []Sample{sample("b1", "e2", 10, 100), sample("b2", "f1", 1, 1)}, 13, 6}, // next hour
	}
	r := NewRollup()
	for i, s := range steps {
		if err := r.Observe(org, cl, s.at, s.samples, nil); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		// Persist and reload between steps, as the agent does.
		raw, err := r.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if r, err = UnmarshalRollup(raw); err != nil {
			t.Fatal(err)
		}
		got10, _ := quantity(r, MessagesIn, h10)
		got11, _ := quantity(r, MessagesIn, h11)
		if got10 != s.want10 || got11 != s.want11 {
			t.Fatalf("step %d: 10:00=%d 11:00=%d, want %d %d", i, got10, got11, s.want10, s.want11)
		}
	}
	if err := r.Observe(org, cl, t0.Add(51*time.Minute), []Sample{sample("b1", "e2", 9, 100)}, nil); err == nil {
		t.Error("a counter going back within an epoch was accepted")
	}
	if err := r.Observe(org, cl, t0, []Sample{{Source: "b1"}}, nil); err == nil {
		t.Error("a sample without an epoch was accepted")
	}
}

// TestRollupReplay: the agent crashing before it persisted a scrape sees the
// same increments again at the next scrape; crashing after sees none. Either
// way each increment is counted once.
func TestRollupReplay(t *testing.T) {
	r := NewRollup()
	r.Observe(org, cl, t0, []Sample{sample("b1", "e1", 5, 50)}, nil)
	saved, _ := r.Marshal()
	r.Observe(org, cl, t0.Add(time.Second), []Sample{sample("b1", "e1", 9, 90)}, nil) // lost with the crash
	r, _ = UnmarshalRollup(saved)
	r.Observe(org, cl, t0.Add(2*time.Second), []Sample{sample("b1", "e1", 12, 120)}, nil)
	if q, _ := quantity(r, MessagesIn, Hour(t0)); q != 12 {
		t.Fatalf("messages_in = %d, want 12", q)
	}
	if q, _ := quantity(r, BytesIn, Hour(t0)); q != 120 {
		t.Fatalf("bytes_in = %d, want 120", q)
	}
}

func TestRollupGauges(t *testing.T) {
	r := NewRollup()
	g := func(src string, storage int64) Sample {
		return Sample{Source: src, Epoch: "e", Gauges: map[Meter]int64{StorageBytes: storage}}
	}
	extra := map[Meter]int64{BrokerHours: 2, BookieHours: 3}
	r.Observe(org, cl, t0, []Sample{g("b1", 100), g("b2", 50)}, extra)
	r.Observe(org, cl, t0.Add(time.Minute), []Sample{g("b1", 120)}, extra) // b2 missed: the peak stays
	r.Observe(org, cl, t0.Add(2*time.Minute), []Sample{g("b1", 120), g("b2", 60)}, extra)
	for m, want := range map[Meter]int64{StorageBytes: 180, BrokerHours: 2, BookieHours: 3} {
		if q, _ := quantity(r, m, Hour(t0)); q != want {
			t.Errorf("%s = %d, want %d", m, q, want)
		}
	}
}

func TestRollupSendAndAck(t *testing.T) {
	r := NewRollup()
	r.Observe(org, cl, t0, []Sample{sample("b1", "e1", 5, 50)}, nil)
	p := r.Pending()
	if len(p) != 2 || p[0].Key.Meter != MessagesIn || p[0].Revision != 1 || p[0].Quantity != 5 {
		t.Fatalf("pending %+v", p)
	}
	for _, rec := range p {
		r.Ack(rec.IdempotencyKey, rec.Revision)
	}
	if p := r.Pending(); len(p) != 0 {
		t.Fatalf("pending after ack: %+v", p)
	}
	r.Observe(org, cl, t0.Add(time.Second), []Sample{sample("b1", "e1", 5, 50)}, nil) // unchanged
	if p := r.Pending(); len(p) != 0 {
		t.Fatalf("an unchanged total is pending again: %+v", p)
	}
	r.Observe(org, cl, t0.Add(2*time.Second), []Sample{sample("b1", "e1", 7, 50)}, nil)
	p = r.Pending()
	if len(p) != 1 || p[0].Revision != 2 || p[0].Quantity != 7 {
		t.Fatalf("pending after a change %+v", p)
	}
	r.Ack(p[0].IdempotencyKey, 1) // an older ack changes nothing
	if len(r.Pending()) != 1 {
		t.Fatal("an old ack cleared a newer revision")
	}
	// Prune keeps unacknowledged totals.
	r.Prune(t0.Add(24*time.Hour), map[string]bool{cl: true})
	if len(r.Totals) != 1 || len(r.Cursors) != 1 {
		t.Fatalf("after prune: %d totals %d cursors", len(r.Totals), len(r.Cursors))
	}
	r.Ack(p[0].IdempotencyKey, 2)
	r.Prune(t0.Add(24*time.Hour), map[string]bool{})
	if len(r.Totals) != 0 || len(r.Cursors) != 0 {
		t.Fatalf("after the last prune: %d totals %d cursors", len(r.Totals), len(r.Cursors))
	}
}

func TestIdempotencyKey(t *testing.T) {
	k := Key{org, cl, BytesIn, Hour(t0)}
	if k.IdempotencyKey() != (Key{org, cl, BytesIn, Hour(t0).In(time.FixedZone("x", 7200))}).IdempotencyKey() {
		t.Error("the key depends on the time zone")
	}
	seen := map[string]Key{}
	for _, k := range []Key{k, {org, cl, BytesOut, Hour(t0)}, {org, cl + "2", BytesIn, Hour(t0)},
		{org + "2", cl, BytesIn, Hour(t0)}, {org, cl, BytesIn, Hour(t0).Add(time.Hour)}} {
		id := k.IdempotencyKey()
		if prev, dup := seen[id]; dup {
			t.Errorf("%+v and %+v share a key", prev, k)
		}
		seen[id] = k
	}
	if len(k.IdempotencyKey()) != 64 {
		t.Errorf("key %q", k.IdempotencyKey())
	}
}

func TestIngest(t *testing.T) {
	grace := 48 * time.Hour
	hour := time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC)
	key := Key{org, cl, BytesIn, hour}
	nov, dec := PeriodOf(hour), PeriodOf(hour.Add(time.Hour))
	open := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)  // November in its grace period
	closed := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC) // November closed
	for _, c := range []struct {
		name string
		head Head
		rec  Received
		now  time.Time
		want Decision
		err  bool
	}{
		{"first record", Head{}, Received{key, 10, 1}, open, Decision{Update, 10, nov}, false},
		{"newer total", Head{true, 10, 1}, Received{key, 25, 2}, open, Decision{Update, 15, nov}, false},
		{"resent", Head{true, 25, 2}, Received{key, 25, 2}, open, Decision{Action: Duplicate}, false},
		{"older revision", Head{true, 25, 2}, Received{key, 10, 1}, open, Decision{Action: Duplicate}, false},
		{"late, closed period", Head{true, 25, 2}, Received{key, 30, 3}, closed, Decision{Adjust, 5, dec}, false},
		{"late and first", Head{}, Received{key, 7, 1}, closed, Decision{Adjust, 7, dec}, false},
		{"gauge lowered", Head{true, 25, 2}, Received{key, 20, 3}, open, Decision{Update, -5, nov}, false},
		{"at the close instant", Head{}, Received{key, 1, 1}, nov.ClosesAt(grace), Decision{Adjust, 1, dec}, false},
		{"negative", Head{}, Received{key, -1, 1}, open, Decision{}, true},
		{"revision 0", Head{}, Received{key, 1, 0}, open, Decision{}, true},
		{"bad meter", Head{}, Received{Key{org, cl, "x", hour}, 1, 1}, open, Decision{}, true},
		{"not on the hour", Head{}, Received{Key{org, cl, BytesIn, hour.Add(time.Minute)}, 1, 1}, open, Decision{}, true},
		{"no cluster", Head{}, Received{Key{org, "", BytesIn, hour}, 1, 1}, open, Decision{}, true},
		{"future", Head{}, Received{key, 1, 1}, hour.Add(-2 * time.Hour), Decision{}, true},
	} {
		d, err := Ingest(c.head, c.rec, c.now, grace)
		if c.err {
			if !errors.Is(err, ErrBadRecord) {
				t.Errorf("%s: %v, want ErrBadRecord", c.name, err)
			}
			continue
		}
		if err != nil || d != c.want {
			t.Errorf("%s: %+v %v, want %+v", c.name, d, err, c.want)
		}
	}
}

func TestUsageReportSamples(t *testing.T) {
	r := UsageReport{Epoch: "e", Namespaces: []NamespaceUsage{
		{Tenant: "a", Namespace: "x", MessagesIn: 1, BytesIn: 10, MessagesOut: 2, BytesOut: 20, NonPersistentMessagesIn: 1,
			NonPersistentBytesIn: 10, BytesReplicatedOut: 5, StorageBytes: 100, Topics: 1, Partitions: 3},
		{Tenant: "b", Namespace: "y", MessagesIn: 4, BytesIn: 40, NonPersistentMessagesOut: 3, NonPersistentBytesOut: 30,
			BytesReplicatedOut: 1, StorageBytes: 7, Topics: 2, Partitions: 2},
	}, Sources: []SourceUsage{
		{Source: "in t", Epoch: "1:-1", MessagesIn: 7, BytesIn: 70},
		{Source: "out t s", Epoch: "1:-1", MessagesOut: 6, BytesOut: 60},
	}}
	ss := r.Samples("b1")
	if len(ss) != 3 {
		t.Fatalf("samples %+v", ss)
	}
	s := ss[0]
	if s.Source != "b1" || s.Epoch != "e" || s.Durable {
		t.Fatalf("sample %+v", s)
	}
	// The process sample bills only non-persistent topics' in and out.
	for m, want := range map[Meter]int64{MessagesIn: 1, BytesIn: 10, MessagesOut: 3, BytesOut: 30, BytesReplicatedOut: 6} {
		if s.Counters[m] != want {
			t.Errorf("counter %s = %d, want %d", m, s.Counters[m], want)
		}
	}
	for m, want := range map[Meter]int64{StorageBytes: 107, Topics: 3, Partitions: 5} {
		if s.Gauges[m] != want {
			t.Errorf("gauge %s = %d, want %d", m, s.Gauges[m], want)
		}
	}
	in, out := ss[1], ss[2]
	if !in.Durable || in.Source != "in t" || in.Counters[MessagesIn] != 7 || in.Counters[BytesIn] != 70 || len(in.Counters) != 2 {
		t.Errorf("in sample %+v", in)
	}
	if !out.Durable || out.Counters[MessagesOut] != 6 || out.Counters[BytesOut] != 60 || len(out.Counters) != 2 {
		t.Errorf("out sample %+v", out)
	}
}

// A durable counter is recounted after a crash from an older checkpoint
// and may be reported by two brokers at once (a topic's old and new
// owner): the roll-up keeps the highest value of an epoch and bills each
// increment once; a new epoch (the topic created again) counts from zero.
func TestRollupDurableSources(t *testing.T) {
	r := NewRollup()
	h := time.Date(2026, 12, 3, 13, 0, 0, 0, time.UTC)
	d := func(src, epoch string, v int64) Sample {
		return Sample{Source: src, Epoch: epoch, Durable: true, Counters: map[Meter]int64{MessagesIn: v}}
	}
	steps := []struct {
		samples []Sample
		want    int64 // the hour's messages_in after the step
	}{
		{[]Sample{d("in t", "1:-1", 10)}, 10},
		{[]Sample{d("in t", "1:-1", 25)}, 25},
		{[]Sample{d("in t", "1:-1", 18)}, 25},                        // a restarted broker recounting
		{[]Sample{d("in t", "1:-1", 25), d("in t", "1:-1", 30)}, 30}, // old and new owner in one scrape
		{[]Sample{d("in t", "1:-1", 30), d("in t", "1:-1", 22)}, 30},
		{[]Sample{d("in t", "1:-1", 31)}, 31},
		{nil, 31},                             // nobody serves the topic: its cursor stays
		{[]Sample{d("in t", "1:-1", 40)}, 40}, // counted at its next answer
		{[]Sample{d("in t", "9:-1", 5)}, 45},  // created again: a new epoch from zero
		{[]Sample{d("in u", "3:-1", 2)}, 47},  // another topic
		{[]Sample{d("in t", "9:-1", 4)}, 47},
	}
	for i, st := range steps {
		if err := r.Observe("organizations/o", "organizations/o/clusters/c", h.Add(time.Duration(i)*time.Minute), st.samples, nil); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		k := Key{"organizations/o", "organizations/o/clusters/c", MessagesIn, h}
		if got := r.Totals[k.IdempotencyKey()].Quantity; got != st.want {
			t.Fatalf("step %d: messages_in %d, want %d", i, got, st.want)
		}
	}
	// A process counter going back in its epoch is still refused, and
	// refused whole: nothing of the scrape is applied.
	p := Sample{Source: "b", Epoch: "e", Counters: map[Meter]int64{BytesReplicatedOut: 5}}
	if err := r.Observe("organizations/o", "organizations/o/clusters/c", h, []Sample{p}, nil); err != nil {
		t.Fatal(err)
	}
	p.Counters = map[Meter]int64{BytesReplicatedOut: 4}
	if err := r.Observe("organizations/o", "organizations/o/clusters/c", h, []Sample{d("in t", "9:-1", 100), p}, nil); err == nil {
		t.Fatal("a process counter going back was accepted")
	}
	if c := r.Cursors["organizations/o/clusters/c"]["in t"]; c.Counters[MessagesIn] != 5 {
		t.Fatalf("a refused scrape moved a cursor: %+v", c)
	}
}
