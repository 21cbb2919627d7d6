package memstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/memstore"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/metadatatest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func harness() metadatatest.Harness {
	return metadatatest.Harness{
		New: func(t *testing.T) metadata.Store {
			s := memstore.New()
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		ExpireSession: func(t *testing.T, s metadata.Store, sess metadata.Session) {
			if err := s.(*memstore.Store).ExpireSession(sess.ID()); err != nil {
				t.Fatalf("ExpireSession: %v", err)
			}
		},
		Compact: func(t *testing.T, s metadata.Store, rev int64) {
			if err := s.(*memstore.Store).Compact(rev); err != nil {
				t.Fatalf("Compact: %v", err)
			}
		},
	}
}

func TestConformance(t *testing.T) {
	metadatatest.Run(t, harness())
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// TestBoundedHistory: only HistorySize revisions are kept for resumption,
// and a watcher that falls behind them ends with ErrCompacted.
func TestBoundedHistory(t *testing.T) {
	s, err := memstore.NewWithOptions(memstore.Options{HistorySize: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := ctx(t)
	// A watcher that never reads.
	slow, err := s.Watch(c, "/h", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	var last metadata.Version
	for range 10 {
		if last, err = s.Put(c, "/h/k", []byte("x"), metadata.AnyVersion); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Watch(c, "/h", 1); !errors.Is(err, metadata.ErrCompacted) {
		t.Fatalf("Watch from evicted revision: %v, want ErrCompacted", err)
	}
	// The slow watcher got the first event into its hands before eviction
	// (it was blocked sending it); then it must fail rather than skip.
	var n int
	for range slow.Events() {
		n++
	}
	if !errors.Is(slow.Err(), metadata.ErrCompacted) {
		t.Fatalf("slow watcher Err = %v after %d events, want ErrCompacted", slow.Err(), n)
	}
	// The oldest kept revision still resumes.
	w, err := s.Watch(c, "/h", int64(last)-3)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := range 4 {
		select {
		case ev := <-w.Events():
			if ev.Revision != int64(last)-3+int64(i) {
				t.Fatalf("event %d at revision %d", i, ev.Revision)
			}
		case <-c.Done():
			t.Fatal("timeout")
		}
	}
}

// TestKeepAliveSuspended: a session whose keepalive stops expires by the
// clock after its TTL; one whose keepalive runs outlives its TTL.
func TestKeepAliveSuspended(t *testing.T) {
	s, err := memstore.NewWithOptions(memstore.Options{TickInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := ctx(t)
	const ttl = 100 * time.Millisecond
	live, err := s.NewSession(c, ttl)
	if err != nil {
		t.Fatal(err)
	}
	stalled, err := s.NewSession(c, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := live.CreateEphemeral(c, "/ka/live", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := stalled.CreateEphemeral(c, "/ka/stalled", nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := s.SuspendKeepAlive(stalled.ID()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stalled.Done():
	case <-c.Done():
		t.Fatal("stalled session never expired")
	}
	if held := time.Since(start); held < ttl {
		t.Fatalf("session expired after %v, before its TTL %v", held, ttl)
	}
	if _, err := s.Get(c, "/ka/stalled"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("stalled key: %v", err)
	}
	// The live session has now outlived its TTL several times over? Wait
	// until it has, by the clock, then check it is still there.
	for time.Since(start) < 3*ttl {
		time.Sleep(ttl)
	}
	select {
	case <-live.Done():
		t.Fatal("session with a running keepalive expired")
	default:
	}
	if _, err := s.Get(c, "/ka/live"); err != nil {
		t.Fatalf("live key: %v", err)
	}
	if err := s.ExpireSession(stalled.ID()); !errors.Is(err, memstore.ErrUnknownSession) {
		t.Fatalf("ExpireSession of an ended session: %v", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	if _, err := memstore.NewWithOptions(memstore.Options{HistorySize: -1}); !errors.Is(err, memstore.ErrBadOptions) {
		t.Fatalf("err = %v", err)
	}
}
