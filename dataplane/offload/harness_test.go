package offload_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bookie"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/client"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage/memstorage"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/memstore"
	"github.com/magnetar-dev/magnetar/dataplane/offload"
	"github.com/magnetar-dev/magnetar/dataplane/offload/s3test"
)

var quiet = slog.New(slog.DiscardHandler)

func logger() *slog.Logger {
	if os.Getenv("OFFLOAD_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return quiet
}

// env is a metadata store, one real bookie server, a ledger client and a
// real S3 server (versitygw) with a bucket.
type env struct {
	tb     testing.TB
	md     metadata.Store
	client *client.Client
	bk     *bookie.Server
	s3     *s3test.Server
	bucket string
}

func newEnv(tb testing.TB) *env {
	tb.Helper()
	srv := s3test.Start(tb)
	md := memstore.New()
	tb.Cleanup(func() { md.Close() })
	st := memstorage.New()
	bk, err := bookie.New(bookie.Config{ListenAddr: "127.0.0.1:0", DataDir: tb.TempDir(), Logger: quiet}, st, md)
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	if err := bk.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		bk.Shutdown(sctx)
		st.Close()
	})
	waitUntil(tb, "bookie registered", func() bool {
		regs, err := bookie.ListAvailable(ctx, md)
		return err == nil && len(regs) == 1
	})
	pool := wire.NewPool(wire.ClientConfig{DialTimeout: time.Second, RequestTimeout: 5 * time.Second})
	tb.Cleanup(pool.Close)
	cl, err := client.New(client.Config{Metadata: md, Dialer: client.PoolDialer{Pool: pool}, AddTimeout: 5 * time.Second, Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	e := &env{tb: tb, md: md, client: cl, bk: bk, s3: srv, bucket: "offload-test"}
	srv.CreateBucket(tb, e.bucket)
	return e
}

// offloaderConfig uses the smallest blocks S3 allows and small read
// buffers, so that a ledger spans several range reads.
func (e *env) offloaderConfig(endpoint string) offload.Config {
	if endpoint == "" {
		endpoint = e.s3.Endpoint
	}
	return offload.Config{
		Driver: "s3", Bucket: e.bucket, Endpoint: endpoint, Region: s3test.Region,
		AccessKeyID: s3test.AccessKey, SecretAccessKey: s3test.SecretKey,
		MaxBlockSize: offload.MinBlockSize, ReadBufferSize: 16 << 10,
		RequestTimeout: 5 * time.Second, RetryBackoff: 50 * time.Millisecond, Attempts: 8,
	}
}

func (e *env) newOffloader(cfg offload.Config) *offload.S3 {
	e.tb.Helper()
	o, err := offload.New(context.Background(), cfg, logger())
	if err != nil {
		e.tb.Fatal(err)
	}
	e.tb.Cleanup(func() { o.Close() })
	return o
}

func (e *env) newFactory(o ledger.Offloader, defs ledger.Config) *ledger.Factory {
	e.tb.Helper()
	f, err := ledger.NewFactory(ledger.FactoryConfig{Client: e.client, Metadata: e.md, Defaults: defs, Logger: logger(), Offloader: o})
	if err != nil {
		e.tb.Fatal(err)
	}
	e.tb.Cleanup(func() { f.Close() })
	return f
}

// smallLedgers rolls over every 50 entries and checks for offload work
// often.
func smallLedgers(pol ledger.OffloadPolicy) ledger.Config {
	return ledger.Config{MaxEntriesPerLedger: 50, MinLedgerAge: -1, CursorPersistInterval: 10 * time.Millisecond,
		TrimCheckInterval: 50 * time.Millisecond, RetentionTime: -1, RetentionSize: -1, Offload: pol,
		CacheSize: -1} // no entry cache: reads go to the bookies or S3
}

func waitUntil(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ctxT(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// payload is entry i's data: 2 KiB, unique per entry.
func payload(i int) []byte {
	b := make([]byte, 2048)
	s := fmt.Sprintf("entry-%06d-", i)
	for k := range b {
		b[k] = s[k%len(s)]
	}
	return b
}

func addN(tb testing.TB, ml *ledger.ManagedLedger, first, n int) []ledger.Position {
	tb.Helper()
	out := make([]ledger.Position, 0, n)
	for i := first; i < first+n; i++ {
		p, err := ml.AddEntrySync(ctxT(tb), payload(i))
		if err != nil {
			tb.Fatalf("add %d: %v", i, err)
		}
		out = append(out, p)
	}
	return out
}

// readAll reads every entry from Earliest, chunk entries per Read.
func readAll(tb testing.TB, ml *ledger.ManagedLedger, chunk int) []ledger.Entry {
	tb.Helper()
	var out []ledger.Entry
	pos := ledger.Earliest
	for {
		ents, err := ml.Read(ctxT(tb), pos, chunk, 0)
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

func checkEntries(tb testing.TB, ents []ledger.Entry, want []ledger.Position) {
	tb.Helper()
	if len(ents) != len(want) {
		tb.Fatalf("read %d entries, want %d", len(ents), len(want))
	}
	for k, e := range ents {
		if string(e.Data) != string(payload(k)) {
			tb.Fatalf("entry %d at %v differs from what was added", k, e.Pos)
		}
		if e.Pos != want[k] {
			tb.Fatalf("entry %d at %v, was added at %v", k, e.Pos, want[k])
		}
	}
}

// bookieHas reports whether the bookie ledger still exists.
func (e *env) bookieHas(id int64) bool {
	_, err := e.client.LedgerMetadata(context.Background(), id)
	return err == nil
}

// openML opens a managed ledger of smallLedgers(pol) through a new factory
// and offloader of the env's S3 server.
func (e *env) openML(pol ledger.OffloadPolicy, name string) (*offload.S3, *ledger.Factory, *ledger.ManagedLedger) {
	e.tb.Helper()
	o := e.newOffloader(e.offloaderConfig(""))
	f := e.newFactory(o, smallLedgers(pol))
	ml, err := f.Open(ctxT(e.tb), name, nil)
	if err != nil {
		e.tb.Fatal(err)
	}
	return o, f, ml
}
