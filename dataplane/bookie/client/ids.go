package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bookie"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// idBlockSize is how many ledger ids one reservation takes. A client that
// stops leaves the rest of its block unused: ids are plentiful, metadata
// writes are not.
const idBlockSize = 1000

// idAllocator hands out ledger ids from blocks reserved in the metadata
// store (idBlockKey holds the highest id reserved so far), so creating a
// ledger costs a metadata write for its record only, not a contended
// read-modify-write of a shared counter. Ids are unique across clients
// (blocks do not overlap, and a ledger record is created only if absent)
// and a fresh block starts above every id handed out before it, by any
// client; within one client ids increase in the order they are handed out.
type idAllocator struct {
	md metadata.Store

	mu        sync.Mutex
	next, end int64 // ids next..end-1 are reserved and unused
}

// take returns an id greater than after (0: no constraint). Managed
// ledgers pass their last ledger's id: the ids of one managed ledger must
// grow, and another client may have handed out that id from a block above
// ours, in which case ours is dropped for a fresh one.
func (a *idAllocator) take(ctx context.Context, after int64) (int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.next >= a.end || a.next <= after {
		first, err := a.reserve(ctx)
		if err != nil {
			return 0, err
		}
		a.next, a.end = first, first+idBlockSize
	}
	id := a.next
	a.next++
	return id, nil
}

// reserve takes the next block by compare-and-set of idBlockKey and
// returns its first id. The first reservation in a store that has none
// starts above the ids handed out by the metadata store's sequence, which
// allocated ledger ids one at a time before blocks.
func (a *idAllocator) reserve(ctx context.Context) (int64, error) {
	for {
		kv, err := a.md.Get(ctx, idBlockKey)
		if errors.Is(err, metadata.ErrNotFound) {
			floor, err := a.md.NextID(ctx, ledgerIDSeq)
			if err != nil {
				return 0, err
			}
			_, err = a.md.Create(ctx, idBlockKey, []byte(strconv.FormatInt(floor+idBlockSize-1, 10)))
			if errors.Is(err, metadata.ErrExists) {
				continue // another client started the blocks: take the next one
			}
			if err != nil {
				return 0, fmt.Errorf("ledger: reserve ids: %w", err)
			}
			return floor, nil
		}
		if err != nil {
			return 0, fmt.Errorf("ledger: reserve ids: %w", err)
		}
		last, err := strconv.ParseInt(string(kv.Value), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("ledger: %s holds %q: %w", idBlockKey, kv.Value, err)
		}
		_, err = a.md.Put(ctx, idBlockKey, []byte(strconv.FormatInt(last+idBlockSize, 10)), kv.Version)
		if errors.Is(err, metadata.ErrBadVersion) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("ledger: reserve ids: %w", err)
		}
		return last + 1, nil
	}
}

// bookieList caches the registrations of the available bookies for
// Config.BookieListTTL, so a burst of ledger creations reads them once
// (listing them costs a read per bookie). Concurrent callers share one
// read.
type bookieList struct {
	md  metadata.Store
	ttl time.Duration

	mu      sync.Mutex
	regs    []bookie.Registration
	readAt  time.Time
	loading chan struct{} // closed when the read in flight ends; nil if none
}

// get returns the available bookies, read at most ttl ago. The caller
// must not modify the slice.
func (l *bookieList) get(ctx context.Context) ([]bookie.Registration, error) {
	if l.ttl <= 0 {
		return availableBookies(ctx, l.md)
	}
	for {
		l.mu.Lock()
		if l.regs != nil && time.Since(l.readAt) < l.ttl {
			regs := l.regs
			l.mu.Unlock()
			return regs, nil
		}
		if ch := l.loading; ch != nil {
			l.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		ch := make(chan struct{})
		l.loading = ch
		l.mu.Unlock()

		regs, err := availableBookies(ctx, l.md)
		l.mu.Lock()
		l.loading = nil
		if err == nil {
			l.regs, l.readAt = regs, time.Now()
		}
		l.mu.Unlock()
		close(ch)
		return regs, err
	}
}
