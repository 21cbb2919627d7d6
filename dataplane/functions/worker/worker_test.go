package worker_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/functions/worker"
	"github.com/magnetar-dev/magnetar/dataplane/standalone"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

// The tests run "Go functions" that are shell scripts: the worker runs a Go
// function's package as an executable, so a script exercises the worker's
// scheduling and supervision with real child processes without any
// runtime. Runtimes are tested with their instances (pyinstance,
// client/functions/pf, the Java suite in e2e).

func startStandalone(t *testing.T) *standalone.Standalone {
	t.Helper()
	cfg := standalonetest.Config(t.TempDir(), standalonetest.FreeAddr(t))
	if os.Getenv("WORKER_TEST_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return standalonetest.Start(t, cfg)
}

// script returns a shell script whose bytes are unique to the test (so
// its package digest, which is in the path the worker runs it from,
// identifies its processes) and that digest.
func script(t *testing.T, body string) ([]byte, string) {
	b := []byte(fmt.Sprintf("#!/bin/sh\n# %s %d\n%s\n", t.Name(), time.Now().UnixNano(), body))
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:])
}

func multipartBody(t *testing.T, parts map[string]string, file []byte, fileName string) (*bytes.Buffer, string) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for k, v := range parts {
		mw.WriteField(k, v)
	}
	if file != nil {
		fw, err := mw.CreateFormFile("data", fileName)
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(file)
	}
	mw.Close()
	return &buf, mw.FormDataContentType()
}

func call(t *testing.T, method, url string, body io.Reader, ctype string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func createGo(t *testing.T, base, name string, cfg map[string]any, pkg []byte) (int, string) {
	t.Helper()
	c, _ := json.Marshal(cfg)
	body, ct := multipartBody(t, map[string]string{"functionConfig": string(c)}, pkg, "fn")
	code, b := call(t, http.MethodPost, base+"/admin/v3/functions/public/default/"+name, body, ct)
	return code, string(b)
}

func eventually(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s; last: %s", what, d, last)
}

// processes counts live processes whose command line holds marker.
func processes(marker string) int {
	out, _ := exec.Command("pgrep", "-f", marker).Output()
	return len(strings.Fields(string(out)))
}

type statusJSON struct {
	NumInstances int `json:"numInstances"`
	NumRunning   int `json:"numRunning"`
	Instances    []struct {
		InstanceID int `json:"instanceId"`
		Status     struct {
			Running     bool   `json:"running"`
			Error       string `json:"error"`
			NumRestarts int64  `json:"numRestarts"`
			WorkerID    string `json:"workerId"`
		} `json:"status"`
	} `json:"instances"`
}

func status(t *testing.T, base, name string) statusJSON {
	t.Helper()
	code, b := call(t, http.MethodGet, base+"/admin/v3/functions/public/default/"+name+"/status", nil, "")
	if code != http.StatusOK {
		t.Fatalf("status: %d %s", code, b)
	}
	var s statusJSON
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("status %s: %v", b, err)
	}
	return s
}

func TestCrashingInstanceRestartsWithBackoffAndReportsWhy(t *testing.T) {
	s := startStandalone(t)
	base := s.WebServiceURL()
	pkg, _ := script(t, `echo "java.lang.IllegalStateException: cannot start: $1" >&2; exit 3`)
	if code, b := createGo(t, base, "crasher", map[string]any{"runtime": "GO", "inputs": []string{"in"}}, pkg); code != http.StatusNoContent {
		t.Fatalf("create: %d %s", code, b)
	}
	eventually(t, 30*time.Second, "restarts reported", func() (bool, string) {
		st := status(t, base, "crasher")
		in := st.Instances[0].Status
		return in.NumRestarts >= 2 && strings.Contains(in.Error, "cannot start: -instance-conf") &&
			strings.Contains(in.Error, "exit status 3") && !in.Running, fmt.Sprintf("%+v", in)
	})
	// The broker's /metrics counts the restarts.
	if code, b := call(t, http.MethodGet, base+"/metrics", nil, ""); code != http.StatusOK ||
		!strings.Contains(string(b), "magnetar_functions_instance_restarts_total") || !strings.Contains(string(b), "magnetar_functions_scheduler_leader 1") {
		t.Fatalf("metrics: %d, no functions series", code)
	}
	// The backoff doubles from 1 s: a few seconds hold a handful of
	// starts, not hundreds.
	first := status(t, base, "crasher").Instances[0].Status.NumRestarts
	time.Sleep(3 * time.Second)
	if n := status(t, base, "crasher").Instances[0].Status.NumRestarts - first; n > 3 {
		t.Fatalf("%d restarts in 3 s: no backoff", n)
	}
	if code, b := call(t, http.MethodDelete, base+"/admin/v3/functions/public/default/crasher", nil, ""); code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", code, b)
	}
}

