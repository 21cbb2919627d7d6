package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/controlplane/store"
)

// RunUsage runs the conformance suite of store.UsageStore. open returns a
// new, empty Store each time; RunUsage closes it when the subtest ends.
func RunUsage(t *testing.T, open func(t *testing.T) store.Store) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s store.UsageStore)
	}{
		{"IngestAndDuplicates", testUsageIngest},
		{"Adjustments", testUsageAdjustments},
		{"ListAndSum", testUsageListSum},
		{"ConcurrentSameKey", testUsageConcurrent},
		{"Errors", testUsageErrors},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { _ = s.Close() })
			us, ok := s.(store.UsageStore)
			if !ok {
				t.Fatalf("%T does not implement store.UsageStore", s)
			}
			tc.fn(t, us)
		})
	}
}

var usageHour = time.Date(2026, 11, 30, 22, 0, 0, 0, time.UTC)

func usageRec(key, org, meter string, hour time.Time, total, rev int64) store.UsageRecord {
	return store.UsageRecord{Key: key, Org: org, Cluster: org + "/clusters/c", Region: "regions/r", Meter: meter,
		Hour: hour, Total: total, Revision: rev}
}

// latestWins is the decision rule the billing core makes when every
// period is open (or, with closed, every one is closed): a newer revision
// replaces the total.
func latestWins(closed bool) func(store.UsageRecord, store.UsageHead) (store.UsageChange, error) {
	return func(r store.UsageRecord, h store.UsageHead) (store.UsageChange, error) {
		if h.Exists && r.Revision <= h.Revision {
			return store.UsageChange{}, nil
		}
		ch := store.UsageChange{Apply: true, Delta: r.Total - h.Total, Period: r.Hour.Format("2006-01")}
		if closed {
			ch.Adjustment, ch.Period = true, "2026-12"
		}
		return ch, nil
	}
}

func ingest(t *testing.T, s store.UsageStore, closed bool, recs ...store.UsageRecord) []store.UsageChange {
	t.Helper()
	out, err := s.IngestUsage(ctxT(t), recs, latestWins(closed))
	if err != nil {
		t.Fatalf("IngestUsage: %v", err)
	}
	return out
}

func sums(t *testing.T, s store.UsageStore, q store.UsageQuery) map[string]int64 {
	t.Helper()
	got, err := s.SumUsage(ctxT(t), q)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, u := range got {
		out[fmt.Sprintf("%s %s %s", u.Region, u.Meter, u.Hour.Format("01-02T15"))] += u.Quantity
	}
	return out
}

func testUsageIngest(t *testing.T, s store.UsageStore) {
	org := "organizations/a"
	chs := ingest(t, s, false, usageRec("k1", org, "bytes_in", usageHour, 10, 1), usageRec("k2", org, "messages_in", usageHour, 1, 1))
	if len(chs) != 2 || !chs[0].Apply || chs[0].Delta != 10 {
		t.Fatalf("changes %+v", chs)
	}
	// Re-sent, then newer, then an older revision arriving late.
	ingest(t, s, false, usageRec("k1", org, "bytes_in", usageHour, 10, 1))
	ingest(t, s, false, usageRec("k1", org, "bytes_in", usageHour, 25, 3))
	if chs := ingest(t, s, false, usageRec("k1", org, "bytes_in", usageHour, 20, 2)); chs[0].Apply {
		t.Fatalf("an older revision applied: %+v", chs)
	}
	got := sums(t, s, store.UsageQuery{Org: org})
	if got["regions/r bytes_in 11-30T22"] != 25 || got["regions/r messages_in 11-30T22"] != 1 || len(got) != 2 {
		t.Fatalf("sums %v", got)
	}
	entries, _, err := s.ListUsage(ctxT(t), store.UsageQuery{Org: org})
	if err != nil || len(entries) != 2 {
		t.Fatalf("entries %+v %v", entries, err)
	}
	e := entries[0]
	if e.Key != "k1" || e.Quantity != 25 || e.Revision != 3 || e.Adjustment || e.Period != "2026-11" || !e.Hour.Equal(usageHour) ||
		e.Cluster != org+"/clusters/c" || e.Region != "regions/r" || e.UpdateTime.IsZero() {
		t.Fatalf("entry %+v", e)
	}
}

func testUsageAdjustments(t *testing.T, s store.UsageStore) {
	org := "organizations/a"
	ingest(t, s, false, usageRec("k1", org, "bytes_in", usageHour, 10, 1))
	// The period closed: later revisions become adjustment entries.
	ingest(t, s, true, usageRec("k1", org, "bytes_in", usageHour, 14, 2))
	ingest(t, s, true, usageRec("k1", org, "bytes_in", usageHour, 14, 2)) // resent
	ingest(t, s, true, usageRec("k1", org, "bytes_in", usageHour, 15, 3))
	entries, _, err := s.ListUsage(ctxT(t), store.UsageQuery{Org: org})
	if err != nil || len(entries) != 3 {
		t.Fatalf("entries %+v %v", entries, err)
	}
	if entries[0].Quantity != 10 || entries[0].Period != "2026-11" ||
		!entries[1].Adjustment || entries[1].Quantity != 4 || entries[1].Period != "2026-12" ||
		!entries[2].Adjustment || entries[2].Quantity != 1 {
		t.Fatalf("entries %+v", entries)
	}
	if got := sums(t, s, store.UsageQuery{Org: org, Period: "2026-11"}); got["regions/r bytes_in 11-30T22"] != 10 {
		t.Fatalf("November bills %v", got)
	}
	if got := sums(t, s, store.UsageQuery{Org: org, Period: "2026-12"}); got["regions/r bytes_in 11-30T22"] != 5 {
		t.Fatalf("December bills %v", got)
	}
	if got := sums(t, s, store.UsageQuery{Org: org}); got["regions/r bytes_in 11-30T22"] != 15 {
		t.Fatalf("the hour's usage %v", got)
	}
	periods, err := s.UsagePeriods(ctxT(t), org)
	if err != nil || len(periods) != 2 || periods[0] != "2026-11" || periods[1] != "2026-12" {
		t.Fatalf("periods %v %v", periods, err)
	}
}

