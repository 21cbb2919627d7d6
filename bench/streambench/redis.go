package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/magnetar-dev/magnetar/internal/freeport"
)

// redisSystem runs Debian's redis-server and drives Redis streams through
// go-redis: XADD pipelined, XREAD BLOCK for end-to-end.
type redisSystem struct {
	install bool // apt-get install redis-server when missing and root
	bin     string
}

func (r *redisSystem) name() string { return "redis" }

func (r *redisSystem) prepare(ctx context.Context, dir string) error {
	bin, err := exec.LookPath("redis-server")
	if err != nil && r.install && os.Geteuid() == 0 {
		out, ierr := exec.CommandContext(ctx, "apt-get", "install", "-y", "redis-server").CombinedOutput()
		if ierr != nil {
			return fmt.Errorf("%w: apt-get install redis-server: %v\n%s", errUnavailable, ierr, out)
		}
		bin, err = exec.LookPath("redis-server")
	}
	if err != nil {
		return fmt.Errorf("%w: no redis-server: %v", errUnavailable, err)
	}
	r.bin = bin
	return nil
}

func (r *redisSystem) start(ctx context.Context, dir string, d durability) (server, error) {
	addr, err := freeport.Addr()
	if err != nil {
		return nil, err
	}
	_, port, _ := cutLast(addr, ':')
	conf := fmt.Sprintf("bind 127.0.0.1\nport %s\ndir %q\nprotected-mode no\ndaemonize no\nsave \"\"\n", port, dir)
	switch d {
	case durFsync:
		conf += "appendonly yes\nappendfsync always\n"
	case durOS:
		conf += "appendonly yes\nappendfsync no\n"
	case durMemory:
		conf += "appendonly no\n"
	}
	confPath := filepath.Join(dir, "redis.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, fmt.Errorf("streambench: %w", err)
	}
	p, err := startProcess(dir, "redis.log", r.bin, confPath)
	if err != nil {
		return nil, err
	}
	s := &redisServer{process: p, addr: addr}
	err = p.waitReady(ctx, func(ctx context.Context) error {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		return c.Ping(ctx).Err()
	})
	if err != nil {
		p.stop()
		return nil, err
	}
	return s, nil
}

func cutLast(s string, sep byte) (string, string, bool) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == sep {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

type redisServer struct {
	*process
	addr string
}

func (s *redisServer) newAdapter() adapter { return &redisAdapter{srv: s} }

const (
	redisWriters  = 4     // concurrent pipelines
	redisPipeline = 512   // most XADDs in one pipeline
	redisMaxLen   = 30000 // approximate trim per stream key, bounds memory
)

// redisAdapter: one stream key per partition; publish queues the payload
// for redisWriters goroutines that each send what is queued as one
// pipeline of XADDs; one reader goroutine XREAD BLOCKs on every key (named
// subscriptions: one XREADGROUP reader per consumer group).
type redisAdapter struct {
	srv    *redisServer
	c      *redis.Client
	keys   []string
	onAck  func([]byte, error)
	queue  chan []byte
	stop   chan struct{}
	wg     sync.WaitGroup // writers and the reader
	next   int            // publish's round robin; publish has one caller
	maxLen int64          // approximate trim per key: redisMaxLen, or more for W6's backlog
}

func (a *redisAdapter) setup(ctx context.Context, spec topicSpec, onAck func([]byte, error)) error {
	// Every reader holds a connection in its BLOCKing read: the pool grows
	// (lazily) to the writers plus W4's largest fan-out.
	a.c = redis.NewClient(&redis.Options{Addr: a.srv.addr, PoolSize: redisWriters + 4 + 64})
	if err := a.c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("streambench: redis: %w", err)
	}
	for i := range spec.partitions {
		a.keys = append(a.keys, spec.name+":"+strconv.Itoa(i))
	}
	a.maxLen = redisMaxLen
	if n := int64(2 * spec.retain / max(1, spec.partitions)); n > a.maxLen {
		a.maxLen = n
	}
	a.onAck = onAck
	a.queue = make(chan []byte, 32768)
	a.stop = make(chan struct{})
	for range redisWriters {
		a.wg.Add(1)
		go a.writer() // owned by a: stopped by teardown
	}
	return nil
}

