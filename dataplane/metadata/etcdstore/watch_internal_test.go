package etcdstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// breakingWatcher delivers every event in a response of its own and cuts
// the k-th watch after k+1 events, as a flaky connection would: the store
// must re-watch and resume exactly after the last event it delivered, even
// inside a revision that carries several events. (A re-watch replays the
// delivered events of a revision, so each watch must carry one more.)
type breakingWatcher struct {
	clientv3.Watcher
	watches atomic.Int64
}

func (b *breakingWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	every := int(b.watches.Add(1)) + 1
	ctx, cancel := context.WithCancel(ctx)
	in := b.Watcher.Watch(ctx, key, opts...)
	out := make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		defer cancel()
		n := 0
		for resp := range in {
			for _, ev := range resp.Events {
				one := resp
				one.Events = []*clientv3.Event{ev}
				select {
				case out <- one:
				case <-ctx.Done():
					return
				}
				if n++; n == every {
					return
				}
			}
		}
	}()
	return out
}

func TestWatchResumesInsideRevision(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := StartServer(ctx, EmbeddedConfig{
		Dir: t.TempDir(), UnsafeNoFsync: true, Logger: zap.NewNop(),
		HeartbeatInterval: 10 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	s, err := New(ctx, Config{Endpoints: srv.ClientURLs(), Prefix: "/p", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	bw := &breakingWatcher{Watcher: s.cli.Watcher}
	s.cli.Watcher = bw

	w, err := s.Watch(ctx, "/w", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	sess, err := s.NewSession(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 7 {
		k := fmt.Sprintf("/w/e%d", i)
		if _, err := sess.CreateEphemeral(ctx, k, nil); err != nil {
			t.Fatal(err)
		}
		want = append(want, "put "+k)
	}
	// One revision deletes all seven keys.
	if err := sess.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range 7 {
		want = append(want, fmt.Sprintf("delete /w/e%d", i))
	}
	if _, err := s.Put(ctx, "/w/end", nil, metadata.AnyVersion); err != nil {
		t.Fatal(err)
	}
	want = append(want, "put /w/end")
	var lastRev int64
	for i, wnt := range want {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("watch ended: %v", w.Err())
			}
			if got := ev.Type.String() + " " + ev.Key; got != wnt {
				t.Fatalf("event %d = %s, want %s", i, got, wnt)
			}
			if ev.Revision < lastRev {
				t.Fatalf("revision went back from %d to %d", lastRev, ev.Revision)
			}
			lastRev = ev.Revision
		case <-ctx.Done():
			t.Fatalf("timeout at event %d", i)
		}
	}
	if n := bw.watches.Load(); n < 4 {
		t.Fatalf("only %d watches: the test did not break the stream", n)
	}
}
