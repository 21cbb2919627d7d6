package offload

import (
	"container/list"
	"context"
	"sync"
)

// chunkCache keeps range reads of data objects, least recently used
// evicted first once their bytes pass the budget. Concurrent gets of one
// chunk share one fetch. Its mutex is a leaf.
type chunkCache struct {
	budget int64

	mu       sync.Mutex
	size     int64
	lru      *list.List // of *chunkEntry, most recent first
	entries  map[chunkKey]*list.Element
	inflight map[chunkKey]*fetch
}

type chunkKey struct {
	obj string
	c   int64
}

type chunkEntry struct {
	key  chunkKey
	data []byte
}

type fetch struct {
	done chan struct{}
	data []byte
	err  error
}

func newChunkCache(budget int64) *chunkCache {
	return &chunkCache{budget: budget, lru: list.New(), entries: map[chunkKey]*list.Element{}, inflight: map[chunkKey]*fetch{}}
}

// want reports whether chunk c of obj is neither cached nor being fetched.
func (cc *chunkCache) want(obj string, c int64) bool {
	k := chunkKey{obj, c}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	_, cached := cc.entries[k]
	_, busy := cc.inflight[k]
	return !cached && !busy
}

// get returns chunk c of obj, calling load when it is neither cached nor
// being fetched.
func (cc *chunkCache) get(ctx context.Context, obj string, c int64, st *Stats, load func(context.Context) ([]byte, error)) ([]byte, error) {
	k := chunkKey{obj, c}
	cc.mu.Lock()
	if el := cc.entries[k]; el != nil {
		cc.lru.MoveToFront(el)
		d := el.Value.(*chunkEntry).data
		cc.mu.Unlock()
		st.CacheHits.Add(1)
		return d, nil
	}
	if f := cc.inflight[k]; f != nil {
		cc.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if f.err == nil {
			st.CacheHits.Add(1)
			return f.data, nil
		}
		// The shared fetch failed (perhaps for its own context): try ours.
		return load(ctx)
	}
	f := &fetch{done: make(chan struct{})}
	cc.inflight[k] = f
	cc.mu.Unlock()
	f.data, f.err = load(ctx)
	cc.mu.Lock()
	delete(cc.inflight, k)
	if f.err == nil && cc.budget > 0 {
		cc.entries[k] = cc.lru.PushFront(&chunkEntry{key: k, data: f.data})
		cc.size += int64(len(f.data))
		for cc.size > cc.budget && cc.lru.Len() > 1 {
			el := cc.lru.Back()
			e := el.Value.(*chunkEntry)
			cc.lru.Remove(el)
			delete(cc.entries, e.key)
			cc.size -= int64(len(e.data))
		}
	}
	cc.mu.Unlock()
	close(f.done)
	return f.data, f.err
}

// dropObject forgets every chunk of obj.
func (cc *chunkCache) dropObject(obj string) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for k, el := range cc.entries {
		if k.obj == obj {
			cc.size -= int64(len(el.Value.(*chunkEntry).data))
			cc.lru.Remove(el)
			delete(cc.entries, k)
		}
	}
}

// dropAll forgets every chunk.
func (cc *chunkCache) dropAll() {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.lru.Init()
	clear(cc.entries)
	cc.size = 0
}
