package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin/config"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/rest"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
	"github.com/magnetar-dev/magnetar/dataplane/standalone"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

func pulsarAdmin(t *testing.T, sa *standalone.Standalone) admin.Client {
	t.Helper()
	a, err := admin.New(&config.Config{WebServiceURL: sa.WebServiceURL()})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// kv is one keyed message; a nil value is a tombstone, an empty key none.
type kv struct {
	key   string
	value *string
}

func val(s string) *string { return &s }

// sendKV publishes msgs; with batching they are sent asynchronously and
// flushed together, so they share batch entries.
func sendKV(t *testing.T, e *env, p pulsar.Producer, batched bool, msgs []kv) {
	t.Helper()
	errs := make(chan error, len(msgs))
	for _, m := range msgs {
		pm := &pulsar.ProducerMessage{Key: m.key}
		if m.value != nil {
			pm.Payload = []byte(*m.value)
		} else {
			// The Go client drops a non-batched message with neither
			// payload nor properties.
			pm.Properties = map[string]string{"tombstone": "true"}
		}
		if !batched {
			if _, err := p.Send(e.ctx, pm); err != nil {
				t.Fatalf("send %q: %v", m.key, err)
			}
			continue
		}
		p.SendAsync(e.ctx, pm, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { errs <- err })
	}
	if batched {
		if err := p.FlushWithCtx(e.ctx); err != nil {
			t.Fatal(err)
		}
		for range msgs {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
}

// readAll reads a reader until HasNext reports the end, as "key=value".
func readAll(t *testing.T, e *env, r pulsar.Reader) []string {
	t.Helper()
	var out []string
	for r.HasNext() {
		ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
		m, err := r.Next(ctx)
		cancel()
		if err != nil {
			t.Fatalf("next after %v: %v", out, err)
		}
		out = append(out, show(m))
	}
	return out
}

// show formats a message as "key=value"; a tombstone's value is empty
// (the Go client hands out a compressed empty payload as it came).
func show(m pulsar.Message) string {
	if m.Properties()["tombstone"] == "true" {
		return m.Key() + "="
	}
	return m.Key() + "=" + string(m.Payload())
}

func (e *env) reader(opts pulsar.ReaderOptions) pulsar.Reader {
	e.t.Helper()
	r, err := e.client.CreateReader(opts)
	if err != nil {
		e.t.Fatalf("reader on %s: %v", opts.Topic, err)
	}
	e.t.Cleanup(r.Close)
	return r
}

// compactAndWait triggers a compaction through the admin API and waits
// for SUCCESS; it returns the statuses seen.
func compactAndWait(t *testing.T, e *env, a admin.Client, topic string) []string {
	t.Helper()
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Topics().Compact(*tn); err != nil {
		t.Fatalf("compact: %v", err)
	}
	var seen []string
	waitFor(t, e, "compaction", func() bool {
		st, err := a.Topics().CompactStatus(*tn)
		if err != nil {
			t.Fatalf("compaction status: %v", err)
		}
		if len(seen) == 0 || seen[len(seen)-1] != st.Status.String() {
			seen = append(seen, st.Status.String())
		}
		if st.Status == utils.ERROR {
			t.Fatalf("compaction failed: %s", st.LastError)
		}
		return st.Status == utils.SUCCESS
	})
	return seen
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, b)
	}
}

func TestCompaction(t *testing.T) {
	for _, tc := range []struct {
		name        string
		batched     bool
		compression pulsar.CompressionType
	}{
		{"unbatched", false, pulsar.NoCompression},
		{"batched", true, pulsar.NoCompression},
		{"batched-lz4", true, pulsar.LZ4},
		{"batched-zstd", true, pulsar.ZSTD},
		{"unbatched-zlib", false, pulsar.ZLib},
	} {
		t.Run(tc.name, func(t *testing.T) { testCompaction(t, tc.batched, tc.compression) })
	}
}

func testCompaction(t *testing.T, batched bool, compression pulsar.CompressionType) {
	e := newEnv(t)
	a := pulsarAdmin(t, e.sa)
	topic := "persistent://public/default/compact-" + strings.ReplaceAll(t.Name(), "/", "-")
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: !batched, CompressionType: compression,
		BatchingMaxPublishDelay: time.Hour, BatchingMaxMessages: 1000})
	var msgs []kv
	for round := 0; round < 3; round++ {
		for k := 0; k < 4; k++ {
			msgs = append(msgs, kv{fmt.Sprintf("k%d", k), val(fmt.Sprintf("k%d-%d", k, round))})
		}
	}
	msgs = append(msgs, kv{"k1", nil}, kv{"", val("no key")}, kv{"k2", val("k2-final")}, kv{"k4", val("k4-only")})
	sendKV(t, e, p, batched, msgs)

	tn, _ := utils.GetTopicName(topic)
	st, err := a.Topics().CompactStatus(*tn)
	if err != nil || st.Status != utils.NOTRUN {
		t.Fatalf("status before any compaction: %+v, %v", st, err)
	}
	seen := compactAndWait(t, e, a, topic)
	if seen[0] != "RUNNING" && seen[0] != "SUCCESS" {
		t.Fatalf("statuses after the trigger: %v", seen)
	}

	want := []string{"k0=k0-2", "k3=k3-2", "k2=k2-final", "k4=k4-only"}
	compacted := readAll(t, e, e.reader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID(), ReadCompacted: true}))
	if strings.Join(compacted, ",") != strings.Join(want, ",") {
		t.Fatalf("compacted view %v, want %v", compacted, want)
	}
	all := readAll(t, e, e.reader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()}))
	if len(all) != len(msgs) {
		t.Fatalf("non-compacted reader read %d messages, want %d: %v", len(all), len(msgs), all)
	}

	// A compacted reader goes on with the topic after the horizon.
	live := e.reader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID(), ReadCompacted: true})
	if got := readAll(t, e, live); len(got) != len(want) {
		t.Fatalf("compacted view %v", got)
	}
	sendKV(t, e, p, batched, []kv{{"k0", val("k0-new")}, {"k1", val("k1-back")}, {"k3", nil}})
	for _, w := range []string{"k0=k0-new", "k1=k1-back", "k3="} {
		ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
		m, err := live.Next(ctx)
		cancel()
		if err != nil || show(m) != w {
			t.Fatalf("after the horizon: got %v (%v), want %s", m, err, w)
		}
	}

	// A durable Exclusive consumer reads the compacted view too; a Shared
	// one may not.
	c := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "excl", ReadCompacted: true,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	for _, w := range append(want, "k0=k0-new", "k1=k1-back", "k3=") {
		m := e.receive(c)
		if got := show(m); got != w {
			t.Fatalf("exclusive consumer got %s, want %s", got, w)
		}
		if err := c.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "shared", ReadCompacted: true,
		Type: pulsar.Shared}); err == nil {
		t.Fatal("a Shared read_compacted subscription was accepted")
	}

	// A second compaction merges the previous compacted ledger.
	compactAndWait(t, e, a, topic)
	want2 := []string{"k2=k2-final", "k4=k4-only", "k0=k0-new", "k1=k1-back"}
	if got := readAll(t, e, e.reader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID(), ReadCompacted: true})); strings.Join(got, ",") != strings.Join(want2, ",") {
		t.Fatalf("after the second compaction %v, want %v", got, want2)
	}

	is, err := a.Topics().GetInternalStats(*tn)
	if err != nil {
		t.Fatal(err)
	}
	if is.CompactedLedger.LedgerID < 0 || is.CompactedLedger.Entries <= 0 || is.CompactedLedger.Entries > 4 {
		t.Fatalf("internal stats compactedLedger %+v", is.CompactedLedger)
	}
	if _, ok := is.Cursors["__compaction"]; !ok {
		t.Fatalf("no __compaction cursor in %v", is.Cursors)
	}
	var stats struct {
		Compaction struct {
			Removed   int64 `json:"lastCompactionRemovedEventCount"`
			Succeeded int64 `json:"lastCompactionSucceedTimestamp"`
		} `json:"compaction"`
	}
	getJSON(t, e.sa.WebServiceURL()+"/admin/v2/persistent/public/default/"+tn.GetLocalName()+"/stats", &stats)
	// The second run removed k0-2 and k3-2 from the old view and k3's
	// tombstone from the new range.
	if stats.Compaction.Succeeded == 0 || stats.Compaction.Removed != 3 {
		t.Fatalf("stats compaction block %+v", stats.Compaction)
	}
}

