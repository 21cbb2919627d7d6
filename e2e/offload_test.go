package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin/config"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/magnetar-dev/magnetar/dataplane/offload/s3test"
)

// tieredEnv is a versitygw S3 server behind a TCP proxy and a `magnetar
// standalone` offloading to it.
type tieredEnv struct {
	s3     *s3test.Server
	px     *Proxy
	sp     *standaloneProc
	bucket string
	admin  string
}

func startTiered(t *testing.T, extra ...string) *tieredEnv {
	t.Helper()
	if testing.Short() {
		t.Skip("process-level test")
	}
	srv := s3test.Start(t)
	e := &tieredEnv{s3: srv, bucket: "magnetar-tiered"}
	srv.CreateBucket(t, e.bucket)
	e.px = StartProxy(t, srv.Addr)
	args := append([]string{
		"--managed-ledger-offload-driver", "s3",
		"--s3-managed-ledger-offload-bucket", e.bucket,
		"--s3-managed-ledger-offload-service-endpoint", "http://" + e.px.Addr(),
		"--s3-managed-ledger-offload-region", s3test.Region,
		"--s3-managed-ledger-offload-credential-id", s3test.AccessKey,
		"--s3-managed-ledger-offload-credential-secret", s3test.SecretKey,
	}, extra...)
	e.sp = startStandaloneProc(t, t.TempDir(), args...)
	e.admin = "http://" + e.sp.httpAddr + "/admin/v2"
	// Keep every ledger: without subscriptions and retention, consumed
	// ledgers would be deleted before they are offloaded.
	if code, b := call(t, http.MethodPost, e.admin+"/namespaces/public/default/retention",
		`{"retentionTimeInMinutes":-1,"retentionSizeInMB":-1}`); code/100 != 2 {
		t.Fatalf("set retention: %d %s", code, b)
	}
	return e
}

// call sends an admin request and returns the status and body.
func call(t *testing.T, method, u, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

type offloadStatusJSON struct {
	Status                  string `json:"status"`
	LastError               string `json:"lastError"`
	FirstUnoffloadedMessage struct {
		LedgerID int64 `json:"ledgerId"`
		EntryID  int64 `json:"entryId"`
	} `json:"firstUnoffloadedMessage"`
}

type internalStatsJSON struct {
	Ledgers []struct {
		LedgerID  int64 `json:"ledgerId"`
		Entries   int64 `json:"entries"`
		Size      int64 `json:"size"`
		Offloaded bool  `json:"offloaded"`
	} `json:"ledgers"`
}

func tieredPayload(i, size int) []byte {
	b := bytes.Repeat([]byte{byte(i)}, size)
	copy(b, fmt.Sprintf("msg-%07d-", i))
	return b
}

// produceLedgers sends n messages of size bytes per ledger, unloading the
// topic after each batch so that every batch is a closed ledger.
func produceLedgers(t *testing.T, e *tieredEnv, cl pulsar.Client, topic string, batches, n, size int) int {
	t.Helper()
	sent := 0
	for b := range batches {
		p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		for range n {
			if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: tieredPayload(sent, size)}); err != nil {
				t.Fatalf("send %d: %v", sent, err)
			}
			sent++
		}
		p.Close()
		if b < batches-1 {
			put(t, e.admin+"/persistent/public/default/"+topicLocal(topic)+"/unload")
		}
	}
	return sent
}

func topicLocal(topic string) string { return topic[strings.LastIndex(topic, "/")+1:] }

// consumeAll reads the topic from the earliest message with a new
// subscription and checks every message, in order.
func consumeAll(t *testing.T, cl pulsar.Client, topic, sub string, n, size int) {
	t.Helper()
	c, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		m, err := c.Receive(ctx)
		cancel()
		if err != nil {
			t.Fatalf("receive %d of %d: %v", i, n, err)
		}
		if !bytes.Equal(m.Payload(), tieredPayload(i, size)) {
			t.Fatalf("message %d (%v) differs from what was sent", i, m.ID())
		}
		c.Ack(m)
	}
}

