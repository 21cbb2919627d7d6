package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/dataplane/functions/pyinstance/pyinstancetest"
)

// createFunction posts a function with its package to a worker's
// /admin/v3/functions.
func createFunction(t *testing.T, adminURL, name string, cfg map[string]any, fileName string, pkg []byte) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	c, _ := json.Marshal(cfg)
	mw.WriteField("functionConfig", string(c))
	fw, _ := mw.CreateFormFile("data", fileName)
	fw.Write(pkg)
	mw.Close()
	resp, err := http.Post(adminURL+"/admin/v3/functions/public/default/"+name, mw.FormDataContentType(), &buf)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("create %s: %s %s", name, resp.Status, b)
	}
}

type fnStatus struct {
	NumInstances int `json:"numInstances"`
	NumRunning   int `json:"numRunning"`
	Instances    []struct {
		Status struct {
			Running  bool   `json:"running"`
			WorkerID string `json:"workerId"`
			Error    string `json:"error"`
		} `json:"status"`
	} `json:"instances"`
}

func functionStatus(adminURL, name string) (fnStatus, error) {
	var st fnStatus
	err := getJSON(adminURL+"/admin/v3/functions/public/default/"+name+"/status", &st)
	return st, err
}

const exclamationPy = `from pulsar import Function

class ExclamationFunction(Function):
    def process(self, input, context):
        return input + '!'
`

// TestFunctionWorkerKill9 runs a Python function with two instances on a
// two-broker cluster (one instance on each broker's worker), kills one
// broker with SIGKILL while messages flow, and checks that its instance
// runs on the other worker within seconds and that every acknowledged input
// has its output (at-least-once: duplicates allowed, nothing lost).
func TestFunctionWorkerKill9(t *testing.T) {
	pyinstancetest.Require(t)
	c := newDataCluster(t, 3, 2)
	cl := newClusterClient(t, c.serviceURL())
	in, out := "persistent://public/default/fnkill-in", "persistent://public/default/fnkill-out"
	verify, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: out, SubscriptionName: "verify", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer verify.Close()
	createFunction(t, c.web(0), "excl", map[string]any{
		"runtime": "PYTHON", "className": "excl.ExclamationFunction", "inputs": []string{in}, "output": out,
		"parallelism": 2, "subscriptionPosition": "Earliest",
	}, "excl.py", []byte(exclamationPy))
	waitFor(t, "two instances running on two workers", 90*time.Second, func() bool {
		st, err := functionStatus(c.web(0), "excl")
		return err == nil && st.NumRunning == 2 && st.Instances[0].Status.WorkerID != st.Instances[1].Status.WorkerID
	})

	prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: in})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var mu sync.Mutex
	var acked []int
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("m-" + strconv.Itoa(i))})
			cancel()
			if err == nil {
				mu.Lock()
				acked = append(acked, i)
				mu.Unlock()
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	waitFor(t, "messages flowing", 30*time.Second, func() bool { return count() >= 200 })
	killed := time.Now()
	c.brokers[0].Kill()
	survivor := c.brokers[1].brokerAddr
	waitFor(t, "both instances running on the surviving worker", 90*time.Second, func() bool {
		st, err := functionStatus(c.web(1), "excl")
		if err != nil || st.NumRunning != 2 {
			return false
		}
		for _, in := range st.Instances {
			if in.Status.WorkerID != survivor {
				return false
			}
		}
		return true
	})
	moved := time.Since(killed)
	t.Logf("instances running on the surviving worker %v after kill -9", moved.Round(time.Millisecond))
	fmt.Printf("e2e TestFunctionWorkerKill9: both instances running on the surviving worker %v after kill -9\n", moved.Round(time.Millisecond))
	before := count()
	waitFor(t, "messages flowing after the kill", 60*time.Second, func() bool { return count() >= before+200 })
	close(stop)
	<-done

	mu.Lock()
	want := make(map[string]bool, len(acked))
	for _, i := range acked {
		want["m-"+strconv.Itoa(i)+"!"] = true
	}
	mu.Unlock()
	seen := map[string]bool{}
	deadline := time.Now().Add(90 * time.Second)
	for len(seen) < len(want) && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		msg, err := verify.Receive(ctx)
		cancel()
		if err != nil {
			continue
		}
		verify.Ack(msg)
		if p := string(msg.Payload()); want[p] {
			seen[p] = true
		}
	}
	if len(seen) != len(want) {
		var missing []string
		for p := range want {
			if !seen[p] {
				missing = append(missing, p)
			}
		}
		if len(missing) > 10 {
			missing = missing[:10]
		}
		t.Fatalf("%d of %d acknowledged inputs have no output, e.g. %s", len(want)-len(seen), len(want), strings.Join(missing, ", "))
	}
	t.Logf("%d acknowledged inputs, every one with its output", len(want))
}
