package wire

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeBookie answers handshakes and passes every other request to handle;
// a nil response means no reply. It serves one connection at a time.
type fakeBookie struct {
	ln     net.Listener
	handle func(Request) *Response
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func newFakeBookie(t *testing.T, handle func(Request) *Response) *fakeBookie {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fb := &fakeBookie{ln: ln, handle: handle}
	fb.wg.Add(1)
	go fb.accept()
	t.Cleanup(fb.close)
	return fb
}

func (fb *fakeBookie) addr() string { return fb.ln.Addr().String() }

func (fb *fakeBookie) accept() {
	defer fb.wg.Done()
	for {
		nc, err := fb.ln.Accept()
		if err != nil {
			return
		}
		fb.mu.Lock()
		fb.conns = append(fb.conns, nc)
		fb.mu.Unlock()
		fb.wg.Add(1)
		go fb.serve(nc)
	}
}

func (fb *fakeBookie) serve(nc net.Conn) {
	defer fb.wg.Done()
	defer nc.Close()
	fr := NewFrameReader(nc, 0)
	fw := NewFrameWriter(nc, 0)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		req, err := DecodeRequest(f)
		if err != nil {
			return
		}
		var resp *Response
		if req.Op == OpHandshake {
			resp = &Response{Op: OpHandshake, Version: ProtocolVersion, BookieID: "fake"}
		} else {
			resp = fb.handle(req)
		}
		if resp == nil {
			continue
		}
		resp.RequestID = req.RequestID
		if err := fw.WriteResponse(resp); err != nil {
			return
		}
		if err := fw.Flush(); err != nil {
			return
		}
	}
}

// cut closes every accepted connection.
func (fb *fakeBookie) cut() {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	for _, c := range fb.conns {
		c.Close()
	}
}

func (fb *fakeBookie) close() {
	fb.ln.Close()
	fb.cut()
	fb.wg.Wait()
}

func dialTest(t *testing.T, addr string, cfg ClientConfig) *Conn {
	t.Helper()
	c, err := Dial(context.Background(), addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// addWait runs one Add and waits for its callback.
func addWait(c *Conn, req *AddRequest) error {
	ch := make(chan error, 1)
	c.Add(req, AddFunc(func(err error) { ch <- err }))
	return <-ch
}

func TestClientHandshakeAndOps(t *testing.T) {
	payload := []byte("data")
	fb := newFakeBookie(t, func(r Request) *Response {
		switch r.Op {
		case OpAdd:
			return &Response{Op: OpAdd, LedgerID: r.LedgerID, EntryID: r.EntryID}
		case OpRead:
			if r.EntryID == 99 {
				return &Response{Op: OpRead, Status: StatusNoSuchEntry, Message: "nope"}
			}
			sum := Checksum(r.LedgerID, r.EntryID, 4, payload)
			if r.EntryID == 13 {
				sum++ // corrupt
			}
			return &Response{Op: OpRead, LedgerID: r.LedgerID, EntryID: r.EntryID, LAC: 4, Checksum: sum, Payload: payload}
		case OpReadLAC:
			return &Response{Op: OpReadLAC, LAC: 4, LastEntry: 5}
		case OpFence:
			return &Response{Op: OpFence, LAC: 3}
		case OpDeleteLedger:
			return &Response{Op: OpDeleteLedger}
		}
		return nil
	})
	c := dialTest(t, fb.addr(), ClientConfig{})
	if c.BookieID() != "fake" || c.Addr() != fb.addr() {
		t.Fatalf("BookieID %q Addr %q", c.BookieID(), c.Addr())
	}
	ctx := context.Background()
	if err := addWait(c, &AddRequest{LedgerID: 1, EntryID: 0, LAC: -1, Payload: payload}); err != nil {
		t.Fatalf("Add: %v", err)
	}
	e, err := c.Read(ctx, 1, 5, 0)
	if err != nil || string(e.Payload) != "data" || e.LAC != 4 || e.EntryID != 5 {
		t.Fatalf("Read = %+v, %v", e, err)
	}
	if _, err := c.Read(ctx, 1, 13, 0); !errors.Is(err, ErrChecksum) {
		t.Fatalf("corrupt Read = %v, want ErrChecksum", err)
	}
	if _, err := c.Read(ctx, 1, 99, 0); !errors.Is(err, ErrNoSuchEntry) {
		t.Fatalf("missing Read = %v, want ErrNoSuchEntry", err)
	}
	if lac, last, err := c.ReadLAC(ctx, 1); err != nil || lac != 4 || last != 5 {
		t.Fatalf("ReadLAC = %d, %d, %v", lac, last, err)
	}
	if lac, err := c.Fence(ctx, 1); err != nil || lac != 3 {
		t.Fatalf("Fence = %d, %v", lac, err)
	}
	if err := c.DeleteLedger(ctx, 1); err != nil {
		t.Fatalf("DeleteLedger = %v", err)
	}
}

func TestClientErrorStatuses(t *testing.T) {
	// Each status the bookie can send comes back as its sentinel, for every op.
	var status Status
	fb := newFakeBookie(t, func(r Request) *Response {
		return &Response{Op: r.Op, Status: status, Message: "detail"}
	})
	c := dialTest(t, fb.addr(), ClientConfig{})
	ctx := context.Background()
	for _, e := range statusTable {
		status = e.status
		ops := map[string]error{
			"add": addWait(c, &AddRequest{LedgerID: 1}),
			"read": func() error {
				_, err := c.Read(ctx, 1, 0, 0)
				return err
			}(),
			"readlac": func() error {
				_, _, err := c.ReadLAC(ctx, 1)
				return err
			}(),
			"fence": func() error {
				_, err := c.Fence(ctx, 1)
				return err
			}(),
			"delete": c.DeleteLedger(ctx, 1),
		}
		for name, err := range ops {
			if !errors.Is(err, e.err) {
				t.Fatalf("%s with status %d = %v, want %v", name, e.status, err, e.err)
			}
		}
	}
}

func TestClientTimeout(t *testing.T) {
	fb := newFakeBookie(t, func(Request) *Response { return nil })
	c := dialTest(t, fb.addr(), ClientConfig{RequestTimeout: 50 * time.Millisecond})
	if err := addWait(c, &AddRequest{LedgerID: 1}); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Add = %v, want ErrTimeout", err)
	}
	if _, err := c.Fence(context.Background(), 1); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Fence = %v, want ErrTimeout", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Read(ctx, 1, 1, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Read with canceled ctx = %v", err)
	}
	select {
	case <-c.Done():
		t.Fatal("a timeout must not break the connection")
	default:
	}
}

