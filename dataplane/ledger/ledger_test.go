package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestAddReadAcrossRollover(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cache int64
	}{{"cache", 0}, {"nocache", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, clusterOpts{bookies: 3})
			cfg := testConfig()
			cfg.Ensemble, cfg.WriteQuorum, cfg.AckQuorum = 3, 2, 2
			cfg.CacheSize = tc.cache
			cfg.RetentionTime, cfg.RetentionSize = -1, -1
			f := c.newFactory(cfg)
			ml := openML(t, f, "tenant/ns/persistent/roll", nil)
			pos := addN(t, ml, 0, 95)
			if got := ml.LastConfirmed(); got != pos[94] {
				t.Fatalf("LastConfirmed = %v, want %v", got, pos[94])
			}
			if n := ml.NumberOfEntries(); n != 95 {
				t.Fatalf("NumberOfEntries = %d", n)
			}
			if ls := ml.Ledgers(); len(ls) < 5 {
				t.Fatalf("only %d ledgers after 95 entries at 10 per ledger", len(ls))
			}
			checkEntries(t, readAll(t, ml), 0, 95, pos)
			// Byte-limited read returns at least one entry and stops at the limit.
			ents, err := ml.Read(ctxT(t), pos[3], 100, 25)
			if err != nil || len(ents) != 3 || ents[0].Pos != pos[3] {
				t.Fatalf("byte-limited read = %d entries, %v", len(ents), err)
			}
			// Every ledger but the current one is eventually closed with final counts.
			waitUntil(t, "rolled ledgers closed", func() bool {
				ls := ml.Ledgers()
				var n int64
				for _, l := range ls[:len(ls)-1] {
					if !l.closed() {
						return false
					}
					n += l.Entries
				}
				return n+ls[len(ls)-1].Entries == 95
			})
			if ml.TotalSize() != int64(95*len(payload(0))) {
				t.Fatalf("TotalSize = %d", ml.TotalSize())
			}
		})
	}
}

func TestAddAfterCloseAndInvalidRead(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	f := c.newFactory(testConfig())
	ml := openML(t, f, "a/b", nil)
	if _, err := ml.Read(ctxT(t), Earliest, 0, 0); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Read max 0: %v", err)
	}
	if ents, err := ml.Read(ctxT(t), Earliest, 10, 0); err != nil || len(ents) != 0 {
		t.Fatalf("Read of empty ledger = %v, %v", ents, err)
	}
	if err := ml.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := ml.AddEntrySync(ctxT(t), []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("add after close: %v", err)
	}
	if _, err := f.Open(ctxT(t), "", nil); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Open empty name: %v", err)
	}
}

func TestReopenAfterCloseAndCrash(t *testing.T) {
	c := newCluster(t, clusterOpts{bookies: 2})
	cfg := testConfig()
	cfg.Ensemble, cfg.WriteQuorum, cfg.AckQuorum = 2, 2, 1
	cfg.RetentionTime, cfg.RetentionSize = -1, -1
	name := "t/ns/persistent/reopen"

	f1 := c.newFactory(cfg)
	before := time.Now().UnixMilli()
	ml := openML(t, f1, name, nil)
	created := ml.Created()
	if created < before || created > time.Now().UnixMilli() {
		t.Fatalf("Created = %d, want the time of the open (from %d)", created, before)
	}
	pos := addN(t, ml, 0, 25)
	if err := ml.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}

	f2 := c.newFactory(cfg)
	ml = openML(t, f2, name, nil)
	if got := ml.LastConfirmed(); got != pos[24] {
		t.Fatalf("after reopen LastConfirmed = %v, want %v", got, pos[24])
	}
	for _, l := range ml.Ledgers()[:len(ml.Ledgers())-1] {
		if !l.closed() || l.Entries == 0 {
			t.Fatalf("ledger after clean reopen: %+v", l)
		}
	}
	pos = append(pos, addN(t, ml, 25, 17)...)
	f2.crash() // no close: the current ledger stays open

	f3 := c.newFactory(cfg)
	ml = openML(t, f3, name, nil)
	if got := ml.LastConfirmed(); got != pos[41] {
		t.Fatalf("after crash LastConfirmed = %v, want %v", got, pos[41])
	}
	// The record was rewritten by every rollover and both reopens.
	if got := ml.Created(); got != created {
		t.Fatalf("Created after reopens = %d, want %d", got, created)
	}
	checkEntries(t, readAll(t, ml), 0, 42, pos)
	if n := ml.NumberOfEntries(); n != 42 {
		t.Fatalf("NumberOfEntries = %d", n)
	}
	// And the log goes on.
	p, err := ml.AddEntrySync(ctxT(t), payload(42))
	if err != nil || !pos[41].Less(p) {
		t.Fatalf("add after crash recovery = %v, %v", p, err)
	}
}

