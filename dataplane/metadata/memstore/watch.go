package memstore

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// watchBatch bounds how many revisions a watcher copies per lock hold.
const watchBatch = 256

type watcher struct {
	s      *Store
	prefix string
	ctx    context.Context
	ch     chan metadata.Event
	stop   chan struct{} // closed by Close
	once   sync.Once
	done   chan struct{} // closed when run returns

	mu  sync.Mutex
	err error
}

// Watch implements metadata.Store. Each watch is one goroutine that reads
// the history at its own pace, so a slow reader never blocks writers; one
// that falls behind the history ends with metadata.ErrCompacted.
func (s *Store) Watch(ctx context.Context, prefix string, fromRevision int64) (metadata.Watcher, error) {
	if err := metadata.ValidatePath(prefix); err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if fromRevision <= 0 {
		fromRevision = s.rev + 1
	} else if fromRevision <= s.compacted {
		return nil, fmt.Errorf("%w: revision %d, history starts at %d", metadata.ErrCompacted, fromRevision, s.compacted+1)
	}
	w := &watcher{
		s:      s,
		prefix: prefix,
		ctx:    ctx,
		ch:     make(chan metadata.Event),
		stop:   make(chan struct{}),
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

// Close stops the watch and waits for its goroutine to end.
func (w *watcher) Close() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
}

func (w *watcher) fail(err error) {
	w.mu.Lock()
	w.err = err
	w.mu.Unlock()
}

func (w *watcher) run(next int64) {
	s := w.s
	defer s.wg.Done()
	defer close(w.done)
	defer close(w.ch)
	var batch []metadata.Event
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		if compacted := s.compacted; next <= compacted {
			s.mu.Unlock()
			w.fail(fmt.Errorf("%w: revision %d, history starts at %d", metadata.ErrCompacted, next, compacted+1))
			return
		}
		i, _ := slices.BinarySearchFunc(s.history, next, func(r revision, rev int64) int { return cmpInt(r.rev, rev) })
		end := min(i+watchBatch, len(s.history))
		batch = batch[:0]
		for _, r := range s.history[i:end] {
			for _, ev := range r.events {
				if metadata.InSubtree(ev.Key, w.prefix) {
					batch = append(batch, ev)
				}
			}
			next = r.rev + 1
		}
		changed := s.changed
		s.mu.Unlock()

		for _, ev := range batch {
			ev.Value = slices.Clone(ev.Value)
			select {
			case w.ch <- ev:
			case <-w.ctx.Done():
				return
			case <-w.stop:
				return
			case <-s.stop:
				return
			}
		}
		if end > i {
			continue // there may be more history to read
		}
		select {
		case <-changed:
		case <-w.ctx.Done():
			return
		case <-w.stop:
			return
		case <-s.stop:
			return
		}
	}
}
