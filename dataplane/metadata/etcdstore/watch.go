package etcdstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// rewatchBackoff is the pause before re-creating a watch whose channel
// closed while the watch was still wanted.
const rewatchBackoff = 100 * time.Millisecond

type watcher struct {
	s      *Store
	prefix string
	ctx    context.Context
	cancel context.CancelFunc
	ch     chan metadata.Event
	done   chan struct{}

	mu  sync.Mutex
	err error
}

// Watch implements metadata.Store. The etcd watch covers the key range
// [prefix, prefix+"0"), which holds prefix and "prefix/..." but also keys
// such as "prefix.x"; those are dropped here. If the etcd watch channel
// closes while the watch is still wanted (server restart, lost leader), it
// is re-created from the last delivered revision, skipping what was already
// delivered, so the stream has neither gaps nor duplicates.
func (s *Store) Watch(ctx context.Context, prefix string, fromRevision int64) (metadata.Watcher, error) {
	if err := metadata.ValidatePath(prefix); err != nil {
		return nil, err
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	if fromRevision <= 0 {
		rev, err := s.Revision(ctx)
		if err != nil {
			return nil, err
		}
		fromRevision = rev + 1
	}
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	w := &watcher{
		s:      s,
		prefix: prefix,
		ctx:    wctx,
		cancel: func() { stop(); cancel() },
		ch:     make(chan metadata.Event),
		done:   make(chan struct{}),
	}
	s.wg.Add(1)
	go w.run(fromRevision)
	return w, nil
}

func (w *watcher) Events() <-chan metadata.Event { return w.ch }

func (w *watcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Close ends the watch and waits for its goroutine.
func (w *watcher) Close() {
	w.cancel()
	<-w.done
}

func (w *watcher) fail(err error) {
	w.mu.Lock()
	w.err = err
	w.mu.Unlock()
}

// keyRange returns the etcd range the watch covers.
func (w *watcher) keyRange() (string, string) {
	if w.prefix == "/" {
		k := w.s.pfx + "/"
		return k, clientv3.GetPrefixRangeEnd(k)
	}
	k := w.s.pfx + w.prefix
	return k, k + "0" // '0' follows '/'
}

func (w *watcher) run(from int64) {
	defer w.s.wg.Done()
	defer close(w.done)
	defer close(w.ch)
	defer w.cancel()
	key, end := w.keyRange()
	// Resume point: the watch restarts at revision rev, of whose events the
	// first seen were already handled (a revision may carry several events,
	// e.g. a lease revocation deleting many keys).
	rev, seen := from, 0
	for {
		toSkip := seen
		wch := w.s.cli.Watch(clientv3.WithRequireLeader(w.ctx), key,
			clientv3.WithRange(end), clientv3.WithRev(rev))
		for resp := range wch {
			if resp.CompactRevision != 0 {
				w.fail(fmt.Errorf("%w: revision %d, compacted at %d", metadata.ErrCompacted, rev, resp.CompactRevision))
				return
			}
			if resp.Canceled || resp.Err() != nil {
				break // re-watch below
			}
			for _, ev := range resp.Events {
				switch r := ev.Kv.ModRevision; {
				case r < rev:
					continue
				case r == rev && toSkip > 0:
					toSkip--
					continue
				case r > rev:
					rev, seen, toSkip = r, 0, 0
				}
				if !w.deliver(ev) {
					return
				}
				seen++
			}
		}
		if w.ctx.Err() != nil {
			return
		}
		select {
		case <-time.After(rewatchBackoff):
		case <-w.ctx.Done():
			return
		}
	}
}

// deliver sends ev if it lies in the watched subtree; false means the watch
// ended.
func (w *watcher) deliver(ev *clientv3.Event) bool {
	k := strings.TrimPrefix(string(ev.Kv.Key), w.s.pfx)
	if !metadata.InSubtree(k, w.prefix) {
		return true
	}
	out := metadata.Event{Type: metadata.EventPut, Key: k, Value: ev.Kv.Value, Revision: ev.Kv.ModRevision}
	if ev.Type == mvccpb.DELETE {
		out.Type, out.Value = metadata.EventDelete, nil
	}
	select {
	case w.ch <- out:
		return true
	case <-w.ctx.Done():
		return false
	}
}
