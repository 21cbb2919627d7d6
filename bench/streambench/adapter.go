package main

import (
	"context"
	"errors"
)

// durability is a column of the tables: what an acknowledgement promises.
type durability int

const (
	durFsync  durability = iota // (a) acknowledged after fsync
	durOS                       // (b) acknowledged after the write to the OS
	durMemory                   // (c) memory only
)

var allDurabilities = []durability{durFsync, durOS, durMemory}

func (d durability) String() string {
	switch d {
	case durFsync:
		return "(a) fsync"
	case durOS:
		return "(b) OS write"
	case durMemory:
		return "(c) memory"
	}
	return "?"
}

var (
	// errUnavailable: the system cannot run on this machine.
	errUnavailable = errors.New("streambench: unavailable")
	// errUnsupported: the system has no such durability mode.
	errUnsupported = errors.New("streambench: not supported")
)

// topicSpec is what a run asks an adapter to set up.
type topicSpec struct {
	name       string
	partitions int
	durability durability
	throughput bool // W2: batch for throughput rather than latency
	retain     int  // messages the topic must keep (W6's backlog); 0: the adapter's default bound
}

// subscription is what one subscribe call asks for. The zero value is the
// adapter's default single subscriber (Magnetar: an exclusive subscription
// "bench"; NATS: an ephemeral consumer; Redis: XREAD). A named subscription
// is an independent reader of every message (Magnetar: a subscription of
// that name; NATS: a durable consumer; Redis: a consumer group).
type subscription struct {
	name      string
	fromStart bool // read from the oldest retained message, not only new ones
}

// adapter drives one system through its own client. setup is called once,
// then subscribe (optional), then publish from one goroutine, then
// teardown. onAck and onMsg may be called from any goroutine, concurrently.
type adapter interface {
	// setup creates the topic with its partitions and the producer; onAck
	// is called once per published payload, with the payload.
	setup(ctx context.Context, spec topicSpec, onAck func(payload []byte, err error)) error
	// subscribe starts delivering every message published from now on (or,
	// with sub.fromStart, every retained message) to onMsg, with its
	// payload. It may be called several times with distinct names; each
	// subscription receives every message.
	subscribe(ctx context.Context, sub subscription, onMsg func(payload []byte)) error
	// publish sends payload asynchronously, spreading messages over the
	// partitions; it blocks while the client's window is full.
	publish(ctx context.Context, payload []byte) error
	// teardown stops the client's goroutines and closes its connections.
	teardown(ctx context.Context) error
}

// system is one product under test.
type system interface {
	name() string
	// prepare builds or finds the server under dir (once per harness run);
	// it returns an error wrapping errUnavailable when the system cannot run.
	prepare(ctx context.Context, dir string) error
	// start runs a fresh server configured for d with data under dir; an
	// error wrapping errUnsupported means the system has no such mode.
	start(ctx context.Context, dir string, d durability) (server, error)
}

// server is one running server process.
type server interface {
	pid() int
	newAdapter() adapter
	stop() error
}
