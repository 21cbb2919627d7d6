package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"slices"
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

	moved := produceThroughKill(t, cl, in, verify, func() { c.brokers[0].Kill() }, func() bool {
		st, err := functionStatus(c.web(1), "excl")
		if err != nil || st.NumRunning != 2 {
			return false
		}
		for _, in := range st.Instances {
			if in.Status.WorkerID != c.brokers[1].brokerAddr {
				return false
			}
		}
		return true
	})
	t.Logf("instances running on the surviving worker %v after kill -9", moved.Round(time.Millisecond))
	fmt.Printf("e2e TestFunctionWorkerKill9: both instances running on the surviving worker %v after kill -9\n", moved.Round(time.Millisecond))
}

// produceThroughKill publishes to in while kill runs, waits until moved
// reports the instances running elsewhere (returning how long that took),
// publishes some more, and checks that every acknowledged input has its
// output on verify (at-least-once: duplicates allowed, nothing lost).
func produceThroughKill(t *testing.T, cl pulsar.Client, in string, verify pulsar.Consumer, kill func(), moved func() bool) time.Duration {
	t.Helper()
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
	kill()
	waitFor(t, "the instances running on the surviving worker", 90*time.Second, moved)
	took := time.Since(killed)
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
	return took
}

// TestFunctionsWorkerPool runs functions on a separate pool of two
// `magnetar functions-worker` processes beside a broker that runs no
// worker: a Python function with two instances runs one on each pool
// worker, SIGKILL of one moves its instance to the other while messages
// flow (every acknowledged input with its output), the broker answers no
// functions API, and deleting the function through the pool removes its
// subscription from the broker's topic.
func TestFunctionsWorkerPool(t *testing.T) {
	pyinstancetest.Require(t)
	c := newDataClusterFlags(t, 3, 1, nil, append(slices.Clone(defaultBrokerFlags), "--functions-worker=false"))
	var workers []*Process
	var urls, ids []string
	for i := range 2 {
		addr := FreeAddr(t)
		workers = append(workers, Start(t, fmt.Sprintf("functions-worker-%d", i), "functions-worker",
			"--metadata", c.etcdURL, "--service-url", c.serviceURL(), "--http-addr", addr,
			"--functions-dir", t.TempDir()))
		urls, ids = append(urls, "http://"+addr), append(ids, addr)
	}
	for _, u := range urls {
		waitFor(t, "functions worker up", 60*time.Second, func() bool { return httpOK(u + "/admin/v2/worker/cluster") })
	}
	var members []map[string]any
	if err := getJSON(urls[0]+"/admin/v2/worker/cluster", &members); err != nil || len(members) != 2 {
		t.Fatalf("worker cluster: %v %v", members, err)
	}
	if resp, err := http.Get(c.web(0) + "/admin/v3/functions/public/default"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("the broker without a worker answered the functions API: %v %v", resp, err)
	}
	if m := httpBody(t, urls[0]+"/metrics"); !strings.Contains(m, "magnetar_functions_instances") {
		t.Fatalf("the pool worker's /metrics has no magnetar_functions_instances series:\n%.2000s", m)
	}

	cl := newClusterClient(t, c.serviceURL())
	in, out := "persistent://public/default/fnpool-in", "persistent://public/default/fnpool-out"
	verify, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: out, SubscriptionName: "verify", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer verify.Close()
	createFunction(t, urls[0], "excl", map[string]any{
		"runtime": "PYTHON", "className": "excl.ExclamationFunction", "inputs": []string{in}, "output": out,
		"parallelism": 2, "subscriptionPosition": "Earliest",
	}, "excl.py", []byte(exclamationPy))
	waitFor(t, "two instances running on the two pool workers", 90*time.Second, func() bool {
		st, err := functionStatus(urls[1], "excl")
		return err == nil && st.NumRunning == 2 && st.Instances[0].Status.WorkerID != st.Instances[1].Status.WorkerID
	})
	// Each worker timed its instance's start (exec → first health answer).
	for _, u := range urls {
		waitFor(t, "the worker's Python instance start timed", 10*time.Second, func() bool {
			m := httpBody(t, u+"/metrics")
			return strings.Contains(m, `magnetar_functions_instance_start_seconds_count{runtime="PYTHON"} `) &&
				!strings.Contains(m, `magnetar_functions_instance_start_seconds_count{runtime="PYTHON"} 0`)
		})
	}
	moved := produceThroughKill(t, cl, in, verify, workers[0].Kill, func() bool {
		st, err := functionStatus(urls[1], "excl")
		if err != nil || st.NumRunning != 2 {
			return false
		}
		for _, in := range st.Instances {
			if in.Status.WorkerID != ids[1] {
				return false
			}
		}
		return true
	})
	t.Logf("instances running on the surviving pool worker %v after kill -9", moved.Round(time.Millisecond))

	req, _ := http.NewRequest(http.MethodDelete, urls[1]+"/admin/v3/functions/public/default/excl", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %s", resp.Status)
	}
	waitFor(t, "the function's subscription deleted on the broker", 30*time.Second, func() bool {
		var subs []string
		err := getJSON(c.web(0)+"/admin/v2/persistent/public/default/fnpool-in/subscriptions", &subs)
		return err == nil && !slices.Contains(subs, "public/default/excl")
	})
}

func httpBody(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", u, resp.Status, err)
	}
	return string(b)
}