func (a *redisAdapter) writer() {
	defer a.wg.Done()
	ctx := context.Background()
	batch := make([][]byte, 0, redisPipeline)
	keys := make([]string, 0, redisPipeline)
	for {
		batch, keys = batch[:0], keys[:0]
		select {
		case <-a.stop:
			return
		case p := <-a.queue:
			batch = append(batch, p)
		}
	fill:
		for len(batch) < redisPipeline {
			select {
			case p := <-a.queue:
				batch = append(batch, p)
			default:
				break fill
			}
		}
		pipe := a.c.Pipeline()
		for _, p := range batch {
			key := a.keys[int(p[15])%len(a.keys)] // partition chosen by publish, stored in the payload
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: key, MaxLen: a.maxLen, Approx: true, Values: []any{"d", p}})
		}
		cmds, err := pipe.Exec(ctx)
		for i, p := range batch {
			e := err
			if i < len(cmds) {
				e = cmds[i].Err()
			}
			a.onAck(p, e)
		}
	}
}

func (a *redisAdapter) subscribe(ctx context.Context, sub subscription, onMsg func([]byte)) error {
	if sub.name != "" {
		return a.subscribeGroup(ctx, sub, onMsg)
	}
	streams := make([]string, 0, 2*len(a.keys))
	streams = append(streams, a.keys...)
	for range a.keys {
		streams = append(streams, "0-0") // the keys are new: everything is new
	}
	rctx := a.readerContext()
	a.wg.Add(1)
	go func() { // owned by a: stopped by teardown
		defer a.wg.Done()
		for rctx.Err() == nil {
			res, err := a.c.XRead(rctx, &redis.XReadArgs{Streams: streams, Count: 1000, Block: 100e6}).Result()
			if err != nil {
				backoff(rctx, err)
				continue
			}
			for _, st := range res {
				for i, k := range a.keys {
					if k == st.Stream && len(st.Messages) > 0 {
						streams[len(a.keys)+i] = st.Messages[len(st.Messages)-1].ID
					}
				}
				for _, m := range st.Messages {
					if s, ok := m.Values["d"].(string); ok {
						onMsg([]byte(s))
					}
				}
			}
		}
	}()
	return nil
}

// readerContext returns a context cancelled when teardown stops a.
func (a *redisAdapter) readerContext() context.Context {
	rctx, cancel := context.WithCancel(context.Background())
	a.wg.Add(1)
	go func() { // owned by a: stopped by teardown (cancel on stop)
		defer a.wg.Done()
		<-a.stop
		cancel()
	}()
	return rctx
}

// backoff waits a little after a failed read; redis.Nil is the BLOCK
// timeout and needs no wait.
func backoff(ctx context.Context, err error) {
	if errors.Is(err, redis.Nil) {
		return
	}
	t := time.NewTimer(10 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// subscribeGroup reads through a consumer group named sub.name on every
// key (XGROUP CREATE ... MKSTREAM, then XREADGROUP ... NOACK: like the NATS
// consumers, without per-message acknowledgements), one reader goroutine
// and one connection per group.
func (a *redisAdapter) subscribeGroup(ctx context.Context, sub subscription, onMsg func([]byte)) error {
	start := "$"
	if sub.fromStart {
		start = "0"
	}
	for _, k := range a.keys {
		if err := a.c.XGroupCreateMkStream(ctx, k, sub.name, start).Err(); err != nil {
			return fmt.Errorf("streambench: redis xgroup create: %w", err)
		}
	}
	streams := make([]string, 0, 2*len(a.keys))
	streams = append(streams, a.keys...)
	for range a.keys {
		streams = append(streams, ">")
	}
	rctx := a.readerContext()
	a.wg.Add(1)
	go func() { // owned by a: stopped by teardown
		defer a.wg.Done()
		for rctx.Err() == nil {
			res, err := a.c.XReadGroup(rctx, &redis.XReadGroupArgs{Group: sub.name, Consumer: "c",
				Streams: streams, Count: 1000, Block: 100e6, NoAck: true}).Result()
			if err != nil {
				backoff(rctx, err)
				continue
			}
			for _, st := range res {
				for _, m := range st.Messages {
					if s, ok := m.Values["d"].(string); ok {
						onMsg([]byte(s))
					}
				}
			}
		}
	}()
	return nil
}

func (a *redisAdapter) publish(ctx context.Context, payload []byte) error {
	payload[15] = byte(a.next % len(a.keys))
	a.next++
	select {
	case a.queue <- payload:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *redisAdapter) teardown(ctx context.Context) error {
	if a.stop != nil {
		close(a.stop)
	}
	a.wg.Wait()
	if a.c == nil {
		return nil
	}
	// Whatever is still queued was never sent.
	for {
		select {
		case p := <-a.queue:
			a.onAck(p, errors.New("streambench: redis: not sent before teardown"))
			continue
		default:
		}
		break
	}
	if len(a.keys) > 0 {
		a.c.Del(ctx, a.keys...)
	}
	return a.c.Close()
}