func TestCompactionConflictAndCrashLeftover(t *testing.T) {
	e := newEnv(t)
	a := pulsarAdmin(t, e.sa)
	topic := "persistent://public/default/compact-conflict"
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	sendKV(t, e, p, false, []kv{{"a", val("1")}, {"a", val("2")}})
	tn, _ := broker.ParseTopicName(topic)
	leftover, err := broker.PlantCompactingLedger(e.ctx, e.sa.Broker(), tn)
	if err != nil {
		t.Fatal(err)
	}

	release := make(chan struct{})
	defer broker.SetCompactionHook(func(stage string) error {
		if stage == "start" {
			<-release
		}
		return nil
	})()
	atn, _ := utils.GetTopicName(topic)
	if err := a.Topics().Compact(*atn); err != nil {
		t.Fatal(err)
	}
	st, err := a.Topics().CompactStatus(*atn)
	if err != nil || st.Status != utils.RUNNING {
		t.Fatalf("status while running: %+v, %v", st, err)
	}
	err = a.Topics().Compact(*atn)
	var re rest.Error
	if !errors.As(err, &re) || re.Code != http.StatusConflict {
		t.Fatalf("second trigger while running: %v, want 409", err)
	}
	close(release)
	waitFor(t, e, "compaction", func() bool {
		st, err := a.Topics().CompactStatus(*atn)
		return err == nil && st.Status == utils.SUCCESS
	})
	if broker.SideLedgerExists(e.ctx, e.sa.Broker(), tn, leftover) {
		t.Fatalf("the crashed run's ledger %d is still there", leftover)
	}
	r := e.reader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID(), ReadCompacted: true})
	if got := readAll(t, e, r); strings.Join(got, ",") != "a=2" {
		t.Fatalf("compacted view %v", got)
	}
	// Clients still connected would reconnect after the deletion and, with
	// auto-creation on, create the topic again (as in Pulsar).
	r.Close()
	p.Close()
	is, err := a.Topics().GetInternalStats(*atn)
	if err != nil {
		t.Fatal(err)
	}
	compacted := is.CompactedLedger.LedgerID
	if err := a.Topics().Delete(*atn, true, true); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Topics().GetInternalStats(*atn); err == nil {
		t.Fatal("topic still there after delete")
	}
	// A new topic of the same name does not see the deleted compacted ledger,
	// which deleting the topic removed.
	p2 := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	sendKV(t, e, p2, false, []kv{{"b", val("1")}})
	if broker.SideLedgerExists(e.ctx, e.sa.Broker(), tn, compacted) {
		t.Fatalf("compacted ledger %d survived the topic's deletion", compacted)
	}
}