// TestTieredStorage runs a standalone against a real S3 server: closed
// ledgers offloaded by the manual trigger and by the namespace threshold,
// status and stats through the admin API, bookie copies deleted at once,
// and a Go client consumer reading from the earliest message across S3 and
// bookie ledgers, through an S3 outage.
func TestTieredStorage(t *testing.T) {
	e := startTiered(t, "--managed-ledger-offload-deletion-lag-ms", "0")
	cl := pulsarClient(t, e.sp.brokerAddr)
	defer cl.Close()
	topic := "persistent://public/default/tiered"
	tpath := e.admin + "/persistent/public/default/tiered"
	const size = 4096
	n := produceLedgers(t, e, cl, topic, 4, 150, size)

	if code, b := call(t, http.MethodGet, tpath+"/offload", ""); code != http.StatusOK || !strings.Contains(string(b), `"NOT_RUN"`) {
		t.Fatalf("offload status before: %d %s", code, b)
	}
	st := offloadAndWait(t, tpath, lastMessageID(t, tpath))
	var is internalStatsJSON
	if err := getJSON(tpath+"/internalStats", &is); err != nil {
		t.Fatal(err)
	}
	if len(is.Ledgers) != 4 || !is.Ledgers[0].Offloaded || !is.Ledgers[2].Offloaded || is.Ledgers[3].Offloaded {
		t.Fatalf("internal stats ledgers: %+v", is.Ledgers)
	}
	if st.FirstUnoffloadedMessage.LedgerID != is.Ledgers[3].LedgerID {
		t.Fatalf("first unoffloaded %+v, current ledger %d", st.FirstUnoffloadedMessage, is.Ledgers[3].LedgerID)
	}
	var ts map[string]any
	if err := getJSON(tpath+"/stats", &ts); err != nil {
		t.Fatal(err)
	}
	want := is.Ledgers[0].Size + is.Ledgers[1].Size + is.Ledgers[2].Size
	if got := ts["offloadedStorageSize"].(float64); int64(got) != want || want < 3*150*size {
		t.Fatalf("offloadedStorageSize %v, want %d", got, want)
	}
	if keys := e.s3.Keys(t, e.bucket); len(keys) != 6 {
		t.Fatalf("bucket: %v", keys)
	}

	// The bookie copies are gone (lag 0): with S3 cut off a reader from
	// the earliest message gets nothing; once S3 is back it gets every
	// message, from S3 then from the bookie.
	e.px.Cut()
	r, err := cl.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	if _, err := r.Next(ctx); err == nil {
		t.Fatal("read the first (offloaded) message with S3 cut off")
	}
	cancel()
	r.Close()
	e.px.Restore()
	consumeAll(t, cl, topic, "from-earliest", n, size)
	if v := metricValue(t, "http://"+e.sp.httpAddr+"/metrics", "magnetar_offload_range_reads_total"); v == 0 {
		t.Fatal("no range read of S3 counted")
	}

	// Namespace policies: threshold 0 (offload every closed ledger) applies
	// to the loaded topic; the next closed ledger goes on its own.
	if code, b := call(t, http.MethodPut, e.admin+"/namespaces/public/default/offloadThreshold", "0"); code/100 != 2 {
		t.Fatalf("set offloadThreshold: %d %s", code, b)
	}
	if code, b := call(t, http.MethodGet, e.admin+"/namespaces/public/default/offloadThreshold", ""); code != 200 || string(b) != "0" {
		t.Fatalf("get offloadThreshold: %d %s", code, b)
	}
	put(t, tpath+"/unload") // closes the fourth ledger; the reopen (stats) offloads it
	waitFor(t, "fourth ledger offloaded after unload", 60*time.Second, func() bool {
		var is internalStatsJSON
		return getJSON(tpath+"/internalStats", &is) == nil && len(is.Ledgers) == 4 && is.Ledgers[3].Offloaded
	})
	consumeAll(t, cl, topic, "after-policy", n, size)
}

