// Command offloadbench measures tiered storage end to end: closed ledgers
// offloaded from a bookie to a real S3 server (versitygw, POSIX backend),
// cold sequential reads of the same entries from the bookie and from S3 in
// the same run, and the bookie disk freed once the bookie copies are
// deleted. It prints a Markdown table (docs/tiered-storage.md).
//
// Usage:
//
//	go run ./bench/offloadbench [-dir DIR] [-ledgers 4] [-ledger-mb 32] [-entry 8192]
//
// The bookie (disk storage under DIR/bookie, journal without fsync: writes
// are not measured) and versitygw (DIR/s3) run on this machine, on the same
// disk; the metadata store is in memory. "Cold" means a new managed-ledger
// factory and offloader with empty caches; the operating system's page
// cache is not dropped, so both reads may be served from memory below the
// servers.
package main

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/magnetar-dev/magnetar/dataplane/bookie"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/client"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/memstore"
	"github.com/magnetar-dev/magnetar/dataplane/offload"
	"github.com/magnetar-dev/magnetar/dataplane/offload/s3test"
)

func main() {
	dir := flag.String("dir", "", "working directory (default: a temporary one, removed at the end)")
	ledgers := flag.Int("ledgers", 4, "closed ledgers to offload")
	ledgerMB := flag.Int("ledger-mb", 32, "payload MiB per ledger")
	entry := flag.Int("entry", 8192, "entry size in bytes")
	flag.Parse()
	if err := run(*dir, *ledgers, *ledgerMB, *entry); err != nil {
		log.Fatal(err)
	}
}