func TestInstancesRebalanceWhenWorkersJoinAndLeave(t *testing.T) {
	s := startStandalone(t)
	base := s.WebServiceURL()
	pkg, digest := script(t, `while true; do sleep 1; done`)
	if code, b := createGo(t, base, "spread", map[string]any{"runtime": "GO", "inputs": []string{"in"}, "parallelism": 4}, pkg); code != http.StatusNoContent {
		t.Fatalf("create: %d %s", code, b)
	}
	owners := func() map[string]int {
		out := map[string]int{}
		for _, in := range status(t, base, "spread").Instances {
			out[in.Status.WorkerID]++
		}
		return out
	}
	first := s.Broker().BrokerID()
	eventually(t, 30*time.Second, "four instances on the one worker", func() (bool, string) {
		o := owners()
		return o[first] == 4 && processes(digest) == 4, fmt.Sprintf("owners %v, %d processes", o, processes(digest))
	})

	// A second worker joins: it takes half, and no instance runs twice.
	srv := httptest.NewUnstartedServer(nil)
	w2, err := worker.New(worker.Config{
		Metadata: s.Metadata(), Broker: s.Broker(), ID: "second-worker", URL: "http://" + srv.Listener.Addr().String(),
		Packages: s.FunctionsWorker().Packages(), DataDir: t.TempDir(), Logger: standalonetest.QuietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = w2
	srv.Start()
	defer srv.Close()
	w2.Start()
	stopped := false
	defer func() {
		if !stopped {
			w2.Shutdown(context.Background())
		}
	}()
	eventually(t, 30*time.Second, "two instances on each worker", func() (bool, string) {
		o := owners()
		return o[first] == 2 && o["second-worker"] == 2 && processes(digest) == 4, fmt.Sprintf("owners %v, %d processes", o, processes(digest))
	})

	// It leaves: its instances come back, still four processes.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w2.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	stopped = true
	eventually(t, 30*time.Second, "four instances back on the first worker", func() (bool, string) {
		o := owners()
		return o[first] == 4 && processes(digest) == 4, fmt.Sprintf("owners %v, %d processes", o, processes(digest))
	})

	// Stop and start one instance; delete stops them all.
	if code, b := call(t, http.MethodPost, base+"/admin/v3/functions/public/default/spread/1/stop", nil, ""); code != http.StatusNoContent {
		t.Fatalf("stop: %d %s", code, b)
	}
	eventually(t, 20*time.Second, "three processes after stop", func() (bool, string) {
		return processes(digest) == 3, fmt.Sprint(processes(digest))
	})
	if st := status(t, base, "spread"); st.Instances[1].Status.Error != "instance is stopped" {
		t.Fatalf("stopped instance status: %+v", st.Instances[1].Status)
	}
	if code, b := call(t, http.MethodPost, base+"/admin/v3/functions/public/default/spread/start", nil, ""); code != http.StatusNoContent {
		t.Fatalf("start: %d %s", code, b)
	}
	eventually(t, 20*time.Second, "four processes after start", func() (bool, string) {
		return processes(digest) == 4, fmt.Sprint(processes(digest))
	})
	// Their running time is metered for billing, per namespace.
	eventually(t, 30*time.Second, "instance-seconds in the usage report", func() (bool, string) {
		for _, n := range s.Broker().Usage().Namespaces {
			if n.Tenant == "public" && n.Namespace == "default" && n.FunctionInstanceSeconds > 0 {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", s.Broker().Usage().Namespaces)
	})
	if code, b := call(t, http.MethodDelete, base+"/admin/v3/functions/public/default/spread", nil, ""); code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", code, b)
	}
	eventually(t, 20*time.Second, "no processes after delete", func() (bool, string) {
		return processes(digest) == 0, fmt.Sprint(processes(digest))
	})
}

func TestStateAPI(t *testing.T) {
	s := startStandalone(t)
	base := s.WebServiceURL()
	pkg, _ := script(t, `while true; do sleep 1; done`)
	if code, b := createGo(t, base, "stateful", map[string]any{"runtime": "GO", "inputs": []string{"in"}}, pkg); code != http.StatusNoContent {
		t.Fatalf("create: %d %s", code, b)
	}
	st := base + "/magnetar/v1/functions/public/default/stateful"
	for i, want := range []string{`{"value":5}`, `{"value":3}`} {
		delta := []int{5, -2}[i]
		code, b := call(t, http.MethodPost, st+"/counter/hits", strings.NewReader(fmt.Sprintf(`{"delta":%d}`, delta)), "application/json")
		if code != http.StatusOK || strings.TrimSpace(string(b)) != want {
			t.Fatalf("incr %d: %d %s, want %s", delta, code, b, want)
		}
	}
	if code, b := call(t, http.MethodGet, st+"/counter/missing", nil, ""); code != http.StatusOK || strings.TrimSpace(string(b)) != `{"value":0}` {
		t.Fatalf("absent counter: %d %s", code, b)
	}
	if code, b := call(t, http.MethodPut, st+"/state/a%2Fkey", strings.NewReader("v1"), "application/octet-stream"); code != http.StatusNoContent {
		t.Fatalf("put: %d %s", code, b)
	}
	if code, b := call(t, http.MethodGet, st+"/state/a%2Fkey", nil, ""); code != http.StatusOK || string(b) != "v1" {
		t.Fatalf("get: %d %s", code, b)
	}
	// Pulsar's querystate sees both, the counter as a number.
	q := base + "/admin/v3/functions/public/default/stateful/state/"
	if code, b := call(t, http.MethodGet, q+"hits", nil, ""); code != http.StatusOK || !strings.Contains(string(b), `"numberValue":3`) {
		t.Fatalf("querystate counter: %d %s", code, b)
	}
	if code, b := call(t, http.MethodGet, q+"a%2Fkey", nil, ""); code != http.StatusOK || !strings.Contains(string(b), `"stringValue":"v1"`) {
		t.Fatalf("querystate value: %d %s", code, b)
	}
	body, ct := multipartBody(t, map[string]string{"state": `{"key":"greeting","stringValue":"hello"}`}, nil, "")
	if code, b := call(t, http.MethodPost, q+"greeting", body, ct); code != http.StatusNoContent {
		t.Fatalf("putstate: %d %s", code, b)
	}
	if code, b := call(t, http.MethodGet, st+"/state/greeting", nil, ""); code != http.StatusOK || string(b) != "hello" {
		t.Fatalf("putstate read back: %d %s", code, b)
	}
	if code, _ := call(t, http.MethodDelete, st+"/state/greeting", nil, ""); code != http.StatusNoContent {
		t.Fatalf("delete state: %d", code)
	}
	if code, _ := call(t, http.MethodGet, q+"greeting", nil, ""); code != http.StatusNotFound {
		t.Fatalf("deleted state: %d, want 404", code)
	}
	// Deleting the function deletes its state.
	if code, b := call(t, http.MethodDelete, base+"/admin/v3/functions/public/default/stateful", nil, ""); code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", code, b)
	}
	if code, b := createGo(t, base, "stateful", map[string]any{"runtime": "GO", "inputs": []string{"in"}}, pkg); code != http.StatusNoContent {
		t.Fatalf("re-create: %d %s", code, b)
	}
	if code, b := call(t, http.MethodGet, st+"/counter/hits", nil, ""); strings.TrimSpace(string(b)) != `{"value":0}` {
		t.Fatalf("state survived delete: %d %s", code, b)
	}
}

func TestRefusals(t *testing.T) {
	s := startStandalone(t)
	base := s.WebServiceURL()
	pkg, _ := script(t, `sleep 60`)
	fn := base + "/admin/v3/functions/public/default/"
	cases := []struct {
		name   string
		cfg    map[string]any
		pkg    []byte
		code   int
		reason string
	}{
		{"noinputs", map[string]any{"runtime": "GO"}, pkg, 400, "No input topic(s) specified for the function"},
		{"nopackage", map[string]any{"runtime": "GO", "inputs": []string{"in"}}, nil, 400, "Function package is not provided"},
		{"noclass", map[string]any{"runtime": "JAVA", "inputs": []string{"in"}}, pkg, 400, "Function classname cannot be null"},
		{"loop", map[string]any{"runtime": "GO", "inputs": []string{"a"}, "output": "a"}, pkg, 400, "Output topic a is also being used as an input topic"},
		{"badpar", map[string]any{"runtime": "GO", "inputs": []string{"a"}, "parallelism": 0}, pkg, 400, "Parallelism must be a positive number"},
		{"bad/name", map[string]any{"runtime": "GO", "inputs": []string{"a"}}, pkg, 400, "Invalid name"},
	}
	for _, c := range cases {
		code, b := createGo(t, base, strings.ReplaceAll(c.name, "/", "%2F"), c.cfg, c.pkg)
		if code != c.code || !strings.Contains(b, c.reason) {
			t.Errorf("%s: %d %s, want %d %q", c.name, code, b, c.code, c.reason)
		}
	}
	if code, b := createGo(t, base, "dup", map[string]any{"runtime": "GO", "inputs": []string{"in"}}, pkg); code != 204 {
		t.Fatalf("create: %d %s", code, b)
	}
	if code, b := createGo(t, base, "dup", map[string]any{"runtime": "GO", "inputs": []string{"in"}}, pkg); code != 400 || !strings.Contains(b, "Function dup already exists") {
		t.Errorf("duplicate: %d %s", code, b)
	}
	for _, p := range []string{"missing", "missing/status", "missing/stats", "missing/0/status"} {
		if code, b := call(t, http.MethodGet, fn+p, nil, ""); code != 404 || !strings.Contains(string(b), "Function missing doesn't exist") {
			t.Errorf("GET %s: %d %s", p, code, b)
		}
	}
	if code, b := call(t, http.MethodDelete, fn+"missing", nil, ""); code != 404 {
		t.Errorf("DELETE missing: %d %s", code, b)
	}
	src, _ := json.Marshal(map[string]any{"topicName": "out", "archive": "builtin://no-such-connector"})
	body, ct := multipartBody(t, map[string]string{"sourceConfig": string(src)}, nil, "")
	if code, b := call(t, http.MethodPost, base+"/admin/v3/source/public/default/src", body, ct); code != 400 || !strings.Contains(string(b), "no-such-connector") {
		t.Errorf("unknown builtin: %d %s", code, b)
	}
	// An update keeps the stored package and bumps the version.
	upd, _ := json.Marshal(map[string]any{"parallelism": 2})
	body, ct = multipartBody(t, map[string]string{"functionConfig": string(upd)}, nil, "")
	if code, b := call(t, http.MethodPut, fn+"dup", body, ct); code != 204 {
		t.Fatalf("update: %d %s", code, b)
	}
	if st := status(t, base, "dup"); st.NumInstances != 2 {
		t.Errorf("after update: %d instances", st.NumInstances)
	}
	upd, _ = json.Marshal(map[string]any{"processingGuarantees": "ATMOST_ONCE"})
	body, ct = multipartBody(t, map[string]string{"functionConfig": string(upd)}, nil, "")
	if code, b := call(t, http.MethodPut, fn+"dup", body, ct); code != 400 || !strings.Contains(string(b), "Processing Guarantees cannot be altered") {
		t.Errorf("immutable update: %d %s", code, b)
	}
	// Unknown instances, and the worker's own endpoints.
	if code, _ := call(t, http.MethodGet, fn+"dup/7/status", nil, ""); code != 400 {
		t.Errorf("instance 7: %d", code)
	}
	if code, b := call(t, http.MethodGet, base+"/admin/v2/worker/cluster", nil, ""); code != 200 || !strings.Contains(string(b), s.Broker().BrokerID()) {
		t.Errorf("worker cluster: %d %s", code, b)
	}
	if code, b := call(t, http.MethodGet, base+"/admin/v3/sources/builtinsources", nil, ""); code != 200 || !strings.HasPrefix(string(b), "[") {
		t.Errorf("builtin sources: %d %s", code, b)
	}
}

func TestPackageOverTheLimitIsRefused(t *testing.T) {
	cfg := standalonetest.Config(t.TempDir(), standalonetest.FreeAddr(t))
	cfg.FunctionsMaxPackageSize = 4096
	s := standalonetest.Start(t, cfg)
	big := append([]byte("#!/bin/sh\n"), bytes.Repeat([]byte("#"), 8192)...)
	code, b := createGo(t, s.WebServiceURL(), "big", map[string]any{"runtime": "GO", "inputs": []string{"in"}}, big)
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(b, "larger than the limit of 4096 bytes") {
		t.Fatalf("oversized package: %d %s", code, b)
	}
	// The worker goes on: a package under the limit is accepted.
	pkg, _ := script(t, "sleep 60")
	if code, b := createGo(t, s.WebServiceURL(), "small", map[string]any{"runtime": "GO", "inputs": []string{"in"}}, pkg); code != http.StatusNoContent {
		t.Fatalf("small package after a refused one: %d %s", code, b)
	}
}