// TestTieredStorageKill9 kills the standalone with SIGKILL in the middle
// of an offload (S3 slowed by the proxy, a multipart upload unfinished) and
// restarts it: the restart aborts the partial upload, the ledger stays
// readable throughout, and a new offload completes; nothing is lost.
func TestTieredStorageKill9(t *testing.T) {
	e := startTiered(t, "--managed-ledger-offload-deletion-lag-ms", "0")
	cl := pulsarClient(t, e.sp.brokerAddr)
	topic := "persistent://public/default/tiered-kill"
	tpath := e.admin + "/persistent/public/default/tiered-kill"
	const size = 10 << 10
	n := produceLedgers(t, e, cl, topic, 2, 1200, size) // a 12 MiB ledger: 3 parts
	cl.Close()

	e.px.SetDelay(40 * time.Millisecond) // ~800 KB/s: a part takes seconds
	body := lastMessageID(t, tpath)
	if code, b := call(t, http.MethodPut, tpath+"/offload", body); code != http.StatusNoContent {
		t.Fatalf("PUT offload: %d %s", code, b)
	}
	waitFor(t, "multipart upload started", 60*time.Second, func() bool { return len(e.s3.Uploads(t, e.bucket)) == 1 })
	e.sp.Kill()
	if ups := e.s3.Uploads(t, e.bucket); len(ups) != 1 {
		t.Fatalf("after SIGKILL: uploads %v", ups)
	}
	if keys := e.s3.Keys(t, e.bucket); len(keys) != 0 {
		t.Fatalf("after SIGKILL mid-upload, objects %v", keys)
	}
	e.px.SetDelay(0)
	e.sp.StartAgain()
	e.sp.waitReady(t)

	// The topic loads (stats), finds the unfinished copy and removes it.
	var is internalStatsJSON
	if err := getJSON(tpath+"/internalStats", &is); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "partial upload aborted", 60*time.Second, func() bool { return len(e.s3.Uploads(t, e.bucket)) == 0 })
	cl = pulsarClient(t, e.sp.brokerAddr)
	defer cl.Close()
	consumeAll(t, cl, topic, "after-kill", n, size)

	// The second offload through the Apache Pulsar Go admin client.
	adm, err := admin.New(&config.Config{WebServiceURL: "http://" + e.sp.httpAddr})
	if err != nil {
		t.Fatal(err)
	}
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		t.Fatal(err)
	}
	var mid utils.MessageID
	if err := json.Unmarshal([]byte(body), &mid); err != nil {
		t.Fatal(err)
	}
	if err := adm.Topics().Offload(*tn, mid); err != nil {
		t.Fatalf("admin client Offload: %v", err)
	}
	var ost utils.OffloadProcessStatus
	waitFor(t, "offload done", 60*time.Second, func() bool {
		ost, err = adm.Topics().OffloadStatus(*tn)
		return err == nil && ost.Status != utils.RUNNING
	})
	if ost.Status != utils.SUCCESS || ost.FirstUnOffloadedMessage.LedgerID == 0 {
		t.Fatalf("admin client OffloadStatus: %+v", ost)
	}
	if keys := e.s3.Keys(t, e.bucket); len(keys) != 2 {
		t.Fatalf("bucket after the second offload: %v", keys)
	}
	consumeAll(t, cl, topic, "after-offload", n, size)
}

// metricValue returns the value of an unlabelled metric on a /metrics page.
func metricValue(t *testing.T, u, name string) float64 {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	t.Fatalf("%s not on %s", name, u)
	return 0
}

// lastMessageID returns the topic's last message id as JSON.
func lastMessageID(t *testing.T, tpath string) string {
	t.Helper()
	var last map[string]any
	if err := getJSON(tpath+"/lastMessageId", &last); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(last)
	return string(b)
}

// offloadAndWait triggers an offload up to the message id and waits for
// its success.
func offloadAndWait(t *testing.T, tpath, id string) offloadStatusJSON {
	t.Helper()
	if code, b := call(t, http.MethodPut, tpath+"/offload", id); code != http.StatusNoContent {
		t.Fatalf("PUT offload: %d %s", code, b)
	}
	var st offloadStatusJSON
	waitFor(t, "offload done", 60*time.Second, func() bool {
		return getJSON(tpath+"/offload", &st) == nil && st.Status != "RUNNING"
	})
	if st.Status != "SUCCESS" {
		t.Fatalf("offload: %+v", st)
	}
	return st
}
