package bookie

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage/memstorage"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quietLogger = slog.New(slog.DiscardHandler)

// startServer starts a bookie on a free loopback port; it is shut down when
// the test ends.
func startServer(t *testing.T, cfg Config, st storage.Storage, md metadata.Store) *Server {
	t.Helper()
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger
	}
	s, err := New(cfg, st, md)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdown(t, s) })
	return s
}

func shutdown(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

func dial(t *testing.T, s *Server) *wire.Conn {
	t.Helper()
	c, err := wire.Dial(context.Background(), s.Addr().String(), wire.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func addReq(ledger, entry, lac int64, payload string, recovery bool) *wire.AddRequest {
	p := []byte(payload)
	return &wire.AddRequest{LedgerID: ledger, EntryID: entry, LAC: lac, Payload: p,
		Checksum: wire.Checksum(ledger, entry, lac, p), Recovery: recovery}
}

func add(c *wire.Conn, req *wire.AddRequest) error {
	ch := make(chan error, 1)
	c.Add(req, wire.AddFunc(func(err error) { ch <- err }))
	return <-ch
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestPipelinedAddsAndReads(t *testing.T) {
	s := startServer(t, Config{}, memstorage.New(), nil)
	c := dial(t, s)
	const writers, perWriter = 8, 200
	var wg sync.WaitGroup
	errs := make(chan error, writers*perWriter)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var done sync.WaitGroup
			for e := range perWriter {
				done.Add(1)
				c.Add(addReq(int64(w), int64(e), int64(e)-1, fmt.Sprintf("w%d-e%d", w, e), false), wire.AddFunc(func(err error) {
					if err != nil {
						errs <- err
					}
					done.Done()
				}))
			}
			done.Wait()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("add failed: %v", err)
	}
	ctx := context.Background()
	for w := range writers {
		for _, e := range []int64{0, perWriter / 2, perWriter - 1} {
			got, err := c.Read(ctx, int64(w), e, 0)
			if err != nil {
				t.Fatalf("read %d/%d: %v", w, e, err)
			}
			if want := fmt.Sprintf("w%d-e%d", w, e); string(got.Payload) != want || got.LAC != e-1 {
				t.Fatalf("read %d/%d = %q lac %d", w, e, got.Payload, got.LAC)
			}
		}
		lac, last, err := c.ReadLAC(ctx, int64(w))
		if err != nil || lac != perWriter-2 || last != perWriter-1 {
			t.Fatalf("ReadLAC(%d) = %d, %d, %v", w, lac, last, err)
		}
	}
}

func TestReadErrors(t *testing.T) {
	s := startServer(t, Config{}, memstorage.New(), nil)
	c := dial(t, s)
	ctx := context.Background()
	if _, err := c.Read(ctx, 1, 0, 0); !errors.Is(err, wire.ErrNoSuchLedger) {
		t.Fatalf("read of unknown ledger = %v", err)
	}
	if _, _, err := c.ReadLAC(ctx, 1); !errors.Is(err, wire.ErrNoSuchLedger) {
		t.Fatalf("ReadLAC of unknown ledger = %v", err)
	}
	if err := add(c, addReq(1, 0, -1, "x", false)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(ctx, 1, 1, 0); !errors.Is(err, wire.ErrNoSuchEntry) {
		t.Fatalf("read of missing entry = %v", err)
	}
}

func TestFenceThenAdd(t *testing.T) {
	s := startServer(t, Config{}, memstorage.New(), nil)
	c := dial(t, s)
	ctx := context.Background()
	for e := range int64(3) {
		if err := add(c, addReq(5, e, e-1, "p", false)); err != nil {
			t.Fatal(err)
		}
	}
	lac, err := c.Fence(ctx, 5)
	if err != nil || lac != 1 {
		t.Fatalf("Fence = %d, %v; want 1", lac, err)
	}
	if err := add(c, addReq(5, 3, 2, "late", false)); !errors.Is(err, wire.ErrFenced) {
		t.Fatalf("add after fence = %v, want ErrFenced", err)
	}
	if err := add(c, addReq(5, 3, 2, "recovered", true)); err != nil {
		t.Fatalf("recovery add after fence = %v", err)
	}
	if e, err := c.Read(ctx, 5, 3, 0); err != nil || string(e.Payload) != "recovered" {
		t.Fatalf("read of recovered entry = %q, %v", e.Payload, err)
	}
	// Fencing an unknown ledger fences it anyway.
	if lac, err := c.Fence(ctx, 77); err != nil || lac != -1 {
		t.Fatalf("Fence of unknown ledger = %d, %v; want -1", lac, err)
	}
	if err := add(c, addReq(77, 0, -1, "p", false)); !errors.Is(err, wire.ErrFenced) {
		t.Fatalf("add to fenced unknown ledger = %v", err)
	}
}

func TestReadWithFenceFlag(t *testing.T) {
	st := memstorage.New()
	s := startServer(t, Config{}, st, nil)
	c := dial(t, s)
	ctx := context.Background()
	if err := add(c, addReq(9, 0, -1, "first", false)); err != nil {
		t.Fatal(err)
	}
	e, err := c.Read(ctx, 9, 0, wire.ReadFenceLedger)
	if err != nil || string(e.Payload) != "first" {
		t.Fatalf("fencing read = %q, %v", e.Payload, err)
	}
	if fenced, _ := st.IsFenced(9); !fenced {
		t.Fatal("ledger not fenced by the fencing read")
	}
	if err := add(c, addReq(9, 1, 0, "second", false)); !errors.Is(err, wire.ErrFenced) {
		t.Fatalf("add after fencing read = %v, want ErrFenced", err)
	}
	// A fencing read of a missing entry still fences.
	if _, err := c.Read(ctx, 10, 0, wire.ReadFenceLedger); !errors.Is(err, wire.ErrNoSuchEntry) {
		t.Fatalf("fencing read of empty ledger = %v, want ErrNoSuchEntry", err)
	}
	if fenced, _ := st.IsFenced(10); !fenced {
		t.Fatal("empty ledger not fenced by the fencing read")
	}
}

func TestDeleteLedger(t *testing.T) {
	s := startServer(t, Config{}, memstorage.New(), nil)
	c := dial(t, s)
	ctx := context.Background()
	if err := add(c, addReq(3, 0, -1, "x", false)); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteLedger(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(ctx, 3, 0, 0); !errors.Is(err, wire.ErrNoSuchLedger) {
		t.Fatalf("read after delete = %v", err)
	}
	if err := c.DeleteLedger(ctx, 3); err != nil {
		t.Fatalf("second delete = %v", err)
	}
}

func TestAddRejected(t *testing.T) {
	st := memstorage.New()
	s := startServer(t, Config{}, st, nil)
	c := dial(t, s)
	bad := addReq(1, 0, -1, "payload", false)
	bad.Checksum++
	if err := add(c, bad); !errors.Is(err, wire.ErrChecksum) {
		t.Fatalf("add with bad checksum = %v, want ErrChecksum", err)
	}
	if _, err := st.ReadEntry(1, 0); err == nil {
		t.Fatal("entry with bad checksum was stored")
	}
	st.SetReadOnly(errors.New("disk full"))
	if err := add(c, addReq(1, 0, -1, "payload", false)); !errors.Is(err, wire.ErrReadOnly) {
		t.Fatalf("add to read-only storage = %v, want ErrReadOnly", err)
	}
	st.SetReadOnly(nil)
	if err := add(c, addReq(1, 0, -1, "payload", false)); err != nil {
		t.Fatalf("add after read-only cleared = %v", err)
	}
}

// rawConn is a hand-driven client connection for sending invalid input.
type rawConn struct {
	nc net.Conn
	fr *wire.FrameReader
	fw *wire.FrameWriter
}

func rawDial(t *testing.T, s *Server, handshake bool) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	rc := &rawConn{nc: nc, fr: wire.NewFrameReader(nc, 0), fw: wire.NewFrameWriter(nc, 0)}
	if handshake {
		rc.send(t, &wire.Request{Op: wire.OpHandshake, RequestID: 1})
		if r := rc.recv(t); r.Op != wire.OpHandshake || r.Status != wire.StatusOK || r.BookieID != s.ID() {
			t.Fatalf("handshake response %+v", r)
		}
	}
	return rc
}

func (rc *rawConn) send(t *testing.T, r *wire.Request) {
	t.Helper()
	if err := rc.fw.WriteRequest(r); err != nil {
		t.Fatal(err)
	}
	if err := rc.fw.Flush(); err != nil {
		t.Fatal(err)
	}
}

func (rc *rawConn) recv(t *testing.T) wire.Response {
	t.Helper()
	rc.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := rc.fr.ReadFrame()
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	r, err := wire.DecodeResponse(f)
	if err != nil {
		t.Fatalf("decode response: %v", err)
	}
	return r
}

// expectClosed checks that the server closed the connection.
func (rc *rawConn) expectClosed(t *testing.T) {
	t.Helper()
	rc.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := rc.fr.ReadFrame(); err != io.EOF && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		t.Fatalf("connection still open after bad input: %v", err)
	}
}

func isReset(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && !oe.Timeout()
}

func TestMalformedInputClosesOnlyThatConnection(t *testing.T) {
	s := startServer(t, Config{MaxFrameSize: 1 << 16}, memstorage.New(), nil)
	good := dial(t, s)
	if err := add(good, addReq(1, 0, -1, "before", false)); err != nil {
		t.Fatal(err)
	}
	frame := wire.AppendFrame(nil, wire.Header{Op: wire.OpReadLAC, RequestID: 7}, make([]byte, 8))
	badCRC := append([]byte(nil), frame...)
	badCRC[len(badCRC)-1] ^= 0xff
	oversize := append([]byte(nil), frame...)
	binary.BigEndian.PutUint32(oversize, 1<<20)
	tests := []struct {
		name      string
		handshake bool
		input     []byte
		wantID    uint64
		wantOp    wire.Op
		want      error
	}{
		{"bad crc", true, badCRC, 0, wire.OpError, wire.ErrMalformed},
		{"oversize", true, oversize, 0, wire.OpError, wire.ErrTooLarge},
		{"short length", true, []byte{0, 0, 0, 1, 0, 0, 0, 0}, 0, wire.OpError, wire.ErrMalformed},
		{"unknown op", true, wire.AppendFrame(nil, wire.Header{Op: 0x55, RequestID: 9}, nil), 9, wire.OpError, wire.ErrUnsupported},
		{"truncated add body", true, wire.AppendFrame(nil, wire.Header{Op: wire.OpAdd, RequestID: 10}, make([]byte, 5)), 10, wire.OpAdd, wire.ErrMalformed},
		{"unknown flag", true, wire.AppendFrame(nil, wire.Header{Op: wire.OpFence, Flags: 4, RequestID: 11}, make([]byte, 8)), 11, wire.OpFence, wire.ErrMalformed},
		{"no handshake", false, frame, 7, wire.OpReadLAC, wire.ErrBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := rawDial(t, s, tt.handshake)
			if _, err := rc.nc.Write(tt.input); err != nil {
				t.Fatal(err)
			}
			r := rc.recv(t)
			if r.RequestID != tt.wantID || r.Op != tt.wantOp || !errors.Is(r.Status.Err(), tt.want) {
				t.Fatalf("error response %+v (%v), want id %d op %s %v", r, r.Status.Err(), tt.wantID, tt.wantOp, tt.want)
			}
			rc.expectClosed(t)
			// The other client is unaffected.
			if err := add(good, addReq(1, 1, 0, "after", false)); err != nil {
				t.Fatalf("other connection broken: %v", err)
			}
			select {
			case <-good.Done():
				t.Fatal("other connection closed")
			default:
			}
		})
	}
}

func TestSlowClientDoesNotBlockOthers(t *testing.T) {
	s := startServer(t, Config{MaxInflightPerConn: 4}, memstorage.New(), nil)
	// A client that pipelines adds and never reads a response: its socket
	// buffers fill, the server's writer for it blocks and its reader stops.
	slow := rawDial(t, s, true)
	payload := make([]byte, 64<<10)
	sum := wire.Checksum(1, 0, -1, payload)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 2000 {
			req := &wire.Request{Op: wire.OpAdd, RequestID: uint64(i + 2), LedgerID: 1, LAC: -1, Checksum: sum, Payload: payload}
			slow.nc.SetWriteDeadline(time.Now().Add(time.Second))
			if slow.fw.WriteRequest(req) != nil || slow.fw.Flush() != nil {
				return // back-pressure reached us
			}
		}
	}()
	fast := dial(t, s)
	ctx := context.Background()
	for e := range int64(50) {
		if err := add(fast, addReq(2, e, e-1, "fast", false)); err != nil {
			t.Fatalf("add on the fast connection: %v", err)
		}
	}
	if _, err := fast.Read(ctx, 2, 49, 0); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	// Shutdown must not hang on the stuck connection.
	sctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	s.Shutdown(sctx)
}

func TestPoolRedialAfterRestart(t *testing.T) {
	st := memstorage.New()
	cfg := Config{ListenAddr: "127.0.0.1:0", Logger: quietLogger}
	s1, err := New(cfg, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	addr := s1.Addr().String()
	pool := wire.NewPool(wire.ClientConfig{})
	defer pool.Close()
	ctx := context.Background()
	c1, err := pool.Get(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := pool.Get(ctx, addr); again != c1 {
		t.Fatal("pool dialed a second connection to a live bookie")
	}
	if err := add(c1, addReq(1, 0, -1, "one", false)); err != nil {
		t.Fatal(err)
	}
	shutdown(t, s1)
	<-c1.Done()

	cfg.ListenAddr = addr
	s2 := startServer(t, cfg, st, nil)
	c2, err := pool.Get(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if c2 == c1 {
		t.Fatal("pool returned the broken connection")
	}
	if e, err := c2.Read(ctx, 1, 0, 0); err != nil || string(e.Payload) != "one" {
		t.Fatalf("read through redialed connection = %q, %v", e.Payload, err)
	}
	_ = s2
}

func TestConfigValidate(t *testing.T) {
	bad := []Config{
		{ListenAddr: "nonsense"},
		{ID: "a/b"},
		{AdvertisedAddr: "no-port"},
		{MaxFrameSize: 10},
		{MaxInflightPerConn: -1},
	}
	for _, cfg := range bad {
		if _, err := New(cfg, memstorage.New(), nil); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", cfg, err)
		}
	}
	if _, err := New(Config{}, nil, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("nil storage accepted")
	}
}
