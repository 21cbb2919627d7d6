package ledger

import (
	"sync"
)

// entryCache keeps recently added entries of every managed ledger of a
// factory so that tailing readers never go to the bookies. It is bounded by
// bytes and evicts in insertion order (oldest first), which is the order in
// which tailing readers stop needing entries. Safe for concurrent use; its
// mutex is a leaf (taken under ManagedLedger.mu, never the reverse).
//
// Items form an intrusive FIFO list and evicted items are kept on a short
// free list for the next put, so a full cache on the add path allocates
// nothing per entry.
type entryCache struct {
	mu    sync.Mutex
	limit int64
	size  int64
	head  *cacheItem // oldest
	tail  *cacheItem // newest
	free  *cacheItem // recycled items, linked through next
	nfree int
	byML  map[*ManagedLedger]map[Position]*cacheItem
}

type cacheItem struct {
	ml         *ManagedLedger
	pos        Position
	data       []byte
	at         int64 // the managed ledger's addedBytes once this entry was added
	prev, next *cacheItem
}

const (
	cacheItemOverhead = 64   // bytes charged per entry besides its payload
	maxFreeCacheItems = 1024 // recycled items kept for reuse
)

func newEntryCache(limit int64) *entryCache {
	return &entryCache{limit: limit, byML: map[*ManagedLedger]map[Position]*cacheItem{}}
}

func (c *entryCache) enabled() bool { return c.limit > 0 }

// put adds ml's entry at pos; at is ml's addedBytes after it.
func (c *entryCache) put(ml *ManagedLedger, pos Position, data []byte, at int64) {
	cost := int64(len(data)) + cacheItemOverhead
	if cost > c.limit {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.byML[ml]
	if m == nil {
		m = map[Position]*cacheItem{}
		c.byML[ml] = m
	}
	if _, ok := m[pos]; ok {
		return
	}
	// Make room first, so the item just evicted can be reused.
	c.size += cost
	for c.size > c.limit && c.head != nil {
		c.removeLocked(c.head)
	}
	if m = c.byML[ml]; m == nil { // emptied and dropped by the evictions
		m = map[Position]*cacheItem{}
		c.byML[ml] = m
	}
	it := c.free
	if it != nil {
		c.free, it.next = it.next, nil
		c.nfree--
	} else {
		it = new(cacheItem)
	}
	it.ml, it.pos, it.data, it.at = ml, pos, data, at
	it.prev = c.tail
	if c.tail != nil {
		c.tail.next = it
	} else {
		c.head = it
	}
	c.tail = it
	m[pos] = it
}

// get returns ml's entry at pos and the at it was put with.
func (c *entryCache) get(ml *ManagedLedger, pos Position) ([]byte, int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if it, ok := c.byML[ml][pos]; ok {
		return it.data, it.at, true
	}
	return nil, 0, false
}

// removeLocked unlinks it, forgets it and recycles it.
func (c *entryCache) removeLocked(it *cacheItem) {
	if it.prev != nil {
		it.prev.next = it.next
	} else {
		c.head = it.next
	}
	if it.next != nil {
		it.next.prev = it.prev
	} else {
		c.tail = it.prev
	}
	c.size -= int64(len(it.data)) + cacheItemOverhead
	m := c.byML[it.ml]
	delete(m, it.pos)
	if len(m) == 0 {
		delete(c.byML, it.ml)
	}
	*it = cacheItem{}
	if c.nfree < maxFreeCacheItems {
		it.next = c.free
		c.free = it
		c.nfree++
	}
}

// dropLedger evicts every entry of ml in bookie ledger id (all of ml when
// id < 0).
func (c *entryCache) dropLedger(ml *ManagedLedger, id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for pos, it := range c.byML[ml] {
		if id < 0 || pos.LedgerID == id {
			c.removeLocked(it)
		}
	}
}

func (c *entryCache) bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
}