func TestCompactionSurvivesRestart(t *testing.T) {
	dir, bookieAddr := t.TempDir(), standalonetest.FreeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sa, err := standalone.Start(ctx, standalonetest.Config(dir, bookieAddr))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, sa: sa, client: standalonetest.NewClient(t, sa.ServiceURL()), ctx: ctx}
	a := pulsarAdmin(t, sa)
	topic := "persistent://public/default/compact-restart"
	p, err := e.client.CreateProducer(pulsar.ProducerOptions{Topic: topic, BatchingMaxPublishDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	sendKV(t, e, p, true, []kv{{"x", val("1")}, {"y", val("1")}, {"x", val("2")}, {"y", nil}, {"z", val("1")}})
	compactAndWait(t, e, a, topic)
	p.Close()
	e.client.Close()
	if err := sa.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	sa2 := standalonetest.Start(t, standalonetest.Config(dir, bookieAddr))
	e2 := &env{t: t, sa: sa2, client: standalonetest.NewClient(t, sa2.ServiceURL()), ctx: ctx}
	got := readAll(t, e2, e2.reader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID(), ReadCompacted: true}))
	if strings.Join(got, ",") != "x=2,z=1" {
		t.Fatalf("compacted view after restart %v", got)
	}
	tn, _ := utils.GetTopicName(topic)
	is, err := pulsarAdmin(t, sa2).Topics().GetInternalStats(*tn)
	if err != nil || is.CompactedLedger.LedgerID < 0 || is.CompactedLedger.Entries != 1 {
		t.Fatalf("internal stats after restart: %+v, %v", is.CompactedLedger, err)
	}
	// The last run's status and figures are stored with its horizon.
	if st, err := pulsarAdmin(t, sa2).Topics().CompactStatus(*tn); err != nil || st.Status != utils.SUCCESS {
		t.Fatalf("compaction status after restart: %+v, %v", st, err)
	}
	var stats struct {
		Compaction broker.CompactionStats `json:"compaction"`
	}
	getJSON(t, sa2.WebServiceURL()+"/admin/v2/persistent/public/default/compact-restart/stats", &stats)
	if c := stats.Compaction; c.LastCompactionSucceedTimestamp <= 0 || c.LastCompactionRemovedEventCount != 3 {
		t.Fatalf("compaction stats after restart: %+v (want a success time and 3 removed: x=1, y=1 and y's tombstone)", c)
	}
	if md := is.Cursors["__compaction"].MarkDeletePosition; md != is.LastConfirmedEntry {
		t.Fatalf("horizon after restart %s, want the last entry %s", md, is.LastConfirmedEntry)
	}
	// The Go client's TableView is built on a read_compacted reader.
	tv, err := e2.client.CreateTableView(pulsar.TableViewOptions{Topic: topic, Schema: pulsar.NewBytesSchema(nil),
		SchemaValueType: reflect.TypeOf([]byte(nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer tv.Close()
	table := map[string]string{}
	for k, v := range tv.Entries() {
		table[k] = string(v.([]byte))
	}
	if len(table) != 2 || table["x"] != "2" || table["z"] != "1" {
		t.Fatalf("table view %v", table)
	}
}

func TestCompactionThreshold(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cfg := standalonetest.Config(t.TempDir(), standalonetest.FreeAddr(t))
	cfg.Broker.CompactionCheckInterval = 100 * time.Millisecond
	sa := standalonetest.Start(t, cfg)
	e := &env{t: t, sa: sa, client: standalonetest.NewClient(t, sa.ServiceURL()), ctx: ctx}
	a := pulsarAdmin(t, sa)
	ns, _ := utils.GetNamespaceName("public/default")
	if err := a.Namespaces().SetCompactionThreshold(*ns, 1000); err != nil {
		t.Fatal(err)
	}
	topic := "persistent://public/default/compact-threshold"
	tn, _ := utils.GetTopicName(topic)
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	sendKV(t, e, p, false, []kv{{"a", val("small")}, {"a", val("small2")}})
	// Under the threshold: no compaction.
	time.Sleep(500 * time.Millisecond)
	if st, err := a.Topics().CompactStatus(*tn); err != nil || st.Status != utils.NOTRUN {
		t.Fatalf("status under the threshold: %+v, %v", st, err)
	}
	big := strings.Repeat("v", 2000)
	sendKV(t, e, p, false, []kv{{"a", val(big)}, {"b", val("b")}})
	waitFor(t, e, "automatic compaction", func() bool {
		st, err := a.Topics().CompactStatus(*tn)
		return err == nil && st.Status == utils.SUCCESS
	})
	got := readAll(t, e, e.reader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID(), ReadCompacted: true}))
	if strings.Join(got, ",") != "a="+big+",b=b" {
		t.Fatalf("compacted view %d messages", len(got))
	}

	// The topic-level policy applies in a namespace without one.
	if err := a.Namespaces().CreateNamespace("public/compact-topic-policy"); err != nil {
		t.Fatal(err)
	}
	topic2 := "persistent://public/compact-topic-policy/t"
	tn2, _ := utils.GetTopicName(topic2)
	p2 := e.producer(pulsar.ProducerOptions{Topic: topic2, DisableBatching: true})
	sendKV(t, e, p2, false, []kv{{"a", val("1")}})
	if err := a.Topics().SetCompactionThreshold(*tn2, 1000); err != nil {
		t.Fatal(err)
	}
	sendKV(t, e, p2, false, []kv{{"a", val(big)}})
	waitFor(t, e, "automatic compaction by the topic policy", func() bool {
		st, err := a.Topics().CompactStatus(*tn2)
		return err == nil && st.Status == utils.SUCCESS
	})
}

func TestCompactionFailureKeepsPreviousView(t *testing.T) {
	e := newEnv(t)
	a := pulsarAdmin(t, e.sa)
	topic := "persistent://public/default/compact-failure"
	atn, _ := utils.GetTopicName(topic)
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	sendKV(t, e, p, false, []kv{{"a", val("1")}, {"b", val("1")}, {"a", val("2")}})
	compactAndWait(t, e, a, topic)
	before, err := a.Topics().GetInternalStats(*atn)
	if err != nil {
		t.Fatal(err)
	}

	sendKV(t, e, p, false, []kv{{"a", val("3")}, {"b", nil}})
	restore := broker.SetCompactionHook(func(stage string) error {
		if stage == "written" {
			return errors.New("bookies went away")
		}
		return nil
	})
	if err := a.Topics().Compact(*atn); err != nil {
		t.Fatal(err)
	}
	var st utils.LongRunningProcessStatus
	waitFor(t, e, "failed compaction", func() bool {
		st, err = a.Topics().CompactStatus(*atn)
		return err == nil && st.Status == utils.ERROR
	})
	restore()
	if !strings.Contains(st.LastError, "bookies went away") {
		t.Fatalf("lastError %q", st.LastError)
	}
	after, err := a.Topics().GetInternalStats(*atn)
	if err != nil || after.CompactedLedger != before.CompactedLedger {
		t.Fatalf("compacted ledger after a failed run %+v, before %+v (%v)", after.CompactedLedger, before.CompactedLedger, err)
	}
	// The previous view, then the topic after its horizon.
	r := e.reader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID(), ReadCompacted: true})
	if got := readAll(t, e, r); strings.Join(got, ",") != "b=1,a=2,a=3,b=" {
		t.Fatalf("view after a failed run %v", got)
	}
	// Seeking back to earliest serves the compacted view again.
	if err := r.Seek(pulsar.NewMessageID(-1, -1, -1, 0)); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, e, r); strings.Join(got, ",") != "b=1,a=2,a=3,b=" {
		t.Fatalf("view after seeking to earliest %v", got)
	}

	compactAndWait(t, e, a, topic)
	if got := readAll(t, e, e.reader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID(), ReadCompacted: true})); strings.Join(got, ",") != "a=3" {
		t.Fatalf("view after the next run %v", got)
	}
	// Everything deleted: the compacted reader has nothing to read.
	sendKV(t, e, p, false, []kv{{"a", nil}})
	compactAndWait(t, e, a, topic)
	if got := readAll(t, e, e.reader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID(), ReadCompacted: true})); len(got) != 0 {
		t.Fatalf("view of a topic of tombstones %v", got)
	}
	resp, err := http.Get(e.sa.WebServiceURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`magnetar_broker_compactions_total{outcome="error"} 1`, `magnetar_broker_compactions_total{outcome="success"} 3`,
		"magnetar_broker_compaction_seconds_count 4"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestCompactedViewOutlivesTrimmedLedgers: once compacted, the topic's
// ledgers may be trimmed; a compacted reader from earliest still gets the
// whole view.
func TestCompactedViewOutlivesTrimmedLedgers(t *testing.T) {
	e := newEnv(t)
	a := pulsarAdmin(t, e.sa)
	topic := "persistent://public/default/compact-trimmed"
	atn, _ := utils.GetTopicName(topic)
	tn, _ := broker.ParseTopicName(topic)
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	sendKV(t, e, p, false, []kv{{"a", val("1")}, {"b", val("1")}, {"a", val("2")}})
	compactAndWait(t, e, a, topic)
	before, err := a.Topics().GetInternalStats(*atn)
	if err != nil || len(before.Ledgers) != 1 {
		t.Fatalf("ledgers %+v, %v", before.Ledgers, err)
	}
	p.Close()
	// Closing the topic closes its ledger; reopened, it writes a new one
	// and trims the old one, consumed by the compaction cursor alone.
	if err := e.sa.Broker().UnloadTopic(e.ctx, tn); err != nil {
		t.Fatal(err)
	}
	p2 := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	sendKV(t, e, p2, false, []kv{{"c", val("1")}})
	waitFor(t, e, "the compacted ledger's source trimmed", func() bool {
		is, err := a.Topics().GetInternalStats(*atn)
		return err == nil && len(is.Ledgers) == 1 && is.Ledgers[0].LedgerID != before.Ledgers[0].LedgerID
	})
	if got := readAll(t, e, e.reader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})); strings.Join(got, ",") != "c=1" {
		t.Fatalf("topic after trimming %v", got)
	}
	if got := readAll(t, e, e.reader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID(), ReadCompacted: true})); strings.Join(got, ",") != "b=1,a=2,c=1" {
		t.Fatalf("compacted view after trimming %v", got)
	}
}

