package offload_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"go.uber.org/goleak"

	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
	"github.com/magnetar-dev/magnetar/dataplane/offload"
	"github.com/magnetar-dev/magnetar/internal/tcpproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// offloadedAll waits until every closed ledger of ml but the current one
// is offloaded and (with deleted) its bookie copy is gone.
func offloadedAll(t *testing.T, ml *ledger.ManagedLedger, deleted bool) []ledger.LedgerInfo {
	t.Helper()
	var ls []ledger.LedgerInfo
	waitUntil(t, "ledgers offloaded", func() bool {
		ls = ml.Ledgers()
		for _, l := range ls[:len(ls)-1] {
			if !l.Offloaded() || deleted && !l.Offload.BookieDeleted {
				return false
			}
		}
		return len(ls) > 1
	})
	return ls
}

// Closed ledgers go to S3 by policy (threshold 0: every closed ledger),
// their bookie copies are deleted at once (lag < 0), and every entry reads
// back intact and in order across S3 and bookie ledgers, with range reads
// and read-ahead; the objects are a data and an index object per ledger.
func TestOffloadReadBack(t *testing.T) {
	e := newEnv(t)
	_, _, ml := e.openML(ledger.OffloadPolicy{Enabled: true, Threshold: 0, DeletionLag: -1}, "tenant/ns/offload-readback")
	want := addN(t, ml, 0, 230) // 4 closed ledgers of 50 and the current one
	ls := offloadedAll(t, ml, true)
	if len(ls) != 5 {
		t.Fatalf("%d ledgers, want 5", len(ls))
	}
	for _, l := range ls[:4] {
		if e.bookieHas(l.ID) {
			t.Fatalf("bookie copy of offloaded ledger %d still exists", l.ID)
		}
	}
	keys := e.s3.Keys(t, e.bucket)
	if len(keys) != 8 {
		t.Fatalf("bucket holds %v, want a data and an index object for each of 4 ledgers", keys)
	}
	for _, l := range ls[:4] {
		data := l.Offload.UID + "-ledger-" + itoa(l.ID)
		if !slices.Contains(keys, data) || !slices.Contains(keys, data+"-index") {
			t.Fatalf("objects of ledger %d missing from %v", l.ID, keys)
		}
	}
	if got := ml.OffloadedSize(); got != 200*2048 {
		t.Fatalf("OffloadedSize %d, want %d", got, 200*2048)
	}

	checkEntries(t, readAll(t, ml, 7), want) // recent entries come from the cache

	// A fresh factory (another broker, cold caches) reads the offloaded
	// ledgers from S3, found through the record alone.
	if err := ml.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	o2 := e.newOffloader(e.offloaderConfig(""))
	f2 := e.newFactory(o2, smallLedgers(ledger.OffloadPolicy{}))
	ml2, err := f2.Open(ctxT(t), "tenant/ns/offload-readback", nil)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, readAll(t, ml2, 7), want)
	st := o2.Stats()
	// 4 ledgers of 100 KiB in 16 KiB range reads: at least 7 each.
	if n := st.RangeReads.Load(); n < 28 {
		t.Fatalf("%d range reads of S3, want at least 28", n)
	}
	if st.ReadAheads.Load() == 0 || st.CacheHits.Load() == 0 {
		t.Fatalf("a sequential reader had %d read-aheads, %d cache hits", st.ReadAheads.Load(), st.CacheHits.Load())
	}
	// A random read in the middle of an offloaded ledger.
	got, err := ml2.Read(ctxT(t), want[123], 3, 0)
	if err != nil || len(got) != 3 || got[0].Pos != want[123] || string(got[2].Data) != string(payload(125)) {
		t.Fatalf("read at %v: %d entries, %v", want[123], len(got), err)
	}
}

