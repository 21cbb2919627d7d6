package wire

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Client defaults.
const (
	DefaultDialTimeout    = 5 * time.Second
	DefaultRequestTimeout = 10 * time.Second
)

// ClientConfig configures a client connection. Zero fields take the
// defaults: DialTimeout 5s (bounds connect plus handshake), RequestTimeout
// 10s (a request without a reply by then fails with ErrTimeout),
// MaxFrameSize DefaultMaxFrameSize (6 MiB; must match the bookies'), TLS
// nil (plain TCP).
type ClientConfig struct {
	DialTimeout    time.Duration
	RequestTimeout time.Duration
	MaxFrameSize   int
	// TLS, when set, makes every connection TLS over TCP: bookies then
	// must serve TLS (bookie.Config.TLS). Its ServerName, when empty, is
	// the dialed address's host. Set GetClientCertificate or Certificates
	// for bookies that require a client certificate.
	TLS *tls.Config
}

func (c ClientConfig) withDefaults() (ClientConfig, error) {
	if c.DialTimeout < 0 || c.RequestTimeout < 0 || c.MaxFrameSize < 0 {
		return c, fmt.Errorf("bookie: negative client config value %+v", c)
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.MaxFrameSize == 0 {
		c.MaxFrameSize = DefaultMaxFrameSize
	}
	if c.MaxFrameSize < MinFrameSize+readRespFixed {
		return c, fmt.Errorf("bookie: MaxFrameSize %d too small", c.MaxFrameSize)
	}
	return c, nil
}

// Conn is a client connection to one bookie. Requests are pipelined: many may
// be outstanding, answered in any order. All methods are safe for concurrent
// use.
//
// A Conn runs three goroutines: a reader (decodes responses and completes
// requests; Add callbacks run here), a writer (encodes queued requests into a
// buffer and flushes when the queue drains) and a sweeper (fails requests
// older than RequestTimeout). They stop when the connection breaks or is
// closed; Close waits for them.
type Conn struct {
	cfg      ClientConfig
	addr     string
	bookieID string
	nc       net.Conn
	fr       *FrameReader
	fw       *FrameWriter

	mu       sync.Mutex
	nextID   uint64
	pending  map[uint64]*call
	queue    []*call // registered in pending, not yet written
	closeErr error   // set once; the connection is broken from then on

	wake chan struct{} // cap 1: the queue is not empty
	done chan struct{} // closed with closeErr
	wg   sync.WaitGroup
}

// call is one outstanding request.
type call struct {
	req      Request
	deadline time.Time
	done     AddDone      // ADD
	res      chan *result // other ops; cap 1
	// holds counts the holders of a pooled ADD call: the writer until it
	// has encoded the request, the completer until done returned. The last
	// one returns it to addCalls. A call the writer never gets to (the
	// connection broke first) is left to the collector.
	holds atomic.Int32
}

// addCalls recycles the calls of Add, one per entry sent.
var addCalls = sync.Pool{New: func() any { return new(call) }}

// release drops one hold on a pooled ADD call.
func (cl *call) release() {
	if cl.done == nil || cl.holds.Add(-1) != 0 {
		return
	}
	cl.req, cl.done, cl.deadline = Request{}, nil, time.Time{}
	addCalls.Put(cl)
}

// result is the outcome of a synchronous request.
type result struct {
	resp  Response // Payload copied, owned by the caller
	err   error
	entry Entry
}

// Dial connects to the bookie at addr and performs the handshake. ctx
// bounds the dial together with cfg.DialTimeout.
func Dial(ctx context.Context, addr string, cfg ClientConfig) (*Conn, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s: %w", ErrConnClosed, addr, err)
	}
	if cfg.TLS != nil {
		if nc, err = clientTLS(dctx, nc, addr, cfg.TLS); err != nil {
			return nil, err
		}
	}
	c := &Conn{
		cfg:     cfg,
		addr:    addr,
		nc:      nc,
		fr:      NewFrameReader(nc, cfg.MaxFrameSize),
		fw:      NewFrameWriter(nc, cfg.MaxFrameSize),
		nextID:  1,
		pending: make(map[uint64]*call),
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	if err := c.handshake(dctx); err != nil {
		nc.Close()
		return nil, err
	}
	c.wg.Add(3)
	go c.readLoop()
	go c.writeLoop()
	go c.sweepLoop()
	return c, nil
}

// clientTLS runs the TLS handshake on nc, closing it on failure.
func clientTLS(ctx context.Context, nc net.Conn, addr string, base *tls.Config) (net.Conn, error) {
	conf := base
	if conf.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		conf = base.Clone()
		conf.ServerName = host
	}
	tc := tls.Client(nc, conf)
	if err := tc.HandshakeContext(ctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("%w: TLS handshake with %s: %w", ErrConnClosed, addr, err)
	}
	return tc, nil
}

