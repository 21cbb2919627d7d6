package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

func startBatchTestStore(t *testing.T, maxTxnOps uint) *Embedded {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := StartEmbedded(ctx, EmbeddedConfig{Dir: t.TempDir(), UnsafeNoFsync: true, Logger: zap.NewNop(), maxTxnOps: maxTxnOps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// createConcurrently creates n keys from n goroutines at once and checks
// every result against a read of the key.
func createConcurrently(t *testing.T, s *Store, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	vers := make([]metadata.Version, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			k := fmt.Sprintf("/t/k%d", i)
			vers[i], errs[i] = s.CreateUnless(ctx, k, []byte(k), fmt.Sprintf("/guard/k%d", i))
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("create %d: %v", i, errs[i])
		}
		kv, err := s.Get(ctx, fmt.Sprintf("/t/k%d", i))
		if err != nil || kv.Version != vers[i] || string(kv.Value) != fmt.Sprintf("/t/k%d", i) {
			t.Fatalf("key %d: read %q at %d (%v), create returned %d", i, kv.Value, kv.Version, err, vers[i])
		}
	}
}

// TestWritesBatched: concurrent creations share transactions, and each
// still gets its own key's version.
func TestWritesBatched(t *testing.T) {
	e := startBatchTestStore(t, 0)
	const n = 256
	createConcurrently(t, e.Store, n)
	if c := e.Store.batch.commits.Load(); c > n/2 {
		t.Fatalf("%d creations took %d transactions: not batched", n, c)
	}
}

// TestBatchRefusedForSizeRetriesAlone: a server allowing fewer operations
// per transaction than a batch holds makes the store send the writes one
// by one and lower its batch limit.
func TestBatchRefusedForSizeRetriesAlone(t *testing.T) {
	e := startBatchTestStore(t, 4)
	createConcurrently(t, e.Store, 64)
	e.Store.mu.Lock()
	limit := e.Store.batch.maxWrites
	e.Store.mu.Unlock()
	if limit > 4 {
		t.Fatalf("batch limit %d after the server refused batches over 4 operations", limit)
	}
}

// TestTakeBatchConflicts: a batch equals its writes run one after another
// in queue order: a write that compares or writes a key an earlier queued
// write writes, or writes a key an earlier waiting write compares, waits
// for a later batch; writes whose caller gave up are not sent.
func TestTakeBatchConflicts(t *testing.T) {
	s := &Store{}
	bg := context.Background()
	gone, cancel := context.WithCancel(bg)
	cancel()
	w := func(ctx context.Context, key string, guards ...string) *write {
		return &write{ctx: ctx, key: key, guards: guards, done: make(chan struct{})}
	}
	a := w(bg, "a")
	bGuardA := w(bg, "b", "a") // compares a, written by the batch
	c := w(bg, "c")            // independent
	b := w(bg, "b")            // writes b after the deferred write of b
	dGuardC := w(bg, "d", "c") // compares c
	eGuardX := w(bg, "e", "x") // compares x: shared guards are fine
	fGuardX := w(bg, "f", "x") //
	x := w(bg, "x")            // written after e and f compared it: their order
	abandoned := w(gone, "g")  // caller gone
	cAgain := w(bg, "c")       // c twice
	s.batch.queue = []*write{a, bGuardA, c, b, dGuardC, eGuardX, fGuardX, x, abandoned, cAgain}

	batch := s.takeBatchLocked()
	if got, want := keysOf(batch), "a c e f x"; got != want {
		t.Fatalf("first batch %q, want %q", got, want)
	}
	if got, want := keysOf(s.batch.queue), "b b d c"; got != want {
		t.Fatalf("left %q, want %q", got, want)
	}
	select {
	case <-abandoned.done:
		if !errors.Is(abandoned.err, context.Canceled) {
			t.Fatalf("abandoned write finished with %v", abandoned.err)
		}
	default:
		t.Fatal("abandoned write not finished")
	}
	if got, want := keysOf(s.takeBatchLocked()), "b d c"; got != want {
		t.Fatalf("second batch %q, want %q", got, want)
	}
	if got, want := keysOf(s.takeBatchLocked()), "b"; got != want {
		t.Fatalf("third batch %q, want %q", got, want)
	}

	// Limits: writes beyond maxWrites or maxBatchBytes wait.
	s.batch.maxWrites = 2
	big := w(bg, "big")
	big.size = maxBatchBytes + 1
	s.batch.queue = []*write{w(bg, "1"), big, w(bg, "2"), w(bg, "3")}
	if got, want := keysOf(s.takeBatchLocked()), "1 2"; got != want {
		t.Fatalf("limited batch %q, want %q", got, want)
	}
	if got, want := keysOf(s.takeBatchLocked()), "big"; got != want {
		t.Fatalf("a write over the byte limit goes alone: %q, want %q", got, want)
	}
}

func keysOf(ws []*write) string {
	s := ""
	for i, w := range ws {
		if i > 0 {
			s += " "
		}
		s += w.key
	}
	return s
}

// TestCloseWhileBatching: closing the store while creators keep writing
// ends every call (success or ErrClosed) and the committer goroutine.
func TestCloseWhileBatching(t *testing.T) {
	e := startBatchTestStore(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	created := 0
	for g := range 32 {
		wg.Go(func() {
			for i := 0; ; i++ {
				_, err := e.Store.Create(ctx, fmt.Sprintf("/c/g%d/k%d", g, i), []byte("v"))
				if errors.Is(err, metadata.ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("create: %v", err)
					return
				}
				mu.Lock()
				created++
				mu.Unlock()
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- e.Store.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Close did not return while writes were batched")
	}
	wg.Wait()
	if created == 0 {
		t.Fatal("nothing was created before Close")
	}
	e.Store.mu.Lock()
	committing, queued := e.Store.batch.committing, len(e.Store.batch.queue)
	e.Store.mu.Unlock()
	if committing || queued != 0 {
		t.Fatalf("after Close: committer running %v, %d writes queued", committing, queued)
	}
}

// TestWriteWaitsForMember: a write through a networked store (New) while
// its etcd member is down waits, within the write's context, for the
// member to come back, as clientv3's own calls do, instead of failing at
// once.
func TestWriteWaitsForMember(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := StartServer(ctx, EmbeddedConfig{Dir: t.TempDir(), UnsafeNoFsync: true, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	s, err := New(ctx, Config{Endpoints: srv.ClientURLs(), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Create(ctx, "/before", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the client sees the connection fail
	done := make(chan error, 1)
	go func() { // owned by the test: waited for below
		_, err := s.Create(ctx, "/during", []byte("y"))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("write with the member down returned at once: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := srv.start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("write across the member's restart: %v", err)
	}
	kv, err := s.Get(ctx, "/during")
	if err != nil || string(kv.Value) != "y" {
		t.Fatalf("Get /during = %q, %v", kv.Value, err)
	}
}

// TestWriteValueCopied: a write whose caller stopped waiting may still be
// in a batch being sent, while the caller, whose call returned, reuses its
// value buffer. What is stored is the value as it was passed (with -race,
// a shared buffer is also reported as a race).
func TestWriteValueCopied(t *testing.T) {
	e := startBatchTestStore(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 200
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			value := []byte(strings.Repeat("a", 64))
			wctx, wcancel := context.WithTimeout(ctx, time.Duration(i%20)*50*time.Microsecond)
			_, _ = e.Create(wctx, fmt.Sprintf("/copied/%d", i), value)
			wcancel()
			for j := range value {
				value[j] = 'b'
			}
		}()
	}
	wg.Wait()
	// Writes are committed in queue order: once this one is, every
	// earlier one has been committed or dropped.
	if _, err := e.Create(ctx, "/copied-last", nil); err != nil {
		t.Fatal(err)
	}
	names, err := e.Children(ctx, "/copied")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		kv, err := e.Get(ctx, "/copied/"+name)
		if err != nil {
			t.Fatal(err)
		}
		if string(kv.Value) != strings.Repeat("a", 64) {
			t.Fatalf("/copied/%s = %q, want the value as passed", name, kv.Value)
		}
	}
	t.Logf("%d of %d writes stored after their callers stopped waiting or not", len(names), n)
}