// A manual offload (OffloadPrefix) copies the ledgers before the given
// position and reports its status; with a deletion lag the bookie copy is
// kept and read from until the lag passes.
func TestManualOffloadStatusAndLag(t *testing.T) {
	e := newEnv(t)
	o, _, ml := e.openML(ledger.OffloadPolicy{DeletionLag: time.Hour}, "tenant/ns/manual")
	want := addN(t, ml, 0, 160)
	if st := ml.OffloadStatus(); st.State != ledger.OffloadNotRun {
		t.Fatalf("status %+v before any offload", st)
	}
	time.Sleep(200 * time.Millisecond) // several trim passes: nothing is offloaded without a policy or a request
	for _, l := range ml.Ledgers() {
		if l.Offload != nil {
			t.Fatalf("ledger %d offloaded without policy or request", l.ID)
		}
	}
	upTo := want[120] // in the third ledger: the first two go
	if err := ml.OffloadPrefix(upTo); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "offload done", func() bool { return ml.OffloadStatus().State == ledger.OffloadSuccess })
	st := ml.OffloadStatus()
	ls := ml.Ledgers()
	if !ls[0].Offloaded() || !ls[1].Offloaded() || ls[2].Offload != nil {
		t.Fatalf("after offload up to %v: %+v", upTo, ls)
	}
	if st.FirstUnoffloaded != (ledger.Position{LedgerID: ls[2].ID, EntryID: 0}) || st.LastLedger != ls[1].ID || st.LastSuccess == 0 {
		t.Fatalf("status %+v", st)
	}
	for _, l := range ls[:2] {
		if !e.bookieHas(l.ID) || l.Offload.BookieDeleted {
			t.Fatalf("bookie copy of ledger %d deleted before the lag", l.ID)
		}
	}
	before := o.Stats().RangeReads.Load()
	checkEntries(t, readAll(t, ml, 10), want)
	if o.Stats().RangeReads.Load() != before {
		t.Fatal("read S3 while the bookie copy exists (bookkeeper-first)")
	}
	// tiered-storage-first: the same reads go to S3 although the bookie
	// copies exist.
	cfg := ml.Config()
	cfg.Offload.TieredFirst = true
	if err := ml.Reconfigure(&cfg); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, readAll(t, ml, 10), want)
	tiered := o.Stats().RangeReads.Load()
	if tiered == before {
		t.Fatal("tiered-storage-first read no S3")
	}
	cfg.Offload.TieredFirst = false
	if err := ml.Reconfigure(&cfg); err != nil {
		t.Fatal(err)
	}
	o.DropCache()
	checkEntries(t, readAll(t, ml, 10), want)
	if o.Stats().RangeReads.Load() != tiered {
		t.Fatal("bookkeeper-first read S3 while the bookie copies exist")
	}
	// Policy change: no lag. The next pass deletes the bookie copies.
	cfg.Offload.DeletionLag = -1
	if err := ml.Reconfigure(&cfg); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "bookie copies deleted", func() bool { return !e.bookieHas(ls[0].ID) && !e.bookieHas(ls[1].ID) })
	checkEntries(t, readAll(t, ml, 10), want)
	if o.Stats().RangeReads.Load() == tiered {
		t.Fatal("no S3 read after the bookie copies went")
	}
}

// Retention deletes offloaded ledgers in S3 too, and deleting the managed
// ledger deletes the rest.
func TestRetentionDeletesOffloaded(t *testing.T) {
	e := newEnv(t)
	o := e.newOffloader(e.offloaderConfig(""))
	defs := smallLedgers(ledger.OffloadPolicy{Enabled: true, DeletionLag: -1})
	f := e.newFactory(o, defs)
	name := "tenant/ns/retention"
	ml, err := f.Open(ctxT(t), name, nil)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := ml.OpenCursor(ctxT(t), "sub", ledger.InitialEarliest)
	if err != nil {
		t.Fatal(err)
	}
	want := addN(t, ml, 0, 120)
	ls := offloadedAll(t, ml, true)
	if n := len(e.s3.Keys(t, e.bucket)); n != 4 {
		t.Fatalf("%d objects, want 4", n)
	}
	// Consume everything with retention off: consumed ledgers go,
	// including their S3 objects.
	cfg := ml.Config()
	cfg.RetentionTime, cfg.RetentionSize = 0, 0
	if err := ml.Reconfigure(&cfg); err != nil {
		t.Fatal(err)
	}
	if err := cur.AckCumulative(want[len(want)-1]); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "consumed offloaded ledgers trimmed", func() bool { return len(ml.Ledgers()) == 1 })
	waitUntil(t, "S3 objects of trimmed ledgers deleted", func() bool { return len(e.s3.Keys(t, e.bucket)) == 0 })
	_ = ls
	// Another batch offloaded, then the topic is deleted.
	addN(t, ml, 0, 60)
	offloadedAll(t, ml, false)
	if err := f.Delete(ctxT(t), name); err != nil {
		t.Fatal(err)
	}
	if keys := e.s3.Keys(t, e.bucket); len(keys) != 0 {
		t.Fatalf("after delete, bucket holds %v", keys)
	}
}