func TestCompactionOfPartitionedTopic(t *testing.T) {
	e := newEnv(t)
	a := pulsarAdmin(t, e.sa)
	topic := "persistent://public/default/compact-partitioned"
	atn, _ := utils.GetTopicName(topic)
	if err := a.Topics().Create(*atn, 2); err != nil {
		t.Fatal(err)
	}
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	var msgs []kv
	for round := 0; round < 3; round++ {
		for k := 0; k < 6; k++ {
			msgs = append(msgs, kv{fmt.Sprintf("k%d", k), val(fmt.Sprint(round))})
		}
	}
	sendKV(t, e, p, false, msgs)
	if st, err := a.Topics().CompactStatus(*atn); err != nil || st.Status != utils.NOTRUN {
		t.Fatalf("status of the partitioned topic before compaction: %+v, %v", st, err)
	}
	if err := a.Topics().Compact(*atn); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		ptn, _ := utils.GetTopicName(fmt.Sprintf("%s-partition-%d", topic, i))
		waitFor(t, e, "compaction of a partition", func() bool {
			st, err := a.Topics().CompactStatus(*ptn)
			return err == nil && st.Status == utils.SUCCESS
		})
	}
	// The partitioned topic's status sums up its partitions'.
	if st, err := a.Topics().CompactStatus(*atn); err != nil || st.Status != utils.SUCCESS {
		t.Fatalf("status of the partitioned topic: %+v, %v", st, err)
	}
	got := map[string]string{}
	c := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "view", ReadCompacted: true,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	for range 6 {
		m := e.receive(c)
		if _, dup := got[m.Key()]; dup {
			t.Fatalf("key %s twice", m.Key())
		}
		got[m.Key()] = string(m.Payload())
	}
	for k, v := range got {
		if v != "2" {
			t.Fatalf("%s=%s, want the latest value 2 (%v)", k, v, got)
		}
	}
	e.expectNothing(c, 300*time.Millisecond)
}