func TestFencingSecondOwner(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	cfg := testConfig()
	cfg.MaxEntriesPerLedger = 1000
	// Keep the fenced ledger: a bookie forgets the fence of a deleted
	// ledger (see the report on the bookie package).
	cfg.RetentionTime, cfg.RetentionSize = -1, -1
	name := "t/ns/persistent/fence"
	f1 := c.newFactory(cfg)
	ml1 := openML(t, f1, name, nil)
	addN(t, ml1, 0, 5)

	f2 := c.newFactory(cfg)
	ml2 := openML(t, f2, name, nil)
	if _, err := ml1.AddEntrySync(ctxT(t), []byte("late")); !errors.Is(err, ErrFenced) {
		t.Fatalf("first owner's add after takeover: %v, want ErrFenced", err)
	}
	if _, err := ml1.AddEntrySync(ctxT(t), []byte("later")); !errors.Is(err, ErrFenced) {
		t.Fatalf("first owner's next add: %v, want ErrFenced", err)
	}
	if err := ml1.Close(ctxT(t)); err != nil {
		t.Fatalf("closing the fenced ledger: %v", err)
	}
	p, err := ml2.AddEntrySync(ctxT(t), payload(5))
	if err != nil {
		t.Fatal(err)
	}
	ents := readAll(t, ml2)
	checkEntries(t, ents, 0, 6, nil)
	if ents[5].Pos != p {
		t.Fatalf("last entry at %v, added at %v", ents[5].Pos, p)
	}
}

func TestFencedCursorWrites(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	name := "t/ns/persistent/fence-cursor"
	f1 := c.newFactory(testConfig())
	ml1 := openML(t, f1, name, nil)
	pos := addN(t, ml1, 0, 3)
	cur1, err := ml1.OpenCursor(ctxT(t), "sub", InitialEarliest)
	if err != nil {
		t.Fatal(err)
	}
	f2 := c.newFactory(testConfig())
	ml2 := openML(t, f2, name, nil)
	if err := cur1.Ack(pos[0]); err != nil {
		t.Fatal(err)
	}
	if err := cur1.Flush(ctxT(t)); !errors.Is(err, ErrFenced) {
		t.Fatalf("old owner's cursor write: %v, want ErrFenced", err)
	}
	cur2 := ml2.Cursors()[0]
	if cur2.MarkDeletePosition().EntryID != -1 {
		t.Fatalf("new owner's cursor moved by the old owner: %v", cur2.MarkDeletePosition())
	}
}

func TestTerminate(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	cfg := testConfig()
	cfg.RetentionTime, cfg.RetentionSize = -1, -1
	f := c.newFactory(cfg)
	name := "t/ns/persistent/term"
	ml := openML(t, f, name, nil)
	pos := addN(t, ml, 0, 12)
	tp, err := ml.Terminate(ctxT(t))
	if err != nil || tp != pos[11] {
		t.Fatalf("Terminate = %v, %v; want %v", tp, err, pos[11])
	}
	if _, err := ml.AddEntrySync(ctxT(t), []byte("x")); !errors.Is(err, ErrTerminated) {
		t.Fatalf("add after terminate: %v", err)
	}
	if err := ml.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	ml = openML(t, c.newFactory(cfg), name, nil)
	if !ml.IsTerminated() || ml.LastConfirmed() != pos[11] {
		t.Fatalf("reopened: terminated %v at %v", ml.IsTerminated(), ml.LastConfirmed())
	}
	if _, err := ml.AddEntrySync(ctxT(t), []byte("x")); !errors.Is(err, ErrTerminated) {
		t.Fatalf("add after reopen of terminated: %v", err)
	}
	checkEntries(t, readAll(t, ml), 0, 12, pos)
}

