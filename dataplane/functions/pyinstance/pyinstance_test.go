package pyinstance_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/emptypb"

	pf "github.com/magnetar-dev/magnetar/api/pulsarfunctions"
	"github.com/magnetar-dev/magnetar/dataplane/functions/pyinstance"
	"github.com/magnetar-dev/magnetar/dataplane/standalone"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
	"github.com/magnetar-dev/magnetar/internal/freeport"
)

// requireEnv is set (to 1) where the Python instance must be tested: the
// test then fails instead of skipping when python3 lacks its packages.
const requireEnv = "MAGNETAR_REQUIRE_PYTHON_PULSAR"

// The Python modules the instance imports at run time (requirements.txt).
const pythonModules = "pulsar, google.protobuf, h2"

// pythonOrSkip returns the python3 to run the instance with.
func pythonOrSkip(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err == nil {
		out, cerr := exec.Command(py, "-c", "import "+pythonModules).CombinedOutput()
		if cerr != nil {
			err = fmt.Errorf("python3 cannot import %s: %v: %s", pythonModules, cerr, lastLine(string(out)))
		}
	}
	if err != nil {
		if os.Getenv(requireEnv) == "1" {
			t.Fatalf("%v (%s=1; install dataplane/functions/pyinstance/requirements.txt)", err, requireEnv)
		}
		t.Skipf("%v; set %s=1 to make this a failure", err, requireEnv)
	}
	return py
}

// env is one standalone shared by the subtests, with the extracted instance.
type env struct {
	python   string
	mainPath string
	sa       *standalone.Standalone
	client   pulsar.Client
}

