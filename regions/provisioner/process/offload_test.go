package process_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/magnetar-dev/magnetar/dataplane/offload/s3test"
	"github.com/magnetar-dev/magnetar/e2e"
	"github.com/magnetar-dev/magnetar/regions/provisioner"
	"github.com/magnetar-dev/magnetar/regions/provisioner/process"
	"github.com/magnetar-dev/magnetar/regions/provisioner/provisionertest"
)

// A provisioned cluster offloads to the provisioner's bucket under its own
// prefix, with the credentials the provisioner was given.
func TestProcessClusterOffload(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	srv := s3test.Start(t)
	srv.CreateBucket(t, "region-tiered")
	p, err := process.New(process.Config{DataDir: t.TempDir(), Binary: e2e.Binary(t), Logger: quiet(),
		CheckInterval: 200 * time.Millisecond, StopGrace: 5 * time.Second,
		Offload: process.OffloadConfig{Driver: "s3", Bucket: "region-tiered", Region: s3test.Region, Endpoint: srv.Endpoint,
			Prefix: "eu1/", AccessKeyID: s3test.AccessKey, SecretAccessKey: s3test.SecretKey}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		p.StopAll(context.Background())
	})
	spec := provisioner.ClusterSpec{Name: "organizations/acme/clusters/tiered", Size: provisioner.Size{Brokers: 1, Bookies: 1}, Revision: 1}
	st := provisionertest.WaitReady(t, p, spec)
	admin := st.AdminURL + "/admin/v2"
	do := func(method, u, body string) (int, string) {
		req, _ := http.NewRequest(method, u, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, u, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, b := do(http.MethodPost, admin+"/namespaces/public/default/retention", `{"retentionTimeInMinutes":-1,"retentionSizeInMB":-1}`); code/100 != 2 {
		t.Fatalf("retention: %d %s", code, b)
	}
	cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: st.ServiceURL, OperationTimeout: 30 * time.Second, Logger: plog.NewLoggerWithSlog(quiet())})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topic := admin + "/persistent/public/default/t"
	prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/default/t", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := prod.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	prod.Close()
	if code, b := do(http.MethodPut, topic+"/unload", ""); code/100 != 2 {
		t.Fatalf("unload: %d %s", code, b)
	}
	if code, b := do(http.MethodPut, topic+"/offload", `{"ledgerId":9223372036854775807,"entryId":0}`); code != http.StatusNoContent {
		t.Fatalf("offload: %d %s", code, b)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, b := do(http.MethodGet, topic+"/offload", "")
		var os struct{ Status, LastError string }
		json.Unmarshal([]byte(b), &os)
		if os.Status == "SUCCESS" {
			break
		}
		if os.Status == "ERROR" || time.Now().After(deadline) {
			t.Fatalf("offload status %s", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	keys := srv.Keys(t, "region-tiered")
	if len(keys) != 2 {
		t.Fatalf("bucket: %v", keys)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "eu1/acme/tiered/") {
			t.Fatalf("object %q outside the cluster's prefix", k)
		}
	}
}
