package ledger

import (
	"bytes"
	"testing"
	"time"
)

// TestBacklogReadRate: with the cache off, every read goes to the bookies
// and is paced at the factory's BacklogReadRate; the same read through an
// unpaced factory is not. (Only lower bounds on time: a slow machine
// cannot make it fail.)
func TestBacklogReadRate(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	defs := testConfig()
	defs.CacheSize = -1
	defs.RetentionTime, defs.RetentionSize = -1, -1 // no cursor: keep what is written
	const (
		entries = 200
		size    = 1000
		rate    = 400_000 // bytes/s: 200 KB take >= 0.5 s less the burst
	)
	data := bytes.Repeat([]byte("x"), size)
	writer := c.newFactory(defs)
	ml := openML(t, writer, "pace", nil)
	addSame(t, ml, data, entries)
	if err := ml.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	timedRead := func(f *Factory) time.Duration {
		t.Helper()
		ml, err := f.OpenExisting(ctxT(t), "pace", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ml.Close(ctxT(t))
		start := time.Now()
		if n := len(readAll(t, ml)); n != entries {
			t.Fatalf("read %d entries, want %d", n, entries)
		}
		return time.Since(start)
	}
	pf, err := NewFactory(FactoryConfig{Client: c.newClient(), Metadata: c.md, Defaults: defs, Logger: quiet, BacklogReadRate: rate})
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	paced := timedRead(pf)
	if want := time.Duration(float64(entries*size)/rate*float64(time.Second)) - paceBurst - 20*time.Millisecond; paced < want {
		t.Fatalf("paced read of %d bytes at %d B/s took %v, want at least %v", entries*size, rate, paced, want)
	}
	t.Logf("paced read: %v; unpaced: %v", paced, timedRead(writer))
}

// TestBacklogReadRateCached: a backlog the cache still holds is paced too,
// once it lies more than catchupLag behind the newest entry (it was read
// from memory at full speed whatever the pace before); a reader within
// catchupLag of the end is never charged.
func TestBacklogReadRateCached(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	defs := testConfig()
	defs.MaxEntriesPerLedger = 100_000
	defs.RetentionTime, defs.RetentionSize = -1, -1
	const (
		entries = 3000
		size    = 1000
		rate    = 2_000_000 // bytes/s
	)
	f, err := NewFactory(FactoryConfig{Client: c.newClient(), Metadata: c.md, Defaults: defs, Logger: quiet, BacklogReadRate: rate})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ml := openML(t, f, "pace-cached", nil)
	defer ml.Close(ctxT(t))
	data := bytes.Repeat([]byte("x"), size)
	addSame(t, ml, data, entries)
	charged := func() bool {
		f.pacer.mu.Lock()
		defer f.pacer.mu.Unlock()
		return !f.pacer.next.IsZero()
	}

	// A tailing reader: the newest 500 KB.
	last := ml.LastConfirmed()
	ents, err := ml.Read(ctxT(t), Position{last.LedgerID, last.EntryID - 499}, 1000, 0)
	if err != nil || len(ents) != 500 {
		t.Fatalf("tail read: %d entries, %v", len(ents), err)
	}
	if charged() {
		t.Fatal("a read within catchupLag of the newest entry was charged to the pacer")
	}

	// A catch-up reader: everything, from memory.
	start := time.Now()
	if n := len(readAll(t, ml)); n != entries {
		t.Fatalf("read %d entries, want %d", n, entries)
	}
	elapsed := time.Since(start)
	if !charged() {
		t.Fatal("a catch-up read from the cache was not charged to the pacer")
	}
	behind := entries*size - catchupLag
	if want := time.Duration(float64(behind)/rate*float64(time.Second)) - paceBurst - 20*time.Millisecond; elapsed < want {
		t.Fatalf("catch-up read of %d cached bytes behind the lag at %d B/s took %v, want at least %v", behind, rate, elapsed, want)
	}
}

// TestBacklogReadRateEntriesOverSlice: entries larger than a paced Read's
// slice of the rate are still delivered at about the rate: a paced Read
// reads from the bookies about as many entries as it returns and is
// charged only for those (it read a whole chunk of 64 to return one and
// was charged for all of them, so it ran ~50x under the rate; e2e
// TestBacklogReadRateFlag timed out).
func TestBacklogReadRateEntriesOverSlice(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	defs := testConfig()
	defs.CacheSize = -1
	defs.MaxEntriesPerLedger = 1000 // one ledger: bookie reads of up to a whole chunk
	defs.RetentionTime, defs.RetentionSize = -1, -1
	const (
		entries = 60
		size    = 8000    // 4x the slice
		rate    = 400_000 // bytes/s: 5 ms of it is 2000 bytes; the whole read takes ~1.2 s
	)
	writer := c.newFactory(defs)
	ml := openML(t, writer, "pace-big", nil)
	addSame(t, ml, bytes.Repeat([]byte("y"), size), entries)
	if err := ml.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	pf, err := NewFactory(FactoryConfig{Client: c.newClient(), Metadata: c.md, Defaults: defs, Logger: quiet, BacklogReadRate: rate})
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	pml, err := pf.OpenExisting(ctxT(t), "pace-big", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pml.Close(ctxT(t))
	// Reads as a dispatcher does them: up to 100 entries each.
	start := time.Now()
	n := 0
	for pos := Earliest; ; {
		ents, err := pml.Read(ctxT(t), pos, 100, 0)
		if err != nil {
			t.Fatalf("Read from %v: %v", pos, err)
		}
		if len(ents) == 0 {
			break
		}
		n += len(ents)
		pos = pml.Next(ents[len(ents)-1].Pos)
	}
	took := time.Since(start)
	if n != entries {
		t.Fatalf("read %d entries, want %d", n, entries)
	}
	expect := time.Duration(float64(entries*size) / rate * float64(time.Second))
	if took < expect-paceBurst-20*time.Millisecond || took > 10*time.Second {
		t.Fatalf("paced read of %d bytes at %d B/s took %v, want about %v", entries*size, rate, took, expect)
	}
	t.Logf("paced read of %d entries of %d bytes: %v (rate says %v)", entries, size, took, expect)
}

// addSame appends data n times, pipelined, and waits for every callback.
func addSame(t *testing.T, ml *ManagedLedger, data []byte, n int) {
	t.Helper()
	done := make(chan error, n)
	for range n {
		ml.AddEntry(data, func(_ Position, err error) { done <- err })
	}
	for range n {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
