package worker_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"

	"github.com/magnetar-dev/magnetar/dataplane/functions/pyinstance/pyinstancetest"
)

const suffixPy = `from pulsar import Function

class Suffix(Function):
    def process(self, input, context):
        return input + context.get_user_config_value('suffix')
`

// TestUpdateUnderLoadLosesNothing updates a running Python function (its
// user config) while messages flow: the instances restart with the new
// version, every acknowledged input has an output (from the old or the new
// version), and deleting the function removes its subscription.
func TestUpdateUnderLoadLosesNothing(t *testing.T) {
	pyinstancetest.Require(t)
	s := startStandalone(t)
	base := s.WebServiceURL()
	in, out := "persistent://public/default/upd-in", "persistent://public/default/upd-out"
	cl := standalonetest.NewClient(t, s.ServiceURL())
	verify, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: out, SubscriptionName: "verify"})
	if err != nil {
		t.Fatal(err)
	}
	defer verify.Close()
	cfg := map[string]any{"runtime": "PYTHON", "className": "suffix.Suffix", "inputs": []string{in}, "output": out,
		"userConfig": map[string]any{"suffix": "!"}, "subscriptionPosition": "Earliest"}
	c, _ := json.Marshal(cfg)
	body, ct := multipartBody(t, map[string]string{"functionConfig": string(c)}, []byte(suffixPy), "suffix.py")
	if code, b := call(t, http.MethodPost, base+"/admin/v3/functions/public/default/suffix", body, ct); code != http.StatusNoContent {
		t.Fatalf("create: %d %s", code, b)
	}
	eventually(t, 60*time.Second, "running", func() (bool, string) {
		st := status(t, base, "suffix")
		return st.NumRunning == 1, st.Instances[0].Status.Error
	})
	prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: in})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var mu sync.Mutex
	var acked []int
	stop, done := make(chan struct{}), make(chan struct{})
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
			time.Sleep(2 * time.Millisecond)
		}
	}()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	eventually(t, 30*time.Second, "messages flowing", func() (bool, string) { return count() >= 300, strconv.Itoa(count()) })
	upd, _ := json.Marshal(map[string]any{"userConfig": map[string]any{"suffix": "?"}})
	body, ct = multipartBody(t, map[string]string{"functionConfig": string(upd)}, nil, "")
	if code, b := call(t, http.MethodPut, base+"/admin/v3/functions/public/default/suffix", body, ct); code != http.StatusNoContent {
		t.Fatalf("update: %d %s", code, b)
	}
	seen := map[string]bool{}
	newVersion := false
	receive := func(d time.Duration) bool {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		msg, err := verify.Receive(ctx)
		if err != nil {
			return false
		}
		verify.Ack(msg)
		p := string(msg.Payload())
		seen[p[:len(p)-1]] = true
		if strings.HasSuffix(p, "?") {
			newVersion = true
		}
		return true
	}
	deadline := time.Now().Add(60 * time.Second)
	for !newVersion && time.Now().Before(deadline) {
		receive(time.Second)
	}
	if !newVersion {
		t.Fatal("no output of the updated version within 60 s")
	}
	before := count()
	eventually(t, 30*time.Second, "messages flowing after the update", func() (bool, string) { return count() >= before+300, strconv.Itoa(count()) })
	close(stop)
	<-done
	mu.Lock()
	want := append([]int(nil), acked...)
	mu.Unlock()
	missing := func() []string {
		var m []string
		for _, i := range want {
			if !seen["m-"+strconv.Itoa(i)] {
				m = append(m, "m-"+strconv.Itoa(i))
			}
		}
		return m
	}
	deadline = time.Now().Add(60 * time.Second)
	for len(missing()) > 0 && time.Now().Before(deadline) {
		receive(2 * time.Second)
	}
	if m := missing(); len(m) > 0 {
		t.Fatalf("%d of %d acknowledged inputs have no output, e.g. %v", len(m), len(want), m[:min(len(m), 10)])
	}
	t.Logf("%d acknowledged inputs across the update, every one with its output", len(want))

	if code, b := call(t, http.MethodGet, base+"/admin/v2/persistent/public/default/upd-in/subscriptions", nil, ""); code != http.StatusOK || !strings.Contains(string(b), "public/default/suffix") {
		t.Fatalf("the function's subscription before delete: %d %s", code, b)
	}
	if code, b := call(t, http.MethodDelete, base+"/admin/v3/functions/public/default/suffix", nil, ""); code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", code, b)
	}
	eventually(t, 30*time.Second, "the function's subscription removed", func() (bool, string) {
		code, b := call(t, http.MethodGet, base+"/admin/v2/persistent/public/default/upd-in/subscriptions", nil, "")
		return code == http.StatusOK && !strings.Contains(string(b), "public/default/suffix"), string(b)
	})
}