// handshake runs before the connection's goroutines exist.
func (c *Conn) handshake(ctx context.Context) error {
	if dl, ok := ctx.Deadline(); ok {
		c.nc.SetDeadline(dl)
		defer c.nc.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := c.fw.WriteRequest(&Request{Op: OpHandshake}); err != nil {
		return fmt.Errorf("%w: handshake with %s: %w", ErrConnClosed, c.addr, err)
	}
	if err := c.fw.Flush(); err != nil {
		return fmt.Errorf("%w: handshake with %s: %w", ErrConnClosed, c.addr, err)
	}
	f, err := c.fr.ReadFrame()
	if err != nil {
		return fmt.Errorf("%w: handshake with %s: %w", ErrConnClosed, c.addr, err)
	}
	resp, err := DecodeResponse(f)
	if err != nil {
		return fmt.Errorf("handshake with %s: %w", c.addr, err)
	}
	if resp.Op != OpHandshake && resp.Op != OpError {
		return fmt.Errorf("%w: handshake with %s answered by %s", ErrMalformed, c.addr, resp.Op)
	}
	if err := resp.Status.Err(); err != nil {
		return fmt.Errorf("handshake with %s: %w: %s", c.addr, err, resp.Message)
	}
	if resp.Version != ProtocolVersion {
		return fmt.Errorf("%w: bookie %s speaks protocol %d", ErrUnsupported, c.addr, resp.Version)
	}
	c.bookieID = resp.BookieID
	return nil
}

// Addr returns the address the connection was dialed with.
func (c *Conn) Addr() string { return c.addr }

// BookieID returns the id the bookie announced in the handshake.
func (c *Conn) BookieID() string { return c.bookieID }

// Done is closed when the connection is broken or closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended, or nil while it is usable.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeErr
}

// Close closes the connection, fails outstanding requests with
// ErrConnClosed and waits for the connection's goroutines. It must not be
// called from an Add callback (that would wait for itself); call it from
// another goroutine instead.
func (c *Conn) Close() error {
	c.fail(fmt.Errorf("%w: closed by client", ErrConnClosed))
	c.wg.Wait()
	return nil
}

// fail breaks the connection with err (the first error wins). Pending
// requests are completed by the reader goroutine as it exits.
func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.closeErr != nil {
		c.mu.Unlock()
		return
	}
	c.closeErr = err
	close(c.done)
	c.mu.Unlock()
	c.nc.Close()
}

// AddDone receives the outcome of an Add. A caller that keeps a record per
// add anyway passes a pointer to it: no allocation per add for the
// callback (a closure would be one).
type AddDone interface{ AddDone(err error) }

// AddFunc is a function used as an AddDone.
type AddFunc func(err error)

// AddDone calls f.
func (f AddFunc) AddDone(err error) { f(err) }

// Add sends an entry without waiting for the reply. done is called exactly
// once: nil when the bookie stored the entry durably, otherwise an error
// wrapping a sentinel of this package (ErrConnClosed when the connection
// breaks first, ErrTimeout after RequestTimeout). done runs on a connection
// goroutine (never the caller's), possibly concurrently with other
// callbacks of the same connection, and must not block. Requests are written
// in call order. req.Payload must not be modified until done is called.
func (c *Conn) Add(req *AddRequest, done AddDone) {
	cl := addCalls.Get().(*call)
	cl.req = Request{
		Op:       OpAdd,
		LedgerID: req.LedgerID,
		EntryID:  req.EntryID,
		LAC:      req.LAC,
		Checksum: req.Checksum,
		Recovery: req.Recovery,
		Payload:  req.Payload,
	}
	cl.done = done
	cl.holds.Store(2)
	if size := headerSize + addReqFixed + len(req.Payload) + crcSize; size > c.cfg.MaxFrameSize {
		c.completeLate(cl, fmt.Errorf("%w: add of %d bytes exceeds frame limit %d", ErrTooLarge, size, c.cfg.MaxFrameSize))
		return
	}
	if err := c.enqueue(cl); err != nil {
		c.completeLate(cl, err)
	}
}

// completeLate completes cl with err when no connection goroutine is
// left to do it (or the request never reached one): on a new goroutine,
// so callbacks never run on the caller's goroutine.
func (c *Conn) completeLate(cl *call, err error) {
	if cl.done != nil {
		go cl.done.AddDone(err)
		return
	}
	cl.res <- &result{err: err}
}