// A copy left half-done by a crashed owner (its identity in the record, a
// multipart upload with a part in S3) is found at the next open: the upload
// is aborted, the identity cleared, and the ledger offloaded again; it
// stays readable from the bookies throughout.
func TestPartialOffloadCleanedUpAtOpen(t *testing.T) {
	e := newEnv(t)
	name := "tenant/ns/partial"
	// First owner: no offloader; two closed ledgers.
	f1 := e.newFactory(nil, smallLedgers(ledger.OffloadPolicy{}))
	ml1, err := f1.Open(ctxT(t), name, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := addN(t, ml1, 0, 110)
	if err := ml1.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	ls := ml1.Ledgers()
	// What a crash mid-offload leaves: the record names the copy, S3
	// holds an unfinished upload of its data object.
	uid := "0123456789abcdef0123456789abcdef"
	dataKey := uid + "-ledger-" + itoa(ls[0].ID)
	cl := e.s3.Client("")
	ctx := ctxT(t)
	up, err := cl.CreateMultipartUpload(ctx, createUpload(e.bucket, dataKey))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.UploadPart(ctx, uploadPart(e.bucket, dataKey, up.UploadId, []byte("half a block"))); err != nil {
		t.Fatal(err)
	}
	editRecord(t, e.md, name, func(rec map[string]any) {
		l0 := rec["ledgers"].([]any)[0].(map[string]any)
		l0["offload"] = map[string]any{"uid": uid, "startedMs": time.Now().UnixMilli(), "driverMetadata": map[string]string{
			"driver": "s3", "bucket": e.bucket, "region": "us-east-1", "endpoint": e.s3.Endpoint, "prefix": ""}}
	})
	if got := e.s3.Uploads(t, e.bucket); len(got) != 1 {
		t.Fatalf("uploads %v", got)
	}

	o := e.newOffloader(e.offloaderConfig(""))
	f2 := e.newFactory(o, smallLedgers(ledger.OffloadPolicy{Enabled: true, DeletionLag: -1}))
	ml2, err := f2.Open(ctxT(t), name, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, readAll(t, ml2, 50), want) // readable while being cleaned up
	waitUntil(t, "partial upload aborted", func() bool { return len(e.s3.Uploads(t, e.bucket)) == 0 })
	waitUntil(t, "ledgers offloaded again", func() bool {
		for _, l := range ml2.Ledgers() {
			if !l.Offloaded() || !l.Offload.BookieDeleted {
				return false
			}
		}
		return true
	})
	if l := ml2.Ledgers()[0]; l.Offload.UID == uid {
		t.Fatalf("ledger %d kept the crashed copy's uid", l.ID)
	}
	for _, k := range e.s3.Keys(t, e.bucket) {
		if strings.HasPrefix(k, uid) {
			t.Fatalf("object %s of the crashed copy left", k)
		}
	}
	checkEntries(t, readAll(t, ml2, 50), want)
}

// S3 faults through a TCP proxy: connections cut during the upload and
// during reads, and a link slower than the request timeout; uploads are
// resumed part by part, reads retried, nothing is lost.
func TestS3FaultsThroughProxy(t *testing.T) {
	e := newEnv(t)
	px, cfg := e.proxied(t)
	cfg.RequestTimeout = 500 * time.Millisecond
	o := e.newOffloader(cfg)
	f := e.newFactory(o, smallLedgers(ledger.OffloadPolicy{DeletionLag: -1}))
	ml, err := f.Open(ctxT(t), "tenant/ns/faults", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := addN(t, ml, 0, 210)

	// Cut the link once the upload is under way, restore it later.
	px.Cut()
	if err := ml.OffloadPrefix(want[len(want)-1]); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "retries while cut", func() bool { return o.Stats().Retries.Load() >= 3 })
	px.Restore()
	waitUntil(t, "offload done", func() bool {
		st := ml.OffloadStatus().State
		return st == ledger.OffloadSuccess || st == ledger.OffloadError
	})
	if st := ml.OffloadStatus(); st.State != ledger.OffloadSuccess {
		t.Fatalf("offload through faults: %+v", st)
	}
	offloadedAll(t, ml, true)
	if ups := e.s3.Uploads(t, e.bucket); len(ups) != 0 {
		t.Fatalf("unfinished uploads left: %v", ups)
	}

	// Reads through a cut link, then through a link slower than the
	// request timeout, each fixed while the read retries.
	for _, fault := range []string{"cut", "slow"} {
		o.DropCache()
		retries := o.Stats().Retries.Load()
		switch fault {
		case "cut":
			px.Cut()
		case "slow":
			px.SetDelay(2 * cfg.RequestTimeout)
		}
		done := make(chan []ledger.Entry)
		go func() {
			ents, err := ml.Read(context.Background(), ledger.Earliest, 40, 0)
			if err != nil {
				t.Errorf("read through %s link: %v", fault, err)
			}
			done <- ents
		}()
		waitUntil(t, "read retried", func() bool { return o.Stats().Retries.Load() > retries })
		px.Restore()
		px.SetDelay(0)
		ents := <-done
		checkEntries(t, ents, want[:40])
	}
	checkEntries(t, readAll(t, ml, 33), want)
}

func editRecord(t *testing.T, md metadata.Store, name string, fn func(map[string]any)) {
	t.Helper()
	// The test's store holds this one managed ledger.
	kids, err := md.Children(ctxT(t), "/managed-ledgers")
	if err != nil || len(kids) != 1 {
		t.Fatalf("managed ledgers %v: %v", kids, err)
	}
	key := "/managed-ledgers/" + kids[0]
	kv, err := md.Get(ctxT(t), key)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		t.Fatal(err)
	}
	fn(rec)
	b, _ := json.Marshal(rec)
	if _, err := md.Put(ctxT(t), key, b, kv.Version); err != nil {
		t.Fatal(err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func createUpload(bucket, key string) *s3.CreateMultipartUploadInput {
	return &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key)}
}

func uploadPart(bucket, key string, id *string, data []byte) *s3.UploadPartInput {
	return &s3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String(key), UploadId: id, PartNumber: aws.Int32(1),
		Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data)))}
}

