package ledger

import (
	"container/list"
	"sync"
)

// entryCache keeps recently added entries of every managed ledger of a
// factory so that tailing readers never go to the bookies. It is bounded by
// bytes and evicts in insertion order (oldest first), which is the order in
// which tailing readers stop needing entries. Safe for concurrent use; its
// mutex is a leaf (taken under ManagedLedger.mu, never the reverse).
type entryCache struct {
	mu    sync.Mutex
	limit int64
	size  int64
	fifo  list.List // of *cacheItem
	byML  map[*ManagedLedger]map[Position]*list.Element
}

type cacheItem struct {
	ml   *ManagedLedger
	pos  Position
	data []byte
}

const cacheItemOverhead = 64 // bytes charged per entry besides its payload

func newEntryCache(limit int64) *entryCache {
	return &entryCache{limit: limit, byML: map[*ManagedLedger]map[Position]*list.Element{}}
}

func (c *entryCache) enabled() bool { return c.limit > 0 }

func (c *entryCache) put(ml *ManagedLedger, pos Position, data []byte) {
	cost := int64(len(data)) + cacheItemOverhead
	if cost > c.limit {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.byML[ml]
	if m == nil {
		m = map[Position]*list.Element{}
		c.byML[ml] = m
	}
	if _, ok := m[pos]; ok {
		return
	}
	m[pos] = c.fifo.PushBack(&cacheItem{ml: ml, pos: pos, data: data})
	c.size += cost
	for c.size > c.limit {
		c.removeLocked(c.fifo.Front())
	}
}

func (c *entryCache) get(ml *ManagedLedger, pos Position) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byML[ml][pos]; ok {
		return e.Value.(*cacheItem).data, true
	}
	return nil, false
}

func (c *entryCache) removeLocked(e *list.Element) {
	it := c.fifo.Remove(e).(*cacheItem)
	c.size -= int64(len(it.data)) + cacheItemOverhead
	m := c.byML[it.ml]
	delete(m, it.pos)
	if len(m) == 0 {
		delete(c.byML, it.ml)
	}
}

// dropLedger evicts every entry of ml in bookie ledger id (all of ml when
// id < 0).
func (c *entryCache) dropLedger(ml *ManagedLedger, id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for pos, e := range c.byML[ml] {
		if id < 0 || pos.LedgerID == id {
			c.removeLocked(e)
		}
	}
}

func (c *entryCache) bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
}