// enqueue registers cl and queues it for the writer. It fails if the
// connection is broken.
func (c *Conn) enqueue(cl *call) error {
	c.mu.Lock()
	if c.closeErr != nil {
		err := c.closeErr
		c.mu.Unlock()
		return err
	}
	cl.req.RequestID = c.nextID
	c.nextID++
	cl.deadline = time.Now().Add(c.cfg.RequestTimeout)
	c.pending[cl.req.RequestID] = cl
	c.queue = append(c.queue, cl)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return nil
}

// forget drops a synchronous call whose caller gave up.
func (c *Conn) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// do runs a synchronous request.
func (c *Conn) do(ctx context.Context, req Request) (*result, error) {
	cl := &call{req: req, res: make(chan *result, 1)}
	if err := c.enqueue(cl); err != nil {
		return nil, err
	}
	select {
	case r := <-cl.res:
		return r, r.err
	case <-ctx.Done():
		c.forget(cl.req.RequestID)
		return nil, ctx.Err()
	}
}

// Read reads one entry. The returned Payload is owned by the caller. The
// entry's checksum is verified (ErrChecksum). With ReadFenceLedger the
// bookie durably fences the ledger first.
func (c *Conn) Read(ctx context.Context, ledgerID, entryID int64, flags ReadFlags) (Entry, error) {
	r, err := c.do(ctx, Request{Op: OpRead, LedgerID: ledgerID, EntryID: entryID, ReadFlags: flags})
	if err != nil {
		return Entry{}, err
	}
	return r.entry, nil
}

// ReadLAC returns the highest LAC carried by any entry the bookie holds for
// the ledger and the highest entry id it holds.
func (c *Conn) ReadLAC(ctx context.Context, ledgerID int64) (lac, lastEntry int64, err error) {
	r, err := c.do(ctx, Request{Op: OpReadLAC, LedgerID: ledgerID})
	if err != nil {
		return 0, 0, err
	}
	return r.resp.LAC, r.resp.LastEntry, nil
}

// Fence durably fences the ledger on the bookie and returns its LAC (-1
// when the bookie holds no entry of it).
func (c *Conn) Fence(ctx context.Context, ledgerID int64) (lac int64, err error) {
	r, err := c.do(ctx, Request{Op: OpFence, LedgerID: ledgerID})
	if err != nil {
		return 0, err
	}
	return r.resp.LAC, nil
}

// DeleteLedger deletes the ledger on the bookie. Deleting an unknown ledger
// succeeds.
func (c *Conn) DeleteLedger(ctx context.Context, ledgerID int64) error {
	_, err := c.do(ctx, Request{Op: OpDeleteLedger, LedgerID: ledgerID})
	return err
}

// writeLoop encodes queued requests, flushing whenever the queue drains.
func (c *Conn) writeLoop() {
	defer c.wg.Done()
	var batch []*call
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		for {
			c.mu.Lock()
			batch, c.queue = c.queue, batch[:0]
			c.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			for i, cl := range batch {
				if err := c.fw.WriteRequest(&cl.req); err != nil {
					c.fail(fmt.Errorf("%w: write to %s: %w", ErrConnClosed, c.addr, err))
					return
				}
				batch[i] = nil
				cl.release()
			}
		}
		if err := c.fw.Flush(); err != nil {
			c.fail(fmt.Errorf("%w: write to %s: %w", ErrConnClosed, c.addr, err))
			return
		}
	}
}