// A ledger larger than a block is uploaded as several parts (5 MiB
// blocks) and its entries read back, also across block boundaries.
func TestMultiBlockLedger(t *testing.T) {
	e := newEnv(t)
	o := e.newOffloader(e.offloaderConfig(""))
	ml, want := bigLedger(t, e, o, "tenant/ns/big")
	if err := ml.OffloadPrefix(want[60]); err != nil {
		t.Fatal(err)
	}
	ls := offloadedAll(t, ml, true)
	if b := ls[0].Offload.Metadata["blocks"]; b != "3" {
		t.Fatalf("12 MiB ledger in %s blocks of 5 MiB, want 3", b)
	}
	if n := o.Stats().PartsUploaded.Load(); n != 3 {
		t.Fatalf("%d parts uploaded", n)
	}
	for _, chunk := range []int{1, 7, 64} {
		o.DropCache()
		checkBig(t, ml, want, chunk)
	}
}

// The link to S3 is cut after the first part of a 3-part upload went
// through: the remaining parts are retried within the same multipart
// upload (the copy keeps its uid, each part succeeds once) and the copy
// completes once the link is back.
func TestUploadResumesAfterCut(t *testing.T) {
	e := newEnv(t)
	px, cfg := e.proxied(t)
	o := e.newOffloader(cfg)
	ml, want := bigLedger(t, e, o, "tenant/ns/resume")
	px.SetDelay(5 * time.Millisecond) // a part takes about a second
	if err := ml.OffloadPrefix(want[60]); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "first part uploaded", func() bool { return o.Stats().PartsUploaded.Load() >= 1 })
	px.Cut()
	uid := ml.Ledgers()[0].Offload.UID
	retries := o.Stats().Retries.Load()
	waitUntil(t, "retries while cut", func() bool { return o.Stats().Retries.Load() >= retries+3 })
	px.SetDelay(0)
	px.Restore()
	waitUntil(t, "offload done", func() bool { return ml.OffloadStatus().State != ledger.OffloadRunning })
	if st := ml.OffloadStatus(); st.State != ledger.OffloadSuccess {
		t.Fatalf("offload: %+v", st)
	}
	l := ml.Ledgers()[0]
	if !l.Offloaded() || l.Offload.UID != uid {
		t.Fatalf("copy %+v, the upload under way had uid %s", l.Offload, uid)
	}
	if n := o.Stats().PartsUploaded.Load(); n != 3 {
		t.Fatalf("%d parts uploaded, want each of 3 once", n)
	}
	if ups := e.s3.Uploads(t, e.bucket); len(ups) != 0 {
		t.Fatalf("unfinished uploads: %v", ups)
	}
	waitUntil(t, "bookie copy deleted", func() bool { return !e.bookieHas(l.ID) })
	o.DropCache()
	checkBig(t, ml, want, 16)
}

// offload_threshold_in_seconds alone: ledgers closed long enough ago are
// offloaded whatever their size.
func TestOffloadByAge(t *testing.T) {
	e := newEnv(t)
	_, _, ml := e.openML(ledger.OffloadPolicy{Enabled: true, Threshold: 1 << 62, ThresholdAge: time.Millisecond, DeletionLag: time.Hour}, "tenant/ns/age")
	want := addN(t, ml, 0, 120)
	offloadedAll(t, ml, false)
	checkEntries(t, readAll(t, ml, 20), want)
}