func TestPythonInstanceAgainstStandalone(t *testing.T) {
	py := pythonOrSkip(t)
	mainPath, err := pyinstance.Extract(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sa := standalonetest.Start(t, standalonetest.Config(t.TempDir(), standalonetest.FreeAddr(t)))
	e := &env{python: py, mainPath: mainPath, sa: sa, client: standalonetest.NewClient(t, sa.ServiceURL())}

	t.Run("ExclamationClass", func(t *testing.T) {
		d := e.details("excl", "exclamation.ExclamationFunction")
		inst := e.start(t, "exclamation.py", d, nil)
		out := e.subscribe(t, d.Sink.Topic)
		e.produce(t, inputOf(d), "hello", "world")
		for _, want := range []string{"hello!", "world!"} {
			m := receive(t, out)
			if string(m.Payload()) != want {
				t.Fatalf("output %q, want %q", m.Payload(), want)
			}
			if m.Properties()["__pfn_input_topic__"] != inputOf(d) || m.Properties()["__pfn_input_msg_id__"] == "" {
				t.Errorf("output properties %v lack the input topic and message id", m.Properties())
			}
		}
		st := inst.waitStatus(t, func(s *pf.FunctionStatus) bool { return s.NumSuccessfullyProcessed == 2 })
		if !st.Running || st.NumReceived != 2 || st.NumUserExceptions != 0 || st.InstanceId != "0" {
			t.Errorf("status %v", st)
		}
		md, err := inst.control.GetMetrics(ctxT(t), &emptypb.Empty{})
		if err != nil || md.ReceivedTotal != 2 || md.ProcessedSuccessfullyTotal != 2 {
			t.Errorf("GetMetrics = %v, %v", md, err)
		}
		metrics := inst.scrape(t)
		for _, want := range []string{
			`pulsar_function_received_total{tenant="public",namespace="public/default",name="excl",instance_id="0",cluster="standalone",fqfn="public/default/excl"} 2`,
			`pulsar_function_processed_successfully_total{tenant="public",namespace="public/default",name="excl",instance_id="0",cluster="standalone",fqfn="public/default/excl"} 2`,
			`pulsar_function_process_latency_ms_count{`,
		} {
			if !strings.Contains(metrics, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
		t.Logf("idle instance resident set: %d kB", inst.rssKB(t))
		inst.stop(t)
		logFile := filepath.Join(inst.logDir, "excl-0.log")
		if b, err := os.ReadFile(logFile); err != nil || !strings.Contains(string(b), "is running") {
			t.Errorf("log file %s: %v, %q", logFile, err, lastLine(string(b)))
		}
	})

	t.Run("PlainFunctionModule", func(t *testing.T) {
		d := e.details("plain", "exclamation_plain")
		e.start(t, "exclamation_plain.py", d, nil)
		out := e.subscribe(t, d.Sink.Topic)
		e.produce(t, inputOf(d), "hi")
		if m := receive(t, out); string(m.Payload()) != "hi!" {
			t.Fatalf("output %q", m.Payload())
		}
	})

	t.Run("StateCounters", func(t *testing.T) {
		fake := newFakeState(t)
		d := e.details("wordcount", "counter.CountFunction")
		e.start(t, "counter.py", d, []string{"--state_storage_serviceurl", fake.srv.URL,
			"--client_auth_plugin", "org.apache.pulsar.client.impl.auth.AuthenticationToken",
			"--client_auth_params", "token:not-checked-by-the-broker"})
		out := e.subscribe(t, d.Sink.Topic)
		e.produce(t, inputOf(d), "a", "b", "a")
		for _, want := range []string{"a=1", "b=1", "a=2"} {
			if m := receive(t, out); string(m.Payload()) != want {
				t.Fatalf("output %q, want %q", m.Payload(), want)
			}
		}
		fake.mu.Lock()
		defer fake.mu.Unlock()
		if fake.counters["public/default/wordcount/a"] != 2 || string(fake.values["public/default/wordcount/last"]) != "a" {
			t.Errorf("state server holds counters %v values %v", fake.counters, fake.values)
		}
		if fake.auth != "Bearer not-checked-by-the-broker" {
			t.Errorf("Authorization = %q", fake.auth)
		}
	})

	t.Run("RetriesThenDeadLetterTopic", func(t *testing.T) {
		d := e.details("failing", "failing.AlwaysFails")
		d.RetryDetails = &pf.RetryDetails{MaxMessageRetries: 2, DeadLetterTopic: "persistent://public/default/failing-dlq"}
		d.Source.NegativeAckRedeliveryDelayMs = 200
		dlq := e.subscribe(t, d.RetryDetails.DeadLetterTopic)
		inst := e.start(t, "failing.py", d, nil)
		e.produce(t, inputOf(d), "poison")
		if m := receive(t, dlq); string(m.Payload()) != "poison" {
			t.Fatalf("dead-letter message %q", m.Payload())
		}
		st := inst.waitStatus(t, func(s *pf.FunctionStatus) bool { return s.NumUserExceptions >= 3 })
		if len(st.LatestUserExceptions) == 0 || !strings.Contains(st.LatestUserExceptions[0].ExceptionString, "cannot process") {
			t.Errorf("latest user exceptions %v", st.LatestUserExceptions)
		}
		if st.NumSuccessfullyProcessed != 0 {
			t.Errorf("status %v", st)
		}
	})

	t.Run("UserConfigAndLogTopic", func(t *testing.T) {
		d := e.details("greeter", "userconfig.Greeter")
		d.UserConfig = `{"greeting":"hi","suffix":"!"}`
		d.LogTopic = "persistent://public/default/greeter-log"
		logs := e.subscribe(t, d.LogTopic)
		e.start(t, "userconfig.py", d, nil)
		out := e.subscribe(t, d.Sink.Topic)
		e.produce(t, inputOf(d), "bob")
		if m := receive(t, out); string(m.Payload()) != "hi, bob (!)" {
			t.Fatalf("output %q", m.Payload())
		}
		if m := receive(t, logs); !strings.Contains(string(m.Payload()), "greeting bob") || m.Properties()["loglevel"] != "INFO" {
			t.Fatalf("log topic message %q %v", m.Payload(), m.Properties())
		}
	})

	t.Run("BadClassExitsNonZeroWithSummary", func(t *testing.T) {
		d := e.details("broken", "exclamation.NoSuchClass")
		cmd, stderr := e.command(t, "exclamation.py", d, nil)
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 {
			t.Fatalf("run = %v, want a non-zero exit", err)
		}
		last := lastLine(stderr.String())
		if !strings.Contains(last, "failed to start function public/default/broken") || !strings.Contains(last, "NoSuchClass") {
			t.Errorf("last stderr line %q", last)
		}
	})
}

func (e *env) details(name, className string) *pf.FunctionDetails {
	return &pf.FunctionDetails{
		Tenant: "public", Namespace: "default", Name: name, ClassName: className,
		Runtime: pf.FunctionDetails_PYTHON, AutoAck: true, Parallelism: 1,
		ProcessingGuarantees: pf.ProcessingGuarantees_ATLEAST_ONCE,
		Source: &pf.SourceSpec{
			InputSpecs:           map[string]*pf.ConsumerSpec{"persistent://public/default/" + name + "-in": {}},
			SubscriptionPosition: pf.SubscriptionPosition_EARLIEST, CleanupSubscription: true,
		},
		Sink:      &pf.SinkSpec{Topic: "persistent://public/default/" + name + "-out"},
		Resources: &pf.Resources{Cpu: 1, Ram: 1 << 30, Disk: 10 << 30},
	}
}

func inputOf(d *pf.FunctionDetails) string {
	for topic := range d.Source.InputSpecs {
		return topic
	}
	return ""
}

type instance struct {
	cmd         *exec.Cmd
	stderr      *syncBuffer
	control     pf.InstanceControlClient
	metricsAddr string
	logDir      string
	done        chan error
	stopped     bool
}

// command builds the worker's command line for the function file (from
// testdata) and details, as Pulsar's process runtime does.
func (e *env) command(t *testing.T, file string, d *pf.FunctionDetails, extra []string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	pkgDir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(pkgDir, file)
	if err := os.WriteFile(pkg, src, 0o644); err != nil {
		t.Fatal(err)
	}
	js, err := protojson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	ports := make([]int, 2)
	for i := range ports {
		if ports[i], err = freeport.Port(); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{e.mainPath, "--py", pkg,
		"--logging_directory", filepath.Join(pkgDir, "logs"), "--logging_file", d.Name + "-0",
		"--logging_config_file", "",
		"--instance_id", "0", "--function_id", "f-" + d.Name, "--function_version", "v-" + d.Name,
		"--function_details", "'" + string(js) + "'",
		"--pulsar_serviceurl", e.sa.ServiceURL(),
		"--use_tls", "false", "--tls_allow_insecure", "false", "--hostname_verification_enabled", "false",
		"--max_buffered_tuples", "1024", "--port", strconv.Itoa(ports[0]), "--metrics_port", strconv.Itoa(ports[1]),
		"--expected_healthcheck_interval", "0",
		"--secrets_provider", "secretsprovider.ClearTextSecretsProvider", "--cluster_name", "standalone",
		"--a_flag_from_a_newer_worker", "x"}
	args = append(args, extra...)
	cmd := exec.Command(e.python, args...)
	stderr := &syncBuffer{}
	cmd.Stdout = stderr
	cmd.Stderr = stderr
	return cmd, stderr
}

// start runs the instance and waits until its InstanceControl answers.
func (e *env) start(t *testing.T, file string, d *pf.FunctionDetails, extra []string) *instance {
	t.Helper()
	cmd, stderr := e.command(t, file, d, extra)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inst := &instance{cmd: cmd, stderr: stderr, done: make(chan error, 1)}
	for i, a := range cmd.Args {
		switch a {
		case "--port":
			conn, err := grpc.NewClient("127.0.0.1:"+cmd.Args[i+1], grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			inst.control = pf.NewInstanceControlClient(conn)
		case "--metrics_port":
			inst.metricsAddr = "127.0.0.1:" + cmd.Args[i+1]
		case "--logging_directory":
			inst.logDir = cmd.Args[i+1]
		}
	}
	go func() { inst.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if !inst.stopped {
			inst.stop(t)
		}
		if t.Failed() {
			t.Logf("instance output:\n%s", stderr.String())
		}
	})
	waitFor(t, 60*time.Second, "the instance's health check", func() error {
		select {
		case err := <-inst.done:
			inst.done <- err
			t.Fatalf("instance exited early (%v):\n%s", err, stderr.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		r, err := inst.control.HealthCheck(ctx, &emptypb.Empty{})
		if err != nil {
			return err
		}
		if !r.Success {
			return errors.New("health check not successful")
		}
		// Running means subscribed too.
		if !strings.Contains(stderr.String(), "is running") {
			return errors.New("not subscribed yet")
		}
		return nil
	})
	return inst
}

// stop sends SIGTERM and expects a clean exit with status 0.
func (inst *instance) stop(t *testing.T) {
	t.Helper()
	inst.stopped = true
	_ = inst.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-inst.done:
		if err != nil {
			t.Errorf("instance exit after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		_ = inst.cmd.Process.Kill()
		t.Errorf("instance did not exit within 15 s of SIGTERM")
	}
}

func (inst *instance) waitStatus(t *testing.T, ok func(*pf.FunctionStatus) bool) *pf.FunctionStatus {
	t.Helper()
	var last *pf.FunctionStatus
	waitFor(t, 30*time.Second, "the instance's status", func() error {
		st, err := inst.control.GetFunctionStatus(ctxT(t), &emptypb.Empty{})
		if err != nil {
			return err
		}
		last = st
		if !ok(st) {
			return fmt.Errorf("status %v", st)
		}
		return nil
	})
	return last
}

func (inst *instance) scrape(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + inst.metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("metrics: %d %v %q", resp.StatusCode, err, resp.Header.Get("Content-Type"))
	}
	return string(b)
}

func (inst *instance) rssKB(t *testing.T) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", inst.cmd.Process.Pid))
	if err != nil {
		return -1
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return -1
}

func (e *env) subscribe(t *testing.T, topic string) pulsar.Consumer {
	t.Helper()
	c, err := e.client.Subscribe(pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "test", Type: pulsar.Exclusive,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func (e *env) produce(t *testing.T, topic string, values ...string) {
	t.Helper()
	p, err := e.client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, v := range values {
		if _, err := p.Send(ctxT(t), &pulsar.ProducerMessage{Payload: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}
}

func receive(t *testing.T, c pulsar.Consumer) pulsar.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := c.Receive(ctx)
	if err != nil {
		t.Fatalf("receive from %s: %v", c.Subscription(), err)
	}
	_ = c.Ack(m)
	return m
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func waitFor(t *testing.T, limit time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// fakeState serves the worker's state API (the contract in
// magnetar_instance/state.py) from memory.
type fakeState struct {
	srv      *httptest.Server
	mu       sync.Mutex
	values   map[string][]byte
	counters map[string]int64
	auth     string
}

func newFakeState(t *testing.T) *fakeState {
	f := &fakeState{values: map[string][]byte{}, counters: map[string]int64{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/magnetar/v1/functions/{tenant}/{namespace}/{name}/{kind}/{key}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.auth = r.Header.Get("Authorization")
		k := r.PathValue("tenant") + "/" + r.PathValue("namespace") + "/" + r.PathValue("name") + "/" + r.PathValue("key")
		switch r.PathValue("kind") + " " + r.Method {
		case "state GET":
			v, ok := f.values[k]
			if !ok {
				http.NotFound(w, r)
				return
			}
			w.Write(v)
		case "state PUT":
			b, _ := io.ReadAll(r.Body)
			f.values[k] = b
			w.WriteHeader(http.StatusNoContent)
		case "state DELETE":
			delete(f.values, k)
			delete(f.counters, k)
			w.WriteHeader(http.StatusNoContent)
		case "counter POST":
			var body struct{ Delta int64 }
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			f.counters[k] += body.Delta
			json.NewEncoder(w).Encode(map[string]int64{"value": f.counters[k]})
		case "counter GET":
			json.NewEncoder(w).Encode(map[string]int64{"value": f.counters[k]})
		default:
			http.Error(w, "unexpected", http.StatusMethodNotAllowed)
		}
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// syncBuffer is a bytes.Buffer safe for the process's writers and the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestPythonUnitSuite runs the instance's own pytest suite (tests/).
func TestPythonUnitSuite(t *testing.T) {
	py := pythonOrSkip(t)
	if out, err := exec.Command(py, "-c", "import pytest, grpc, prometheus_client").CombinedOutput(); err != nil {
		if os.Getenv(requireEnv) == "1" {
			t.Fatalf("the test modules of requirements.txt are missing: %v: %s", err, out)
		}
		t.Skipf("the test modules of requirements.txt are missing: %s", lastLine(string(out)))
	}
	cmd := exec.Command(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("pytest:\n%s", out)
	if err != nil {
		t.Fatalf("pytest failed: %v", err)
	}
}