// sweepLoop fails requests that outlived RequestTimeout.
func (c *Conn) sweepLoop() {
	defer c.wg.Done()
	tick := min(max(c.cfg.RequestTimeout/10, time.Millisecond), time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	var expired []*call
	for {
		select {
		case <-c.done:
			return
		case now := <-t.C:
			c.mu.Lock()
			for id, cl := range c.pending {
				if now.After(cl.deadline) {
					delete(c.pending, id)
					expired = append(expired, cl)
				}
			}
			c.mu.Unlock()
			for i, cl := range expired {
				c.complete(cl, nil, fmt.Errorf("%w: %s to %s after %s", ErrTimeout, cl.req.Op, c.addr, c.cfg.RequestTimeout))
				expired[i] = nil
			}
			expired = expired[:0]
		}
	}
}

// readLoop decodes responses until the connection breaks, then completes
// every pending call with the connection's error.
func (c *Conn) readLoop() {
	defer c.wg.Done()
	for {
		if err := c.readOne(); err != nil {
			c.fail(err)
			break
		}
	}
	c.mu.Lock()
	pending := c.pending
	c.pending = nil
	c.queue = nil
	err := c.closeErr
	c.mu.Unlock()
	for _, cl := range pending {
		c.complete(cl, nil, err)
	}
}

func (c *Conn) readOne() error {
	f, err := c.fr.ReadFrame()
	if err != nil {
		if c.Err() != nil {
			return c.Err()
		}
		return fmt.Errorf("%w: read from %s: %w", ErrConnClosed, c.addr, err)
	}
	resp, err := DecodeResponse(f)
	if err != nil {
		return fmt.Errorf("response from %s: %w", c.addr, err)
	}
	if resp.RequestID == 0 {
		return fmt.Errorf("%w: bookie %s closed the connection: %w: %s", ErrConnClosed, c.addr, resp.Status.Err(), resp.Message)
	}
	c.mu.Lock()
	cl := c.pending[resp.RequestID]
	delete(c.pending, resp.RequestID)
	c.mu.Unlock()
	if cl == nil {
		return nil // timed out or abandoned
	}
	if resp.Op != cl.req.Op && resp.Op != OpError {
		err := fmt.Errorf("%w: %s request %d answered by %s", ErrMalformed, cl.req.Op, resp.RequestID, resp.Op)
		c.complete(cl, nil, err)
		return err
	}
	c.complete(cl, &resp, nil)
	return nil
}

// complete finishes cl with resp (may be nil) or err.
func (c *Conn) complete(cl *call, resp *Response, err error) {
	if err == nil {
		if serr := resp.Status.Err(); serr != nil {
			err = fmt.Errorf("%w: %s ledger %d from %s: %s", serr, cl.req.Op, cl.req.LedgerID, c.addr, resp.Message)
		}
	}
	if cl.done != nil {
		cl.done.AddDone(err)
		cl.release()
		return
	}
	r := &result{err: err}
	if err == nil {
		r.resp = *resp
		r.resp.Payload = nil
		if cl.req.Op == OpRead {
			r.entry = Entry{
				LedgerID: resp.LedgerID,
				EntryID:  resp.EntryID,
				LAC:      resp.LAC,
				Checksum: resp.Checksum,
				Payload:  append([]byte(nil), resp.Payload...),
			}
			switch {
			case r.entry.LedgerID != cl.req.LedgerID || r.entry.EntryID != cl.req.EntryID:
				r.err = fmt.Errorf("%w: asked %d/%d, got %d/%d from %s", ErrMalformed,
					cl.req.LedgerID, cl.req.EntryID, r.entry.LedgerID, r.entry.EntryID, c.addr)
			case r.entry.Verify() != nil:
				r.err = fmt.Errorf("%w: entry %d/%d from %s", ErrChecksum, r.entry.LedgerID, r.entry.EntryID, c.addr)
			}
		}
	}
	cl.res <- r
}

// Pool keeps one live connection per bookie address, redialing broken ones.
// It is safe for concurrent use.
type Pool struct {
	cfg    ClientConfig
	mu     sync.Mutex
	conns  map[string]*poolEntry
	closed bool
}

type poolEntry struct {
	ready chan struct{} // closed once conn or err is set
	conn  *Conn
	err   error
}

// ErrPoolClosed is returned by Get after Close.
var ErrPoolClosed = errors.New("bookie: connection pool closed")

// NewPool returns an empty pool dialing with cfg.
func NewPool(cfg ClientConfig) *Pool {
	return &Pool{cfg: cfg, conns: make(map[string]*poolEntry)}
}

// Get returns the live connection to addr, dialing one if there is none or
// the previous one broke. Concurrent callers share one dial.
func (p *Pool) Get(ctx context.Context, addr string) (*Conn, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrPoolClosed
		}
		e := p.conns[addr]
		if e == nil {
			e = &poolEntry{ready: make(chan struct{})}
			p.conns[addr] = e
			p.mu.Unlock()
			return p.dial(ctx, addr, e)
		}
		p.mu.Unlock()
		select {
		case <-e.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if e.err != nil {
			return nil, e.err
		}
		select {
		case <-e.conn.Done():
			p.mu.Lock()
			if p.conns[addr] == e {
				delete(p.conns, addr)
			}
			p.mu.Unlock()
			e.conn.Close()
		default:
			return e.conn, nil
		}
	}
}

func (p *Pool) dial(ctx context.Context, addr string, e *poolEntry) (*Conn, error) {
	conn, err := Dial(ctx, addr, p.cfg)
	p.mu.Lock()
	if err == nil && p.closed {
		err = ErrPoolClosed
		defer conn.Close()
	}
	if err != nil {
		if p.conns[addr] == e {
			delete(p.conns, addr)
		}
		e.err = err
	} else {
		e.conn = conn
	}
	close(e.ready)
	p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return conn, nil
}

// Close closes every pooled connection and makes Get fail.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	entries := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, e := range entries {
		<-e.ready
		if e.conn != nil {
			e.conn.Close()
		}
	}
}
