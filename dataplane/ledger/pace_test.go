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
	done := make(chan error, entries)
	for range entries {
		ml.AddEntry(data, func(_ Position, err error) { done <- err })
	}
	for range entries {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
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