func run(dir string, nLedgers, ledgerMB, entrySize int) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "offloadbench")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	bin, why := s3test.Binary()
	if bin == "" {
		return fmt.Errorf("offloadbench: %s", why)
	}
	if err := os.MkdirAll(filepath.Join(dir, "s3"), 0o755); err != nil {
		return err
	}
	srv, err := s3test.StartServer(bin, filepath.Join(dir, "s3"))
	if err != nil {
		return err
	}
	defer srv.Stop()
	const bucket = "offloadbench"
	if _, err := srv.Client("").CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		return err
	}

	md := memstore.New()
	defer md.Close()
	bdir := filepath.Join(dir, "bookie")
	// Small journal files, none recycled: GC can release the files of
	// deleted ledgers (the current file is never released).
	st, err := storage.Open(storage.Config{Dir: filepath.Join(bdir, "ledgers"), JournalNoSync: true,
		JournalMaxFileBytes: 8 << 20, JournalRecycleFiles: -1, Logger: quiet})
	if err != nil {
		return err
	}
	defer st.Close()
	bk, err := bookie.New(bookie.Config{ListenAddr: "127.0.0.1:0", DataDir: bdir, Logger: quiet}, st, md)
	if err != nil {
		return err
	}
	if err := bk.Start(ctx); err != nil {
		return err
	}
	defer bk.Shutdown(context.Background())
	for {
		regs, err := bookie.ListAvailable(ctx, md)
		if err == nil && len(regs) == 1 {
			break
		}
		time.Sleep(10 * time.Millisecond) // polling for the registration
	}
	pool := wire.NewPool(wire.ClientConfig{})
	defer pool.Close()
	cl, err := client.New(client.Config{Metadata: md, Dialer: client.PoolDialer{Pool: pool}, Logger: quiet})
	if err != nil {
		return err
	}
	perLedger := int64(ledgerMB<<20) / int64(entrySize)
	defs := ledger.Config{MaxEntriesPerLedger: perLedger, MinLedgerAge: -1, RetentionTime: -1, RetentionSize: -1,
		CacheSize: -1, Offload: ledger.OffloadPolicy{DeletionLag: -1}}
	ocfg := offload.Config{Driver: "s3", Bucket: bucket, Endpoint: srv.Endpoint, Region: s3test.Region,
		AccessKeyID: s3test.AccessKey, SecretAccessKey: s3test.SecretKey}
	newFactory := func() (*ledger.Factory, *offload.S3, error) {
		o, err := offload.New(ctx, ocfg, quiet)
		if err != nil {
			return nil, nil, err
		}
		f, err := ledger.NewFactory(ledger.FactoryConfig{Client: cl, Metadata: md, Defaults: defs, Logger: quiet, Offloader: o})
		return f, o, err
	}
	const name = "bench/offload"

	// Write the ledgers, then close the managed ledger so that every one
	// of them is closed.
	f, o, err := newFactory()
	if err != nil {
		return err
	}
	ml, err := f.Open(ctx, name, nil)
	if err != nil {
		return err
	}
	payload := make([]byte, entrySize)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	total := perLedger * int64(nLedgers)
	errc := make(chan error, 1)
	done := make(chan struct{})
	var acked int64
	for i := int64(0); i < total; i++ {
		ml.AddEntry(payload, func(_ ledger.Position, err error) {
			if err != nil {
				select {
				case errc <- err:
				default:
				}
			}
			acked++ // callbacks run one at a time, in order
			if acked == total {
				close(done)
			}
		})
	}
	select {
	case <-done:
	case err := <-errc:
		return err
	}
	if err := ml.Close(ctx); err != nil {
		return err
	}
	f.Close()
	o.Close()
	bytes := total * int64(entrySize)

	readAll := func(label string) (time.Duration, error) {
		f, o, err := newFactory()
		if err != nil {
			return 0, err
		}
		defer o.Close()
		defer f.Close()
		ml, err := f.Open(ctx, name, nil)
		if err != nil {
			return 0, err
		}
		start := time.Now()
		pos, n := ledger.Earliest, int64(0)
		for {
			ents, err := ml.Read(ctx, pos, 64, 0)
			if err != nil {
				return 0, fmt.Errorf("%s read at %v: %w", label, pos, err)
			}
			if len(ents) == 0 {
				break
			}
			n += int64(len(ents))
			pos = ml.Next(ents[len(ents)-1].Pos)
		}
		if n != total {
			return 0, fmt.Errorf("%s: read %d entries of %d", label, n, total)
		}
		return time.Since(start), nil
	}

	bookieRead, err := readAll("bookie")
	if err != nil {
		return err
	}
	diskBefore := du(bdir)

	// Offload every ledger (the managed ledger, reopened, writes none).
	f, o, err = newFactory()
	if err != nil {
		return err
	}
	ml, err = f.Open(ctx, name, nil)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := ml.OffloadPrefix(ledger.Latest); err != nil {
		return err
	}
	for ml.OffloadStatus().State == ledger.OffloadRunning {
		time.Sleep(5 * time.Millisecond) // polling for the background offload
	}
	offloadTime := time.Since(start)
	if st := ml.OffloadStatus(); st.State != ledger.OffloadSuccess {
		return fmt.Errorf("offload: %+v", st)
	}
	// The bookie copies are deleted by the pass after the offload.
	for {
		deleted := true
		for _, l := range ml.Ledgers() {
			deleted = deleted && l.Offload != nil && l.Offload.BookieDeleted
		}
		if deleted {
			break
		}
		time.Sleep(10 * time.Millisecond) // polling for the deletion pass
	}
	uploaded := o.Stats().BytesUploaded.Load()
	ml.Close(ctx)
	f.Close()
	o.Close()
	if err := st.Flush(); err != nil {
		return err
	}
	if _, err := st.RunGC(); err != nil {
		return err
	}
	diskAfter := du(bdir)

	s3Read, err := readAll("s3")
	if err != nil {
		return err
	}
	mbps := func(d time.Duration) float64 { return float64(bytes) / (1 << 20) / d.Seconds() }
	fmt.Printf("%d ledgers of %d MiB, %d-byte entries (%d entries, %.0f MiB)\n\n", nLedgers, ledgerMB, entrySize, total, float64(bytes)/(1<<20))
	fmt.Println("| measure | value |")
	fmt.Println("|---|---|")
	fmt.Printf("| offload throughput (bookie read + multipart upload + index) | %.1f MiB/s (%v, %.1f MiB uploaded) |\n", mbps(offloadTime), offloadTime.Round(time.Millisecond), float64(uploaded)/(1<<20))
	fmt.Printf("| cold sequential read from the bookie | %.1f MiB/s (%v) |\n", mbps(bookieRead), bookieRead.Round(time.Millisecond))
	fmt.Printf("| cold sequential read from S3 (1 MiB range reads, read-ahead 2) | %.1f MiB/s (%v) |\n", mbps(s3Read), s3Read.Round(time.Millisecond))
	fmt.Printf("| bookie disk before offload / after deletion and GC | %.1f MiB / %.1f MiB (%.1f MiB freed) |\n",
		float64(diskBefore)/(1<<20), float64(diskAfter)/(1<<20), float64(diskBefore-diskAfter)/(1<<20))
	return nil
}

// du returns the bytes of the files under dir.
func du(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