func TestFactoryDeleteExistsListProperties(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	f := c.newFactory(testConfig())
	ctx := ctxT(t)
	names := []string{"t/ns/persistent/a", "t/ns/persistent/a/b", "t/other/persistent/c%d"}
	var ids []int64
	for _, n := range names {
		ml := openML(t, f, n, nil)
		addN(t, ml, 0, 12)
		if _, err := ml.OpenCursor(ctx, "s/1", InitialEarliest); err != nil {
			t.Fatal(err)
		}
		for _, l := range ml.Ledgers() {
			ids = append(ids, l.ID)
		}
	}
	got, err := f.List(ctx, "t/ns/")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, names[:2]) {
		t.Fatalf("List(t/ns/) = %q", got)
	}
	ml := openML(t, f, names[0], nil)
	if err := ml.SetProperties(ctx, map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	if err := ml.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ml = openML(t, f, names[0], nil)
	if ml.Properties()["k"] != "v" {
		t.Fatalf("properties after reopen: %v", ml.Properties())
	}
	for _, n := range names {
		if err := f.Delete(ctx, n); err != nil {
			t.Fatalf("Delete %s: %v", n, err)
		}
		if ok, err := f.Exists(ctx, n); ok || err != nil {
			t.Fatalf("Exists after delete = %v, %v", ok, err)
		}
	}
	if err := f.Delete(ctx, names[0]); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	left, err := f.client.Ledgers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if slices.Contains(left, id) {
			t.Fatalf("ledger %d still exists after Delete", id)
		}
	}
	if kids, _ := c.md.Children(ctx, cursorRoot); len(kids) != 0 {
		t.Fatalf("cursor records left: %q", kids)
	}
}

func TestWaitForNewTailing(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	f := c.newFactory(testConfig())
	ml := openML(t, f, "t/ns/persistent/tail", nil)
	cur, err := ml.NewNonDurableCursor(Latest, false)
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Close()
	const total = 40
	var wg sync.WaitGroup
	var got []Entry
	var readErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx := ctxT(t)
		for len(got) < total {
			ch := ml.WaitForNew(cur.ReadPosition().prev())
			ents, err := cur.ReadEntries(ctx, 5)
			if err != nil {
				readErr = err
				return
			}
			if len(ents) == 0 {
				select {
				case <-ch:
				case <-ctx.Done():
					readErr = fmt.Errorf("%w: got %d, read pos %v, last %v, ledgers %+v", ctx.Err(), len(got), cur.ReadPosition(), ml.LastConfirmed(), ml.Ledgers())
					return
				}
				continue
			}
			got = append(got, ents...)
		}
	}()
	var pos []Position
	for i := 0; i < total; i += 4 {
		pos = append(pos, addN(t, ml, i, 4)...)
	}
	wg.Wait()
	if readErr != nil {
		t.Fatal(readErr)
	}
	checkEntries(t, got, 0, total, pos)

	select {
	case <-ml.WaitForNew(pos[total-1]):
		t.Fatal("WaitForNew after the last entry is already closed")
	default:
	}
	ch := ml.WaitForNew(pos[total-1])
	ml.AddEntry([]byte("more"), func(Position, error) {})
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatal("WaitForNew not closed by a new entry")
	}
}

// prev is a test helper: the position just before p inside its ledger.
func (p Position) prev() Position { return Position{p.LedgerID, p.EntryID - 1} }

func TestSearch(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	cfg := testConfig()
	cfg.CacheSize = -1
	cfg.RetentionTime, cfg.RetentionSize = -1, -1
	f := c.newFactory(cfg)
	ml := openML(t, f, "t/ns/persistent/search", nil)
	pos := addN(t, ml, 0, 57)
	for _, k := range []int{0, 1, 9, 10, 11, 30, 56} {
		want := string(payload(k))
		got, err := ml.Search(ctxT(t), func(e Entry) bool { return string(e.Data) >= want })
		if err != nil || got != pos[k] {
			t.Fatalf("Search(>= %s) = %v, %v; want %v", want, got, err, pos[k])
		}
	}
	got, err := ml.Search(ctxT(t), func(Entry) bool { return false })
	if err != nil || !pos[56].Less(got) {
		t.Fatalf("Search(none) = %v, %v", got, err)
	}
}

