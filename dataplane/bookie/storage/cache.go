package storage

import (
	"bytes"
	"sync"
)

type entryID struct{ ledger, entry int64 }

type cachedEntry struct {
	data []byte
	lac  int64
	end  uint64 // logical journal position just past the entry's record
}

const (
	arenaChunk   = 1 << 20
	arenaMaxCopy = arenaChunk / 4
)

// writeCache holds added entries until a flush writes them to an entry log.
// Data up to arenaMaxCopy bytes is copied into arena chunks, larger entries
// into their own allocation. Guarded by DiskStorage.mu.
//
// The chunks are recycled (arenaPool) once the flush that wrote them has
// dropped the cache: at ~1 KiB an entry they were most of what a bookie
// allocates, and so most of what its collector ran for. That is safe
// because nothing outside the cache keeps a slice of a chunk: ReadEntry
// hands out copies of arena data (cachedCopy), taken under mu.
type writeCache struct {
	entries map[entryID]cachedEntry
	bytes   int64
	arena   []byte
	chunks  []*[arenaChunk]byte
}

// arenaPool holds the chunks of flushed write caches. A sync.Pool, so that
// the chunks of a burst are returned to the heap when the load stops.
var arenaPool sync.Pool

// newWriteCache returns an empty cache with room for hint entries: the
// previous cache's count, so that a steady load does not grow the map
// (rehashing) through every flush interval.
func newWriteCache(hint int) *writeCache {
	return &writeCache{entries: make(map[entryID]cachedEntry, hint)}
}

func (c *writeCache) put(ledger, entry, lac int64, data []byte, end uint64) {
	var cp []byte
	if len(data) > arenaMaxCopy {
		cp = append([]byte(nil), data...)
	} else {
		if cap(c.arena)-len(c.arena) < len(data) {
			chunk, _ := arenaPool.Get().(*[arenaChunk]byte)
			if chunk == nil {
				chunk = new([arenaChunk]byte)
			}
			c.chunks = append(c.chunks, chunk)
			c.arena = chunk[:0]
		}
		n := len(c.arena)
		c.arena = append(c.arena, data...)
		cp = c.arena[n:len(c.arena):len(c.arena)]
	}
	c.entries[entryID{ledger, entry}] = cachedEntry{data: cp, lac: lac, end: end}
	c.bytes += int64(len(data))
}

// release recycles the cache's arena chunks; the cache must not be used
// after it (nor any slice get returned).
func (c *writeCache) release() {
	for _, chunk := range c.chunks {
		arenaPool.Put(chunk)
	}
	c.chunks, c.arena, c.entries = nil, nil, nil
}

// cachedCopy returns data got from a write cache in a form that outlives
// the cache: a copy of arena data, larger entries (their own allocation,
// never recycled) as they are.
func cachedCopy(data []byte) []byte {
	if len(data) > arenaMaxCopy {
		return data
	}
	return bytes.Clone(data)
}

func (c *writeCache) get(ledger, entry int64) ([]byte, bool) {
	e, ok := c.entries[entryID{ledger, entry}]
	return e.data, ok
}

func (c *writeCache) deleteLedger(ledger int64) {
	for k, e := range c.entries {
		if k.ledger == ledger {
			delete(c.entries, k)
			c.bytes -= int64(len(e.data))
		}
	}
}

// readCache is a two-generation cache of entries read from entry logs: new
// entries go to cur; when cur holds half the budget it becomes prev and the
// old prev is dropped. It also remembers the last entry read per ledger to
// detect sequential reads.
type readCache struct {
	mu       sync.Mutex
	cur      map[entryID][]byte
	prev     map[entryID][]byte
	curBytes int64
	half     int64
	lastRead map[int64]int64
}

const maxTrackedLedgers = 4096

func newReadCache(maxBytes int64) *readCache {
	return &readCache{
		cur:      make(map[entryID][]byte),
		half:     max(maxBytes/2, 1),
		lastRead: make(map[int64]int64),
	}
}

func (c *readCache) get(ledger, entry int64) ([]byte, bool) {
	k := entryID{ledger, entry}
	c.mu.Lock()
	defer c.mu.Unlock()
	if d, ok := c.cur[k]; ok {
		return d, true
	}
	d, ok := c.prev[k]
	return d, ok
}

// noteRead records a read of (ledger, entry) and reports whether it follows
// the previous read of that ledger.
func (c *readCache) noteRead(ledger, entry int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev, ok := c.lastRead[ledger]
	if !ok && len(c.lastRead) >= maxTrackedLedgers {
		clear(c.lastRead)
	}
	c.lastRead[ledger] = entry
	return ok && prev+1 == entry
}

func (c *readCache) put(ledger, entry int64, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.curBytes+int64(len(data)) > c.half {
		c.prev, c.cur, c.curBytes = c.cur, make(map[entryID][]byte), 0
	}
	c.cur[entryID{ledger, entry}] = data
	c.curBytes += int64(len(data))
}

func (c *readCache) invalidate(keys []entryID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		delete(c.cur, k)
		delete(c.prev, k)
	}
}

func (c *readCache) deleteLedger(ledger int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range []map[entryID][]byte{c.cur, c.prev} {
		for k := range m {
			if k.ledger == ledger {
				delete(m, k)
			}
		}
	}
	delete(c.lastRead, ledger)
}
