package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/magnetar-dev/magnetar/internal/freeport"
)

// natsSystem runs nats-server built from its Go module (the version in
// go.mod) with JetStream, and drives it through nats.go's jetstream package.
type natsSystem struct {
	root string
	bin  string
}

func (n *natsSystem) name() string { return "nats" }

func (n *natsSystem) prepare(ctx context.Context, dir string) error {
	n.bin = filepath.Join(dir, "nats-server")
	if err := goBuild(ctx, n.root, n.bin, "github.com/nats-io/nats-server/v2"); err != nil {
		return fmt.Errorf("%w: %w", errUnavailable, err)
	}
	return nil
}

func (n *natsSystem) start(ctx context.Context, dir string, d durability) (server, error) {
	addr, err := freeport.Addr()
	if err != nil {
		return nil, err
	}
	conf := fmt.Sprintf("listen: %q\nserver_name: bench\njetstream {\n  store_dir: %q\n  max_memory_store: 4GB\n  max_file_store: 32GB\n", addr, filepath.Join(dir, "js"))
	if d == durFsync {
		conf += "  sync_interval: always\n"
	}
	conf += "}\n"
	confPath := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, fmt.Errorf("streambench: %w", err)
	}
	p, err := startProcess(dir, "nats.log", n.bin, "-c", confPath)
	if err != nil {
		return nil, err
	}
	s := &natsServer{process: p, url: "nats://" + addr, storage: jetstream.FileStorage}
	if d == durMemory {
		s.storage = jetstream.MemoryStorage
	}
	err = p.waitReady(ctx, func(ctx context.Context) error {
		nc, err := nats.Connect(s.url, nats.Timeout(time.Second))
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		_, err = js.AccountInfo(ctx)
		return err
	})
	if err != nil {
		p.stop()
		return nil, err
	}
	return s, nil
}

type natsServer struct {
	*process
	url     string
	storage jetstream.StorageType
}

func (s *natsServer) newAdapter() adapter { return &natsAdapter{srv: s} }

// natsAdapter: one stream with one subject per partition, async publish
// with acks through the ack handler, per subscription a pull consumer
// without acks (AckNone) consuming every subject: ephemeral for the default
// subscription, durable for a named one.
type natsAdapter struct {
	srv      *natsServer
	nc       *nats.Conn
	js       jetstream.JetStream
	stream   jetstream.Stream
	subjects []string
	next     atomic.Uint64
	ccs      []jetstream.ConsumeContext
}

func (a *natsAdapter) setup(ctx context.Context, spec topicSpec, onAck func([]byte, error)) error {
	var err error
	a.nc, err = nats.Connect(a.srv.url, nats.Timeout(10*time.Second))
	if err != nil {
		return fmt.Errorf("streambench: nats connect: %w", err)
	}
	a.js, err = jetstream.New(a.nc,
		jetstream.WithPublishAsyncMaxPending(4000), // nats.go's default; far more in flight makes JetStream with sync always stall
		jetstream.WithPublishAsyncTimeout(time.Minute),
		jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, m *nats.Msg, _ *jetstream.PubAck) { onAck(m.Data, nil) }),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) { onAck(m.Data, err) }),
	)
	if err != nil {
		return fmt.Errorf("streambench: jetstream: %w", err)
	}
	// JetStream reserves MaxBytes against the server's limits; teardown
	// deletes the stream so the next run on this server can reserve again.
	maxBytes := int64(8 << 30)
	if a.srv.storage == jetstream.MemoryStorage {
		maxBytes = 2 << 30
	}
	a.stream, err = a.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:      spec.name,
		Subjects:  []string{spec.name + ".>"},
		Storage:   a.srv.storage,
		Retention: jetstream.LimitsPolicy,
		Discard:   jetstream.DiscardOld,
		MaxBytes:  maxBytes,
		Replicas:  1,
	})
	if err != nil {
		return fmt.Errorf("streambench: create stream: %w", err)
	}
	for i := range spec.partitions {
		a.subjects = append(a.subjects, spec.name+"."+strconv.Itoa(i))
	}
	return nil
}

func (a *natsAdapter) subscribe(ctx context.Context, sub subscription, onMsg func([]byte)) error {
	cfg := jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy, DeliverPolicy: jetstream.DeliverNewPolicy}
	if sub.name != "" {
		cfg.Durable = sub.name
	}
	if sub.fromStart {
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	c, err := a.stream.CreateOrUpdateConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("streambench: nats consumer: %w", err)
	}
	cc, err := c.Consume(func(m jetstream.Msg) { onMsg(m.Data()) }, jetstream.PullMaxMessages(2000))
	if err != nil {
		return fmt.Errorf("streambench: nats consume: %w", err)
	}
	a.ccs = append(a.ccs, cc)
	return nil
}

func (a *natsAdapter) publish(ctx context.Context, payload []byte) error {
	subj := a.subjects[a.next.Add(1)%uint64(len(a.subjects))]
	stall := time.Minute
	if d, ok := ctx.Deadline(); ok {
		stall = time.Until(d)
	}
	if stall <= 0 {
		return context.DeadlineExceeded
	}
	_, err := a.js.PublishAsync(subj, payload, jetstream.WithStallWait(stall))
	if err != nil {
		return fmt.Errorf("streambench: nats publish: %w", err)
	}
	return nil
}

// natsStopWait bounds teardown's wait for the consumers to stop.
const natsStopWait = 10 * time.Second

func (a *natsAdapter) teardown(ctx context.Context) error {
	for _, cc := range a.ccs {
		cc.Stop()
	}
	// Stop is asynchronous; Closed reports the end of its goroutines. The
	// wait is bounded on its own so that the stream's deletion keeps the
	// rest of ctx: a NATS server far behind (W4 (a) at 64 consumers) once
	// spent the whole teardown budget here and in the deletion, and the
	// run dropped NATS from the later rounds.
	stopped := time.After(natsStopWait)
wait:
	for _, cc := range a.ccs {
		select {
		case <-cc.Closed():
		case <-stopped:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	var err error
	if a.stream != nil {
		t0 := time.Now()
		if derr := a.js.DeleteStream(ctx, a.stream.CachedInfo().Config.Name); derr != nil {
			err = fmt.Errorf("streambench: delete stream (after %v): %w", time.Since(t0).Round(time.Millisecond), derr)
		}
	}
	if a.nc != nil {
		a.nc.Close()
	}
	return err
}