func TestDiskStorageBookies(t *testing.T) {
	c := newCluster(t, clusterOpts{bookies: 2, disk: true})
	cfg := testConfig()
	cfg.Ensemble, cfg.WriteQuorum, cfg.AckQuorum = 2, 2, 2
	cfg.CacheSize = -1
	cfg.RetentionTime, cfg.RetentionSize = -1, -1
	name := "t/ns/persistent/disk"
	ml := openML(t, c.newFactory(cfg), name, nil)
	pos := addN(t, ml, 0, 33)
	if err := ml.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	ml = openML(t, c.newFactory(cfg), name, nil)
	checkEntries(t, readAll(t, ml), 0, 33, pos)
}

func TestConcurrentAddsReadsAcks(t *testing.T) {
	c := newCluster(t, clusterOpts{bookies: 2})
	cfg := testConfig()
	cfg.MaxEntriesPerLedger = 25
	cfg.Ensemble, cfg.WriteQuorum, cfg.AckQuorum = 2, 2, 1
	f := c.newFactory(cfg)
	ml := openML(t, f, "t/ns/persistent/conc", nil)
	cur, err := ml.OpenCursor(ctxT(t), "sub", InitialEarliest)
	if err != nil {
		t.Fatal(err)
	}
	const producers, per = 4, 60
	var wg sync.WaitGroup
	var mu sync.Mutex
	var addErr error
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				if _, err := ml.AddEntrySync(ctxT(t), payload(p*1000+i)); err != nil {
					mu.Lock()
					addErr = err
					mu.Unlock()
					return
				}
			}
		}()
	}
	seen := map[string]bool{}
	ctx := ctxT(t)
	for len(seen) < producers*per {
		ch := ml.WaitForNew(ml.LastConfirmed())
		ents, err := cur.ReadEntries(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range ents {
			if seen[string(e.Data)] {
				t.Fatalf("entry %q read twice", e.Data)
			}
			seen[string(e.Data)] = true
			if i%2 == 0 {
				err = cur.Ack(e.Pos)
			} else {
				err = cur.AckCumulative(e.Pos)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if len(ents) == 0 {
			select {
			case <-ch:
			case <-time.After(100 * time.Millisecond):
			}
		}
		mu.Lock()
		if addErr != nil {
			t.Fatal(addErr)
		}
		mu.Unlock()
	}
	wg.Wait()
	if b := cur.Backlog(); b != 0 {
		t.Fatalf("backlog %d after acking everything", b)
	}
	if cur.MarkDeletePosition() != ml.LastConfirmed() {
		t.Fatalf("mark-delete %v, last %v", cur.MarkDeletePosition(), ml.LastConfirmed())
	}
	waitUntil(t, "consumed ledgers trimmed", func() bool { return len(ml.Ledgers()) <= 2 })
}

// TestReconfigureSharedConfig: managed ledgers of one configuration share
// it (Factory.intern); reconfiguring one must not change the others.
func TestReconfigureSharedConfig(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	f := c.newFactory(testConfig())
	a := openML(t, f, "t/ns/persistent/a", nil)
	b := openML(t, f, "t/ns/persistent/b", nil)
	if a.conf() != b.conf() {
		t.Fatal("two managed ledgers of one configuration hold separate copies")
	}
	want := b.Config()
	if err := a.Reconfigure(&Config{RetentionTime: time.Hour, RetentionSize: -1, Ensemble: 1, WriteQuorum: 1, AckQuorum: 1}); err != nil {
		t.Fatal(err)
	}
	if got := a.Config(); got.RetentionTime != time.Hour || got.RetentionSize != -1 {
		t.Fatalf("reconfigured: %+v", got)
	}
	if got := b.Config(); got != want {
		t.Fatalf("the other managed ledger changed: %+v, want %+v", got, want)
	}
	// Back to the defaults: the shared copy again.
	if err := a.Reconfigure(nil); err != nil {
		t.Fatal(err)
	}
	if a.conf() != b.conf() {
		t.Fatal("reconfigured back to the defaults, but not sharing them")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{}, true},
		{"quorum", Config{Ensemble: 1, WriteQuorum: 2, AckQuorum: 1}, false},
		{"one retention zero", Config{RetentionTime: time.Hour}, false},
		{"infinite", Config{RetentionTime: -1, RetentionSize: -1}, true},
		{"bad retention", Config{RetentionTime: -2, RetentionSize: 5}, false},
	} {
		err := tc.cfg.WithDefaults().Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%s: Validate = %v", tc.name, err)
		}
		if err != nil && !errors.Is(err, ErrConfig) {
			t.Errorf("%s: error %v does not wrap ErrConfig", tc.name, err)
		}
	}
	d := DefaultConfigForTest()
	if d.MaxEntriesPerLedger != 50000 || d.CacheSize != 64<<20 || d.CursorPersistInterval != 100*time.Millisecond {
		t.Fatalf("defaults: %+v", d)
	}
}