func TestClientConnectionBreaks(t *testing.T) {
	fb := newFakeBookie(t, func(Request) *Response { return nil })
	c := dialTest(t, fb.addr(), ClientConfig{})
	const n = 100
	errs := make(chan error, n)
	for i := range n {
		c.Add(&AddRequest{LedgerID: 1, EntryID: int64(i)}, AddFunc(func(err error) { errs <- err }))
	}
	fb.cut()
	for range n {
		if err := <-errs; !errors.Is(err, ErrConnClosed) {
			t.Fatalf("pending Add = %v, want ErrConnClosed", err)
		}
	}
	<-c.Done()
	if err := addWait(c, &AddRequest{LedgerID: 1}); !errors.Is(err, ErrConnClosed) {
		t.Fatalf("Add after break = %v, want ErrConnClosed", err)
	}
	if _, err := c.Fence(context.Background(), 1); !errors.Is(err, ErrConnClosed) {
		t.Fatalf("Fence after break = %v, want ErrConnClosed", err)
	}
}

func TestClientAddTooLarge(t *testing.T) {
	fb := newFakeBookie(t, func(r Request) *Response { return &Response{Op: r.Op} })
	c := dialTest(t, fb.addr(), ClientConfig{MaxFrameSize: 4096})
	if err := addWait(c, &AddRequest{LedgerID: 1, Payload: make([]byte, 4096)}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Add = %v, want ErrTooLarge", err)
	}
	if err := addWait(c, &AddRequest{LedgerID: 1, Payload: make([]byte, 1024)}); err != nil {
		t.Fatalf("Add after oversize = %v", err)
	}
}

func TestDialErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	// A listener that never answers the handshake.
	var wg sync.WaitGroup
	wg.Add(1)
	accepted := make(chan net.Conn, 1)
	go func() {
		defer wg.Done()
		if nc, err := ln.Accept(); err == nil {
			accepted <- nc
		}
	}()
	if _, err := Dial(context.Background(), addr, ClientConfig{DialTimeout: 100 * time.Millisecond}); !errors.Is(err, ErrConnClosed) {
		t.Fatalf("Dial without handshake reply = %v, want ErrConnClosed", err)
	}
	ln.Close()
	wg.Wait()
	(<-accepted).Close()
	if _, err := Dial(context.Background(), addr, ClientConfig{}); !errors.Is(err, ErrConnClosed) {
		t.Fatalf("Dial to closed port = %v, want ErrConnClosed", err)
	}
	if _, err := Dial(context.Background(), addr, ClientConfig{RequestTimeout: -1}); err == nil {
		t.Fatal("negative config accepted")
	}
}

// TestClientAddsRecycledCalls: Add's calls are recycled; thousands of
// concurrent adds, half answered and half left to time out, each reach the
// bookie exactly once with their own ids and payload, and each callback
// gets its own outcome. (A regression test at volume: it does not force
// the narrow case of a call timing out before the writer encoded it.)
func TestClientAddsRecycledCalls(t *testing.T) {
	const n, workers = 4000, 4
	var mu sync.Mutex
	seen := make(map[int64]int, n)
	fb := newFakeBookie(t, func(r Request) *Response {
		mu.Lock()
		seen[r.EntryID]++
		ok := string(r.Payload) == payloadOf(r.EntryID)
		mu.Unlock()
		if !ok {
			t.Errorf("entry %d arrived with payload %q", r.EntryID, r.Payload)
		}
		if r.EntryID%2 == 1 {
			return nil // left to time out
		}
		return &Response{Op: OpAdd, LedgerID: r.LedgerID, EntryID: r.EntryID}
	})
	// Answered adds must not time out: under -race on a loaded machine,
	// 200 ms was once too short for one of the 2,000.
	c := dialTest(t, fb.addr(), ClientConfig{RequestTimeout: time.Second})
	errs := make([]error, n)
	var done sync.WaitGroup
	done.Add(n)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := int64(w); id < n; id += workers {
				c.Add(&AddRequest{LedgerID: 9, EntryID: id, Payload: []byte(payloadOf(id))},
					AddFunc(func(err error) { errs[id] = err; done.Done() }))
			}
		}()
	}
	wg.Wait()
	done.Wait()
	for id, err := range errs {
		if want := id%2 == 1; errors.Is(err, ErrTimeout) != want || (!want && err != nil) {
			t.Fatalf("entry %d: %v (want a timeout: %v)", id, err, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != n {
		t.Fatalf("the bookie saw %d distinct entries, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Fatalf("entry %d sent %d times", id, k)
		}
	}
}

func payloadOf(id int64) string { return "entry-" + strconv.FormatInt(id, 10) }
