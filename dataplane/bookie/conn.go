package bookie

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
)

// serverConn is one client connection. Its reader goroutine owns decoding
// and dispatch; its writer goroutine owns the FrameWriter. Responses are
// queued by the reader and by storage callbacks (push never blocks) and
// written in queue order, which for adds is completion order.
//
// Every request takes a slot of sem before it is executed and gives it back
// once its response is written: with all slots taken the reader stops
// reading, which pushes back on the client through TCP.
type serverConn struct {
	s   *Server
	nc  net.Conn
	id  uint64
	log *slog.Logger
	fr  *wire.FrameReader
	fw  *wire.FrameWriter
	sem chan struct{}
	// entryBuf is the reader's scratch for the storage data of an ADD.
	entryBuf []byte

	mu     sync.Mutex
	queue  []outResp
	closed bool // the writer is gone; responses are dropped

	wake     chan struct{} // cap 1: the queue is not empty
	killed   chan struct{} // closed by kill: stop everything now
	killOnce sync.Once
	finished chan struct{} // closed by the writer when the connection is closed
	draining atomic.Bool
}

// entryBufKeep bounds the entry scratch buffer a connection keeps between
// adds.
const entryBufKeep = 1 << 20

// outResp is one queued item for the writer.
type outResp struct {
	resp   wire.Response
	noResp bool // nothing to write (a bare close marker)
	slot   bool // release a sem slot once written
	last   bool // flush and close the connection after this item
}

func newServerConn(s *Server, nc net.Conn, id uint64) *serverConn {
	return &serverConn{
		s:        s,
		nc:       nc,
		id:       id,
		log:      s.log.With(slog.Uint64("conn", id), slog.String("remote", nc.RemoteAddr().String())),
		fr:       wire.NewFrameReader(nc, s.cfg.MaxFrameSize),
		fw:       wire.NewFrameWriter(nc, s.cfg.MaxFrameSize),
		sem:      make(chan struct{}, s.cfg.MaxInflightPerConn),
		wake:     make(chan struct{}, 1),
		killed:   make(chan struct{}),
		finished: make(chan struct{}),
	}
}

// drain makes the reader stop reading new requests; in-flight ones are
// still answered, then the connection closes.
func (c *serverConn) drain() {
	c.draining.Store(true)
	c.nc.SetReadDeadline(time.Unix(1, 0))
}

// kill closes the connection at once.
func (c *serverConn) kill() {
	c.killOnce.Do(func() {
		close(c.killed)
		c.nc.Close()
	})
}

// push queues an item for the writer; it never blocks.
func (c *serverConn) push(o outResp) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.queue = append(c.queue, o)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// reply queues the response to a request holding a slot.
func (c *serverConn) reply(r wire.Response) { c.push(outResp{resp: r, slot: true}) }

// replyErr queues an error response to a request holding a slot. err is a
// storage or wire error; its text becomes the message.
func (c *serverConn) replyErr(op wire.Op, id uint64, err error) {
	c.reply(errResponse(op, id, err))
}

func errResponse(op wire.Op, id uint64, err error) wire.Response {
	return wire.Response{Op: op, RequestID: id, Status: wire.StatusOf(err), Message: err.Error()}
}

func (c *serverConn) writeLoop() {
	defer c.finish()
	var batch []outResp
	for {
		select {
		case <-c.wake:
		case <-c.killed:
			return
		}
		for {
			c.mu.Lock()
			batch, c.queue = c.queue, batch[:0]
			c.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			for i := range batch {
				o := &batch[i]
				if !o.noResp {
					if err := c.fw.WriteResponse(&o.resp); err != nil {
						c.log.Debug("bookie connection write failed", slog.Any("err", err))
						return
					}
				}
				if o.slot {
					<-c.sem
				}
				if o.last {
					if err := c.fw.Flush(); err != nil {
						c.log.Debug("bookie connection write failed", slog.Any("err", err))
					}
					return
				}
				batch[i] = outResp{}
			}
		}
		if err := c.fw.Flush(); err != nil {
			c.log.Debug("bookie connection write failed", slog.Any("err", err))
			return
		}
	}
}

// finish runs when the writer exits: nothing more is written.
func (c *serverConn) finish() {
	c.mu.Lock()
	c.closed = true
	c.queue = nil
	c.mu.Unlock()
	c.kill()
	c.s.removeConn(c)
	close(c.finished)
}

// waitInflight waits until every request read so far is answered.
func (c *serverConn) waitInflight() {
	for range cap(c.sem) {
		select {
		case c.sem <- struct{}{}:
		case <-c.killed:
			return
		}
	}
}

// isProtocolError tells malformed input from a broken or closed stream.
func isProtocolError(err error) bool {
	return errors.Is(err, wire.ErrMalformed) || errors.Is(err, wire.ErrTooLarge) || errors.Is(err, wire.ErrUnsupported)
}

func (c *serverConn) readLoop() {
	final := c.serve()
	c.waitInflight()
	if final != nil {
		c.push(outResp{resp: *final, last: true})
	} else {
		c.push(outResp{noResp: true, last: true})
	}
}

