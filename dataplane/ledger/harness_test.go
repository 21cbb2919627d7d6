package ledger

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/magnetar-dev/magnetar/dataplane/bookie"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/client"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage/memstorage"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

// cluster is a metadata store and n real bookie servers on loopback ports.
// A bookie can be stopped and started again at the same address on the
// same storage (a restart that keeps its disk).
type cluster struct {
	tb      testing.TB
	md      metadata.Store
	servers []*bookie.Server // nil while stopped
	stores  []storage.Storage
	dirs    []string
	addrs   []string
}

type clusterOpts struct {
	bookies int
	disk    bool // storage.Open on a temp dir instead of memstorage
}

func newCluster(tb testing.TB, o clusterOpts) *cluster {
	tb.Helper()
	if o.bookies == 0 {
		o.bookies = 1
	}
	md := memstore.New()
	tb.Cleanup(func() { md.Close() })
	c := &cluster{tb: tb, md: md}
	for i := 0; i < o.bookies; i++ {
		var st storage.Storage
		if o.disk {
			ds, err := storage.Open(storage.Config{Dir: tb.TempDir()})
			if err != nil {
				tb.Fatal(err)
			}
			st = ds
		} else {
			st = memstorage.New()
		}
		c.stores = append(c.stores, st)
		c.dirs = append(c.dirs, tb.TempDir())
		c.addrs = append(c.addrs, "127.0.0.1:0")
		c.servers = append(c.servers, nil)
		c.startBookie(i)
		tb.Cleanup(func() {
			c.stopBookie(i)
			if err := st.Close(); err != nil {
				tb.Errorf("storage close: %v", err)
			}
		})
	}
	waitUntil(tb, "bookies registered", func() bool {
		regs, err := bookie.ListAvailable(context.Background(), md)
		return err == nil && len(regs) == o.bookies
	})
	return c
}

// startBookie starts bookie i on its storage and data directory, at the
// address it had before if it ran already.
func (c *cluster) startBookie(i int) {
	c.tb.Helper()
	s, err := bookie.New(bookie.Config{ListenAddr: c.addrs[i], DataDir: c.dirs[i], Logger: quiet}, c.stores[i], c.md)
	if err != nil {
		c.tb.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		c.tb.Fatal(err)
	}
	c.servers[i], c.addrs[i] = s, s.Addr().String()
}

// stopBookie shuts bookie i down (its storage stays, for a restart).
func (c *cluster) stopBookie(i int) {
	s := c.servers[i]
	if s == nil {
		return
	}
	c.servers[i] = nil
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil {
		c.tb.Errorf("bookie shutdown: %v", err)
	}
}

func (c *cluster) newClient() *client.Client {
	pool := wire.NewPool(wire.ClientConfig{DialTimeout: time.Second, RequestTimeout: 5 * time.Second})
	c.tb.Cleanup(pool.Close)
	cl, err := client.New(client.Config{Metadata: c.md, Dialer: client.PoolDialer{Pool: pool},
		AddTimeout: 5 * time.Second, Logger: quiet})
	if err != nil {
		c.tb.Fatal(err)
	}
	return cl
}

// newFactory returns a factory with its own ledger client; it is closed at
// the end of the test unless the test closed or crashed it.
func (c *cluster) newFactory(defs Config) *Factory {
	f, err := NewFactory(FactoryConfig{Client: c.newClient(), Metadata: c.md, Defaults: defs, Logger: quiet})
	if err != nil {
		c.tb.Fatal(err)
	}
	c.tb.Cleanup(func() { _ = f.Close() })
	return f
}

// testConfig rolls over every 10 entries, at once.
func testConfig() Config {
	return Config{MaxEntriesPerLedger: 10, MinLedgerAge: -1, CursorPersistInterval: 10 * time.Millisecond}
}

func waitUntil(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func ctxT(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

func payload(i int) []byte { return []byte(fmt.Sprintf("msg-%06d", i)) }

func openML(tb testing.TB, f *Factory, name string, cfg *Config) *ManagedLedger {
	tb.Helper()
	ml, err := f.Open(ctxT(tb), name, cfg)
	if err != nil {
		tb.Fatalf("Open %s: %v", name, err)
	}
	return ml
}

// addN appends n entries (payload(first..first+n-1)) pipelined and checks
// that callbacks come in order with increasing positions.
func addN(tb testing.TB, ml *ManagedLedger, first, n int) []Position {
	tb.Helper()
	type res struct {
		i   int
		pos Position
		err error
	}
	ch := make(chan res, n)
	for i := first; i < first+n; i++ {
		ml.AddEntry(payload(i), func(p Position, err error) { ch <- res{i, p, err} })
	}
	var out []Position
	for k := 0; k < n; k++ {
		var r res
		select {
		case r = <-ch:
		case <-time.After(30 * time.Second):
			tb.Fatalf("add callbacks: got %d of %d", k, n)
		}
		if r.err != nil {
			tb.Fatalf("add %d: %v", r.i, r.err)
		}
		if r.i != first+k {
			tb.Fatalf("callback for add %d arrived as #%d", r.i, first+k)
		}
		if len(out) > 0 && !out[len(out)-1].Less(r.pos) {
			tb.Fatalf("position %v after %v", r.pos, out[len(out)-1])
		}
		out = append(out, r.pos)
	}
	return out
}

// readAll reads every entry from Earliest.
func readAll(tb testing.TB, ml *ManagedLedger) []Entry {
	tb.Helper()
	var out []Entry
	pos := Earliest
	for {
		ents, err := ml.Read(ctxT(tb), pos, 7, 0)
		if err != nil {
			tb.Fatalf("Read from %v: %v", pos, err)
		}
		if len(ents) == 0 {
			return out
		}
		out = append(out, ents...)
		pos = ml.Next(ents[len(ents)-1].Pos)
	}
}

func checkEntries(tb testing.TB, ents []Entry, first, n int, want []Position) {
	tb.Helper()
	if len(ents) != n {
		tb.Fatalf("read %d entries, want %d", len(ents), n)
	}
	for k, e := range ents {
		if string(e.Data) != string(payload(first+k)) {
			tb.Fatalf("entry %d at %v = %q, want %q", k, e.Pos, e.Data, payload(first+k))
		}
		if want != nil && e.Pos != want[k] {
			tb.Fatalf("entry %d at %v, was added at %v", k, e.Pos, want[k])
		}
	}
}