// A store that refuses the copy (no such bucket) leaves the ledger on the
// bookies, readable, and reports ERROR with the reason.
func TestOffloadErrorStatus(t *testing.T) {
	e := newEnv(t)
	cfg := e.offloaderConfig("")
	cfg.Bucket = "no-such-bucket"
	o := e.newOffloader(cfg)
	f := e.newFactory(o, smallLedgers(ledger.OffloadPolicy{DeletionLag: -1}))
	ml, err := f.Open(ctxT(t), "tenant/ns/error", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := addN(t, ml, 0, 60)
	if err := ml.OffloadPrefix(want[59]); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "offload ended", func() bool { return ml.OffloadStatus().State != ledger.OffloadRunning })
	st := ml.OffloadStatus()
	if st.State != ledger.OffloadError || !strings.Contains(st.LastError, "NoSuchBucket") || st.LastFailure == 0 {
		t.Fatalf("status %+v", st)
	}
	if err := ml.OffloadPrefix(want[59]); err != nil {
		t.Fatalf("a new request after an error: %v", err)
	}
	waitUntil(t, "offload ended", func() bool { return ml.OffloadStatus().State != ledger.OffloadRunning })
	for _, l := range ml.Ledgers() {
		if l.Offload != nil || !e.bookieHas(l.ID) {
			t.Fatalf("ledger %d: %+v after a failed offload", l.ID, l.Offload)
		}
	}
	checkEntries(t, readAll(t, ml, 20), want)
}

// With the bookie down, ledgers that have a complete copy are still read,
// from S3, although their bookie copies were not deleted yet.
func TestReadFromCopyWhenBookieDown(t *testing.T) {
	e := newEnv(t)
	o, f, ml := e.openML(ledger.OffloadPolicy{DeletionLag: time.Hour}, "tenant/ns/bookie-down")
	want := addN(t, ml, 0, 100)
	if err := ml.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	ml, err := f.Open(ctxT(t), "tenant/ns/bookie-down", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ml.OffloadPrefix(ledger.Latest); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "offload done", func() bool { return ml.OffloadStatus().State != ledger.OffloadRunning })
	for _, l := range ml.Ledgers() {
		if !l.Offloaded() || l.Offload.BookieDeleted {
			t.Fatalf("ledger %d: %+v", l.ID, l.Offload)
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.bk.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, readAll(t, ml, 25), want)
	if o.Stats().RangeReads.Load() == 0 {
		t.Fatal("no S3 read")
	}
}

// big is entry i of bigLedger: 200 KiB.
func big(i int) []byte { return bytes.Repeat(payload(i), 100) }

// bigLedger opens a managed ledger rolling over every 60 entries and adds
// 61 big entries: one closed 12 MiB ledger (3 blocks of 5 MiB) and one
// entry in the next.
func bigLedger(t *testing.T, e *env, o ledger.Offloader, name string) (*ledger.ManagedLedger, []ledger.Position) {
	t.Helper()
	defs := smallLedgers(ledger.OffloadPolicy{DeletionLag: -1})
	defs.MaxEntriesPerLedger = 60
	ml, err := e.newFactory(o, defs).Open(ctxT(t), name, nil)
	if err != nil {
		t.Fatal(err)
	}
	var want []ledger.Position
	for i := range 61 {
		p, err := ml.AddEntrySync(ctxT(t), big(i))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, p)
	}
	return ml, want
}

// checkBig reads bigLedger's first 60 entries, chunk at a time.
func checkBig(t *testing.T, ml *ledger.ManagedLedger, want []ledger.Position, chunk int) {
	t.Helper()
	pos, i := ledger.Earliest, 0
	for i < 60 {
		ents, err := ml.Read(ctxT(t), pos, chunk, 0)
		if err != nil || len(ents) == 0 {
			t.Fatalf("read at %v: %d entries, %v", pos, len(ents), err)
		}
		for _, en := range ents {
			if en.Pos != want[i] || !bytes.Equal(en.Data, big(i)) {
				t.Fatalf("entry %d at %v differs", i, en.Pos)
			}
			i++
			if i == 60 {
				break
			}
		}
		pos = ml.Next(ents[len(ents)-1].Pos)
	}
}

// proxied puts a TCP proxy in front of the env's S3 server and returns it
// with an offloader config through it that retries for long.
func (e *env) proxied(t *testing.T) (*tcpproxy.Proxy, offload.Config) {
	t.Helper()
	px, err := tcpproxy.Start(e.s3.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Close)
	cfg := e.offloaderConfig("http://" + px.Addr())
	cfg.Attempts, cfg.RetryBackoff = 40, 20*time.Millisecond
	return px, cfg
}