// serve reads and executes requests until the stream ends, the server
// drains, or the client sends something invalid; then it returns the
// error response to send before closing (nil for none).
func (c *serverConn) serve() *wire.Response {
	if tc, ok := c.nc.(*tls.Conn); ok {
		ctx, cancel := context.WithTimeout(c.s.stopCtx, TLSHandshakeTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			// Debug: health probes connect and hang up without a handshake.
			c.log.Debug("bookie TLS handshake failed", slog.Any("err", err))
			return nil
		}
	}
	handshaken := false
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			if !isProtocolError(err) || c.draining.Load() {
				return nil
			}
			c.log.Warn("bookie closing connection on bad frame", slog.Any("err", err))
			r := errResponse(wire.OpError, 0, err)
			if errors.Is(err, wire.ErrUnsupported) {
				// The header was intact: answer the request.
				r.RequestID = f.RequestID
			}
			return &r
		}
		req, err := wire.DecodeRequest(f)
		if err == nil && !handshaken && req.Op != wire.OpHandshake {
			err = fmt.Errorf("%w: first request must be a handshake, got %s", wire.ErrBadRequest, req.Op)
		}
		if err != nil {
			c.log.Warn("bookie closing connection on bad request", slog.Any("err", err),
				slog.String("op", f.Op.String()), slog.Uint64("request", f.RequestID))
			op := f.Op
			if errors.Is(err, wire.ErrUnsupported) {
				op = wire.OpError
			}
			r := errResponse(op, f.RequestID, err)
			return &r
		}
		handshaken = true
		select {
		case c.sem <- struct{}{}:
		case <-c.killed:
			return nil
		}
		c.handle(&req)
	}
}

// addReply answers one add once the storage reports it. Pooled, with done
// bound to it once, so that an add costs no closure.
type addReply struct {
	c                 *serverConn
	id                uint64
	ledgerID, entryID int64
	start             time.Time
	n                 int
	done              func(error) // r.complete
}

var addReplies sync.Pool // of *addReply; see getAddReply

func getAddReply() *addReply {
	if r, ok := addReplies.Get().(*addReply); ok {
		return r
	}
	r := new(addReply)
	r.done = r.complete
	return r
}

// complete is called exactly once per add (Storage.AddEntry's contract).
func (r *addReply) complete(err error) {
	c := r.c
	c.s.metrics.added(r.start, r.n, err)
	if err != nil {
		c.replyErr(wire.OpAdd, r.id, mapStorageErr(err))
	} else {
		c.reply(wire.Response{Op: wire.OpAdd, RequestID: r.id, LedgerID: r.ledgerID, EntryID: r.entryID})
	}
	r.c = nil
	addReplies.Put(r)
}

// handle executes one request holding a slot. Adds complete asynchronously;
// the other ops are answered before handle returns (a fencing read waits
// for the fence to be durable).
func (c *serverConn) handle(req *wire.Request) {
	st := c.s.st
	id := req.RequestID
	switch req.Op {
	case wire.OpHandshake:
		c.reply(wire.Response{Op: wire.OpHandshake, RequestID: id, Version: wire.ProtocolVersion, BookieID: c.s.cfg.ID})

	case wire.OpAdd:
		if wire.Checksum(req.LedgerID, req.EntryID, req.LAC, req.Payload) != req.Checksum {
			c.replyErr(wire.OpAdd, id, wire.ErrChecksum)
			return
		}
		ledgerID, entryID := req.LedgerID, req.EntryID
		c.entryBuf = appendEntryData(c.entryBuf[:0], req.LAC, req.Checksum, req.Payload)
		data := c.entryBuf
		if cap(c.entryBuf) > entryBufKeep {
			c.entryBuf = nil // one large entry does not pin its buffer
		}
		r := getAddReply()
		r.c, r.id, r.ledgerID, r.entryID, r.start, r.n = c, id, ledgerID, entryID, time.Now(), len(req.Payload)
		st.AddEntry(ledgerID, entryID, req.LAC, data, req.Recovery, r.done)

	case wire.OpRead:
		start := time.Now()
		if req.ReadFlags&wire.ReadFenceLedger != 0 {
			if err := c.fence(req.LedgerID); err != nil {
				c.replyErr(wire.OpRead, id, err)
				return
			}
		}
		data, err := st.ReadEntry(req.LedgerID, req.EntryID)
		var lac int64
		var sum uint32
		var payload []byte
		if err == nil {
			lac, sum, payload, err = decodeEntryData(data)
		}
		c.s.metrics.read(start, err)
		if err != nil {
			c.replyErr(wire.OpRead, id, mapStorageErr(err))
			return
		}
		c.reply(wire.Response{Op: wire.OpRead, RequestID: id, LedgerID: req.LedgerID, EntryID: req.EntryID,
			LAC: lac, Checksum: sum, Payload: payload})

	case wire.OpReadLAC:
		last, lac, err := st.LastEntry(req.LedgerID)
		if err != nil {
			c.replyErr(wire.OpReadLAC, id, mapStorageErr(err))
			return
		}
		c.reply(wire.Response{Op: wire.OpReadLAC, RequestID: id, LAC: lac, LastEntry: last})

	case wire.OpFence:
		if err := c.fence(req.LedgerID); err != nil {
			c.replyErr(wire.OpFence, id, err)
			return
		}
		_, lac, err := st.LastEntry(req.LedgerID)
		if errors.Is(err, storage.ErrNoSuchLedger) {
			lac, err = -1, nil
		}
		if err != nil {
			c.replyErr(wire.OpFence, id, mapStorageErr(err))
			return
		}
		c.reply(wire.Response{Op: wire.OpFence, RequestID: id, LAC: lac})

	case wire.OpDeleteLedger:
		if err := st.DeleteLedger(req.LedgerID); err != nil {
			c.replyErr(wire.OpDeleteLedger, id, mapStorageErr(err))
			return
		}
		c.reply(wire.Response{Op: wire.OpDeleteLedger, RequestID: id})
	}
}

// fence durably fences the ledger, waiting for the storage. The error is
// already mapped to a wire error.
func (c *serverConn) fence(ledgerID int64) error {
	ch := make(chan error, 1)
	c.s.st.Fence(ledgerID, func(err error) { ch <- err })
	select {
	case err := <-ch:
		if err != nil {
			return mapStorageErr(err)
		}
		return nil
	case <-c.killed:
		return wire.ErrConnClosed
	}
}