func testUsageListSum(t *testing.T, s store.UsageStore) {
	a, b := "organizations/a", "organizations/b"
	var recs []store.UsageRecord
	for h := 0; h < 30; h++ {
		hour := usageHour.Add(time.Duration(h) * time.Hour)
		recs = append(recs, usageRec(fmt.Sprintf("a-in-%d", h), a, "bytes_in", hour, int64(h+1), 1),
			usageRec(fmt.Sprintf("a-out-%d", h), a, "bytes_out", hour, 2, 1),
			usageRec(fmt.Sprintf("b-in-%d", h), b, "bytes_in", hour, 1000, 1))
	}
	ingest(t, s, false, recs...)
	// Pagination visits every entry of a once, in creation order.
	var all []store.UsageEntry
	tok := ""
	for {
		page, next, err := s.ListUsage(ctxT(t), store.UsageQuery{Org: a, PageSize: 7, PageToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if next == "" {
			break
		}
		tok = next
	}
	if len(all) != 60 {
		t.Fatalf("listed %d entries of a, want 60", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i].Seq <= all[i-1].Seq || all[i].Org != a {
			t.Fatalf("entry %d out of order or of another organization: %+v", i, all[i])
		}
	}
	if _, _, err := s.ListUsage(ctxT(t), store.UsageQuery{Org: b, PageToken: tok + "x"}); !errors.Is(err, store.ErrInvalidPageToken) {
		t.Errorf("a bad token: %v", err)
	}
	page, next, err := s.ListUsage(ctxT(t), store.UsageQuery{Org: a, PageSize: 1})
	if err != nil || next == "" || len(page) != 1 {
		t.Fatal(page, next, err)
	}
	if _, _, err := s.ListUsage(ctxT(t), store.UsageQuery{Org: b, PageToken: next}); !errors.Is(err, store.ErrInvalidPageToken) {
		t.Errorf("another query's token: %v", err)
	}
	// Filters.
	start, end := usageHour.Add(2*time.Hour), usageHour.Add(5*time.Hour)
	got := sums(t, s, store.UsageQuery{Org: a, Meter: "bytes_in", Start: start, End: end})
	if len(got) != 3 || got["regions/r bytes_in 12-01T00"] != 3 || got["regions/r bytes_in 12-01T02"] != 5 {
		t.Fatalf("filtered sums %v", got)
	}
	if got := sums(t, s, store.UsageQuery{Org: a, Cluster: "organizations/x/clusters/c"}); len(got) != 0 {
		t.Fatalf("sums of another cluster %v", got)
	}
	if got := sums(t, s, store.UsageQuery{Org: a, Period: "2026-11"}); len(got) != 4 {
		t.Fatalf("November has %d sums, want 4 (two hours, two meters)", len(got))
	}
}

// testUsageConcurrent sends the same records from several goroutines at
// once, as a restarted agent racing its own retries would: each key counts
// its newest total once.
func testUsageConcurrent(t *testing.T, s store.UsageStore) {
	org := "organizations/a"
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rev := int64(1); rev <= 5; rev++ {
				if _, err := s.IngestUsage(ctxT(t), []store.UsageRecord{usageRec("k", org, "messages_in", usageHour, rev*10, rev)}, latestWins(false)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := sums(t, s, store.UsageQuery{Org: org}); got["regions/r messages_in 11-30T22"] != 50 {
		t.Fatalf("sums %v, want 50", got)
	}
}

func testUsageErrors(t *testing.T, s store.UsageStore) {
	boom := errors.New("refused")
	_, err := s.IngestUsage(ctxT(t), []store.UsageRecord{usageRec("k1", "organizations/a", "m", usageHour, 1, 1), usageRec("k2", "organizations/a", "m", usageHour, 1, 1)},
		func(r store.UsageRecord, h store.UsageHead) (store.UsageChange, error) {
			if r.Key == "k2" {
				return store.UsageChange{}, boom
			}
			return latestWins(false)(r, h)
		})
	if !errors.Is(err, boom) {
		t.Fatalf("decide's error: %v", err)
	}
	if got := sums(t, s, store.UsageQuery{Org: "organizations/a"}); len(got) != 0 {
		t.Fatalf("a failed batch wrote %v", got)
	}
	if _, err := s.IngestUsage(ctxT(t), []store.UsageRecord{{Org: "organizations/a", Meter: "m"}}, latestWins(false)); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("a record without a key: %v", err)
	}
	if _, _, err := s.ListUsage(ctxT(t), store.UsageQuery{}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("a query without an organization: %v", err)
	}
}