func DefaultConfigForTest() Config { return Config{}.WithDefaults() }

var _ = context.Background

// TestReconfigureWhileWorking: the trim passes and cursor flushes that a
// Reconfigure starts read the configuration without the managed ledger's
// lock while further Reconfigures replace it (the race detector checks).
func TestReconfigureWhileWorking(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	f := c.newFactory(testConfig())
	ml := openML(t, f, "t/ns/persistent/reconf", nil)
	cur, err := ml.OpenCursor(ctxT(t), "sub", InitialEarliest)
	if err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			rt := time.Duration(i%2+1) * time.Hour
			if err := ml.Reconfigure(&Config{RetentionTime: rt, RetentionSize: -1, Ensemble: 1, WriteQuorum: 1, AckQuorum: 1}); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	for i := range 5 {
		pos := addN(t, ml, i*20, 20)
		for _, p := range pos {
			if err := cur.Ack(p); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(20 * time.Millisecond) // cursor flushes and trim passes run
	}
	close(stop)
	<-done
	if got := ml.Config().RetentionSize; got != -1 {
		t.Fatalf("retention size %d after the reconfigurations", got)
	}
}

// TestRecoveredLedgerSize: after a crash the ledger left open is recovered
// (its tail only is read); its size must still become the bytes written,
// in memory and in the stored record, so a later open reports it at once.
func TestRecoveredLedgerSize(t *testing.T) {
	c := newCluster(t, clusterOpts{bookies: 3})
	cfg := testConfig()
	cfg.Ensemble, cfg.WriteQuorum, cfg.AckQuorum = 3, 3, 2
	cfg.MaxEntriesPerLedger = 400
	cfg.RetentionTime, cfg.RetentionSize = -1, -1
	name := "t/ns/persistent/recovered-size"

	f1 := c.newFactory(cfg)
	ml := openML(t, f1, name, nil)
	const n = 1000
	var want int64
	for i := range n {
		data := make([]byte, 100+i%50) // sizes vary: a count of entries is not enough
		if _, err := ml.AddEntrySync(ctxT(t), data); err != nil {
			t.Fatal(err)
		}
		want += int64(len(data))
	}
	if got := ml.TotalSize(); got != want {
		t.Fatalf("TotalSize before the crash = %d, want %d", got, want)
	}
	perLedger := map[int64]int64{}
	for _, l := range ml.Ledgers() {
		perLedger[l.ID] = l.Size
	}
	f1.crash() // the last ledger (200 entries) stays open

	check := func(ml *ManagedLedger) bool {
		if ml.TotalSize() != want {
			return false
		}
		for _, l := range ml.Ledgers() {
			if l.SizeUnknown || l.Size != perLedger[l.ID] {
				return false
			}
		}
		return true
	}
	f2 := c.newFactory(cfg)
	ml = openML(t, f2, name, nil)
	if n := ml.NumberOfEntries(); n != 1000 {
		t.Fatalf("NumberOfEntries after the crash = %d", n)
	}
	waitUntil(t, "the recovered ledger's size counted", func() bool { return check(ml) })
	if err := ml.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}

	// The count was stored: the next owner knows the sizes from the record.
	f3 := c.newFactory(cfg)
	ml = openML(t, f3, name, nil)
	if !check(ml) {
		t.Fatalf("after reopen: TotalSize %d (want %d), ledgers %+v (want sizes %v)", ml.TotalSize(), want, ml.Ledgers(), perLedger)
	}
}