// TestCompactionOfChunkedMessages: a chunked message is kept whole, the
// latest per key, and a compacted reader (which assembles the chunks)
// reads every kept message intact.
func TestCompactionOfChunkedMessages(t *testing.T) {
	e := newEnv(t)
	a := pulsarAdmin(t, e.sa)
	topic := "persistent://public/default/compact-chunked"
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true,
		EnableChunking: true, ChunkMaxMessageSize: 100})
	big := func(key string, round int) string {
		return strings.Repeat(fmt.Sprintf("%s-%d.", key, round), 120) // about 600 bytes: 7 chunks
	}
	var msgs []kv
	for round := 0; round < 3; round++ {
		msgs = append(msgs, kv{"a", val(big("a", round))}, kv{"b", val(big("b", round))}, kv{"s", val(fmt.Sprint("small-", round))})
	}
	msgs = append(msgs, kv{"b", nil}, kv{"c", val(big("c", 0))})
	sendKV(t, e, p, false, msgs)
	compactAndWait(t, e, a, topic)

	want := []string{"a=" + big("a", 2), "s=small-2", "c=" + big("c", 0)}
	got := readN(t, e, e.reader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID(), ReadCompacted: true}), len(want))
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("compacted view of chunked messages:\n got %.300q\nwant %.300q", got, want)
	}
	// A second run carries the chunked messages it keeps forward whole.
	sendKV(t, e, p, false, []kv{{"s", val("small-3")}, {"a", val(big("a", 3))}})
	compactAndWait(t, e, a, topic)
	want = []string{"c=" + big("c", 0), "s=small-3", "a=" + big("a", 3)}
	got = readN(t, e, e.reader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID(), ReadCompacted: true}), len(want))
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("compacted view after a second run:\n got %.300q\nwant %.300q", got, want)
	}
}

// readN reads n messages from r, then checks that no other message comes
// (the Go client's HasNext never ends after a chunked message: it compares
// the chunk's batch index -1 with the last message id's, which it turns
// into 0).
func readN(t *testing.T, e *env, r pulsar.Reader, n int) []string {
	t.Helper()
	var out []string
	for range n {
		ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
		m, err := r.Next(ctx)
		cancel()
		if err != nil {
			t.Fatalf("next after %.300q: %v", out, err)
		}
		out = append(out, show(m))
	}
	ctx, cancel := context.WithTimeout(e.ctx, 300*time.Millisecond)
	defer cancel()
	if m, err := r.Next(ctx); err == nil {
		t.Fatalf("after %.300q one more message: %.100q", out, show(m))
	}
	return out
}
