package pf_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
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
	"google.golang.org/protobuf/types/known/emptypb"

	pb "github.com/magnetar-dev/magnetar/api/pulsarfunctions"
	"github.com/magnetar-dev/magnetar/dataplane/standalone"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
	"github.com/magnetar-dev/magnetar/internal/freeport"
)

// TestOnStandalone builds function binaries, runs them as a worker would
// (-instance-conf '<json>', a child process) against an in-process
// standalone, and checks what they publish and report.
func TestOnStandalone(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries and starts a standalone")
	}
	bins := buildBinaries(t, "./examples/exclamation", "./examples/wordcount", "./testdata/misbehave")
	s := standalonetest.Start(t, standalonetest.Config(t.TempDir(), standalonetest.FreeAddr(t)))
	client := standalonetest.NewClient(t, s.ServiceURL())

	t.Run("Exclamation", func(t *testing.T) { testExclamation(t, s, client, bins["exclamation"]) })
	t.Run("FailuresDeadLetterLogTopic", func(t *testing.T) { testFailures(t, s, client, bins["misbehave"]) })
	t.Run("StateThroughWorkerAPI", func(t *testing.T) { testState(t, s, client, bins["wordcount"]) })
	t.Run("EffectivelyOnce", func(t *testing.T) { testEffectivelyOnce(t, s, client, bins["exclamation"]) })
	t.Run("HealthCheckTimeout", func(t *testing.T) { testHealthCheckTimeout(t, s, bins["exclamation"]) })
	t.Run("ThroughTheWorker", func(t *testing.T) { testThroughWorker(t, s, client, bins["wordcount"]) })
}

// TestStartErrors checks that a bad start is one line on stderr and a
// non-zero exit, without a broker.
func TestStartErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := buildBinaries(t, "./examples/exclamation")["exclamation"]
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenConf := fmt.Sprintf(`{"pulsarServiceURL":"pulsar://127.0.0.1:1","tenant":"t","nameSpace":"n","name":"f","sourceSpecsTopic":"in","port":%d}`,
		taken.Addr().(*net.TCPAddr).Port)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no configuration", nil, "pf: conf: no instance configuration"},
		{"bad JSON", []string{"-instance-conf", "{bad"}, "pf: conf: -instance-conf is not valid JSON"},
		{"missing fields", []string{"-instance-conf", `{"sourceSpecsTopic":"in"}`}, "pf: conf: missing pulsarServiceURL, tenant, nameSpace, name"},
		{"missing file", []string{"-instance-conf-path", "/nonexistent/conf.yaml"}, "pf: conf: open /nonexistent/conf.yaml"},
		{"port in use", []string{"-instance-conf", takenConf}, "pf: InstanceControl port: listen tcp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			cmd := exec.Command(bin, tc.args...)
			cmd.Stderr = &stderr
			err := cmd.Run()
			if code := cmd.ProcessState.ExitCode(); err == nil || code != 1 {
				t.Fatalf("exit %d (%v), want 1", code, err)
			}
			out := strings.TrimSuffix(stderr.String(), "\n")
			if strings.Contains(out, "\n") || !strings.HasPrefix(out, tc.want) {
				t.Fatalf("stderr %q, want one line starting %q", out, tc.want)
			}
		})
	}
}

func testExclamation(t *testing.T, s *standalone.Standalone, client pulsar.Client, bin string) {
	in, out := topic(t, "in"), topic(t, "out")
	outC := subscribe(t, client, out)
	cfg := instanceConf(t, s, "excl", in, out)
	cfg["expectedHealthCheckInterval"] = 1 // the test's checks below keep it alive
	p := startInstance(t, bin, cfg)
	ctl := p.control(t)

	// Play the worker's health checks for the whole test.
	stopChecks := make(chan struct{})
	checksDone := make(chan struct{})
	go func() {
		defer close(checksDone)
		for {
			select {
			case <-stopChecks:
				return
			case <-time.After(300 * time.Millisecond):
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				ctl.HealthCheck(ctx, &emptypb.Empty{})
				cancel()
			}
		}
	}()
	defer func() { close(stopChecks); <-checksDone }()

	send(t, client, in, "hello")
	msg := receive(t, outC)
	if string(msg.Payload()) != "hello!" {
		t.Fatalf("output %q, want hello!", msg.Payload())
	}
	if got := msg.Properties()["__pfn_input_topic__"]; got != in {
		t.Errorf("output's __pfn_input_topic__ = %q, want %q", got, in)
	}
	if msg.Properties()["__pfn_input_msg_id__"] == "" {
		t.Error("output lacks __pfn_input_msg_id__")
	}

	st := waitStatus(t, ctl, func(st *pb.FunctionStatus) bool { return st.NumSuccessfullyProcessed == 1 })
	if !st.Running || st.NumReceived != 1 || st.NumUserExceptions != 0 || st.NumSystemExceptions != 0 || st.InstanceId != "0" || st.LastInvocationTime == 0 {
		t.Errorf("status %v", st)
	}
	m, err := ctl.GetMetrics(context.Background(), &emptypb.Empty{})
	if err != nil || m.ReceivedTotal != 1 || m.ProcessedSuccessfullyTotal != 1 || m.ReceivedTotal_1Min != 1 {
		t.Errorf("metrics %v, %v", m, err)
	}
	if _, err := ctl.ResetMetrics(context.Background(), &emptypb.Empty{}); err != nil {
		t.Error(err)
	}
	if m, _ := ctl.GetMetrics(context.Background(), &emptypb.Empty{}); m.ReceivedTotal != 1 || m.ReceivedTotal_1Min != 0 {
		t.Errorf("after ResetMetrics: %v", m)
	}

	body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", p.metricsPort))
	labels := `cluster="standalone",fqfn="public/default/excl",instance_id="0",name="excl",namespace="public/default",tenant="public"`
	for _, want := range []string{
		"pulsar_function_received_total{" + labels + "} 1",
		"pulsar_function_processed_successfully_total{" + labels + "} 1",
		"pulsar_function_user_exceptions_total{" + labels + "} 0",
		"pulsar_function_system_exceptions_total{" + labels + "} 0",
		"pulsar_function_process_latency_ms_count{" + labels + "} 1",
		"pulsar_function_process_latency_ms{" + labels + `,quantile="0.5"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}

	// Idle, after one message; several health-check intervals pass.
	time.Sleep(4 * time.Second)
	if !p.running() {
		t.Fatalf("instance exited although health checks came: %s", p.stderr.String())
	}
	t.Logf("idle memory of the exclamation instance (race detector %v): %s", raceEnabled, p.memory(t))

	if code := p.terminate(t); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0; stderr:\n%s", code, p.stderr.String())
	}
	if strings.Contains(p.stderr.String(), "pf: ") {
		t.Errorf("stderr has an error line: %s", p.stderr.String())
	}
}

func testFailures(t *testing.T, s *standalone.Standalone, client pulsar.Client, bin string) {
	in, out, side, dlq, logs := topic(t, "in"), topic(t, "out"), topic(t, "side"), topic(t, "dlq"), topic(t, "log")
	outC, sideC, dlqC, logC := subscribe(t, client, out), subscribe(t, client, side), subscribe(t, client, dlq), subscribe(t, client, logs)
	cfg := instanceConf(t, s, "misbehave", in, out)
	cfg["userConfig"] = mustJSON(t, map[string]string{"suffix": "+", "side": side})
	cfg["logTopic"] = logs
	cfg["maxMessageRetries"] = 1
	cfg["deadLetterTopic"] = dlq
	// The negative-ack delay travels in functionDetails only.
	cfg["functionDetails"] = mustJSON(t, map[string]any{
		"tenant": "public", "namespace": "default", "name": "misbehave",
		"source": map[string]any{"negativeAckRedeliveryDelayMs": "200"},
	})
	p := startInstance(t, bin, cfg)
	ctl := p.control(t)

	for _, m := range []string{"ok", "fail-1", "panic-1", "side-1"} {
		send(t, client, in, m)
	}
	if got := string(receive(t, outC).Payload()); got != "ok+" {
		t.Errorf("output %q, want ok+", got)
	}
	if got := string(receive(t, sideC).Payload()); got != "side-1" {
		t.Errorf("side output %q, want side-1", got)
	}
	dead := map[string]bool{}
	for range 2 {
		dead[string(receive(t, dlqC).Payload())] = true
	}
	if !dead["fail-1"] || !dead["panic-1"] {
		t.Errorf("dead-letter topic got %v, want fail-1 and panic-1", dead)
	}
	// Each failing message was tried 1+maxMessageRetries times.
	st := waitStatus(t, ctl, func(st *pb.FunctionStatus) bool { return st.NumUserExceptions == 4 && st.NumSuccessfullyProcessed == 2 })
	if st.NumReceived != 6 || len(st.LatestUserExceptions) != 4 {
		t.Errorf("status %v", st)
	}
	var sawRefusal, sawPanic bool
	for _, e := range st.LatestUserExceptions {
		sawRefusal = sawRefusal || e.ExceptionString == "refusing fail-1"
		sawPanic = sawPanic || e.ExceptionString == "function panicked: asked to panic"
	}
	if !sawRefusal || !sawPanic {
		t.Errorf("latest user exceptions %v", st.LatestUserExceptions)
	}
	if m, err := ctl.GetMetrics(context.Background(), &emptypb.Empty{}); err != nil || m.UserMetrics["len_count"] != 1 || m.UserMetrics["len_sum"] != 2 {
		t.Errorf("user metrics %v, %v", m.GetUserMetrics(), err)
	}
	body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", p.metricsPort))
	if !strings.Contains(body, `pulsar_function_user_metric__count{cluster="standalone",fqfn="public/default/misbehave",instance_id="0",metric="len",name="misbehave",namespace="public/default",tenant="public"} 1`) {
		t.Errorf("metrics lack the user metric:\n%s", body)
	}

	// The function's log lines reach the log topic.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if strings.Contains(string(receive(t, logC).Payload()), "[info] got ok") {
			break
		}
	}
	if code := p.terminate(t); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
}

func testState(t *testing.T, s *standalone.Standalone, client pulsar.Client, bin string) {
	worker := newStateWorker(t, "secret-token")
	in, out := topic(t, "in"), topic(t, "out")
	outC := subscribe(t, client, out)
	cfg := instanceConf(t, s, "wordcount", in, out)
	cfg["stateStorageServiceUrl"] = worker.URL
	cfg["clientAuthenticationPlugin"] = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
	cfg["clientAuthenticationParameters"] = "token:secret-token"
	cfg["userConfig"] = mustJSON(t, map[string]any{"lowercase": true})
	p := startInstance(t, bin, cfg)

	send(t, client, in, "A b a")
	if got := string(receive(t, outC).Payload()); got != "a=1 b=1 a=2" {
		t.Fatalf("output %q, want a=1 b=1 a=2", got)
	}
	send(t, client, in, "b")
	if got := string(receive(t, outC).Payload()); got != "b=2" {
		t.Fatalf("output %q, want b=2", got)
	}
	if code := p.terminate(t); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
}

func testEffectivelyOnce(t *testing.T, s *standalone.Standalone, client pulsar.Client, bin string) {
	enableDeduplication(t, s)
	in, out := topic(t, "in"), topic(t, "out")
	outC := subscribe(t, client, out)

	// Three inputs in one batch: one entry, three batch indexes.
	prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: in, BatchingMaxPublishDelay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var wg sync.WaitGroup
	for _, m := range []string{"x", "y", "z"} {
		wg.Add(1)
		prod.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(m)}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			defer wg.Done()
			if err != nil {
				t.Error(err)
			}
		})
	}
	if err := prod.FlushWithCtx(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	run := func(subscription string) {
		cfg := instanceConf(t, s, "eo", in, out)
		cfg["processingGuarantees"] = 2
		cfg["subscriptionType"] = 1
		cfg["subscriptionName"] = subscription
		p := startInstance(t, bin, cfg)
		waitStatus(t, p.control(t), func(st *pb.FunctionStatus) bool { return st.NumSuccessfullyProcessed == 3 })
		if code := p.terminate(t); code != 0 {
			t.Fatalf("exit %d, want 0", code)
		}
	}
	run("first")
	got := map[string]bool{}
	for range 3 {
		m := receive(t, outC)
		got[string(m.Payload())] = true
		if want := "public/default/eo-" + in + "-partition-0"; m.ProducerName() != want && m.ProducerName() != "public/default/eo-"+in {
			t.Errorf("output producer %q, want one named for the function and the input", m.ProducerName())
		}
	}
	if !got["x!"] || !got["y!"] || !got["z!"] {
		t.Fatalf("outputs %v, want x! y! z!", got)
	}
	// A second run over the same inputs (a fresh subscription from the
	// earliest position) publishes the same sequence ids: the broker drops
	// them all.
	run("second")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if m, err := outC.Receive(ctx); err == nil {
		t.Fatalf("the replay published %q again", m.Payload())
	}
}

func testHealthCheckTimeout(t *testing.T, s *standalone.Standalone, bin string) {
	cfg := instanceConf(t, s, "unwatched", topic(t, "in"), topic(t, "out"))
	cfg["expectedHealthCheckInterval"] = 1
	p := startInstance(t, bin, cfg)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatal("instance still running a minute without health checks")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(p.stderr.String(), "pf: no health check from the worker") {
		t.Fatalf("exit %d, stderr:\n%s", code, p.stderr.String())
	}
}

// testThroughWorker deploys wordcount with the standalone's own function
// worker, as `pulsar-admin functions create --go` does, so the worker
// writes the instance configuration, supervises the process, serves its
// state and reads its status over InstanceControl.
func testThroughWorker(t *testing.T, s *standalone.Standalone, client pulsar.Client, bin string) {
	if s.FunctionsWorker() == nil {
		t.Skip("the standalone runs no function worker")
	}
	in, out := topic(t, "in"), topic(t, "out")
	outC := subscribe(t, client, out)
	pkg, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	base := s.WebServiceURL() + "/admin/v3/functions/public/default/wc"
	fnConfig := mustJSON(t, map[string]any{
		"tenant": "public", "namespace": "default", "name": "wc", "runtime": "GO",
		"inputs": []string{in}, "output": out, "userConfig": map[string]any{"lowercase": true},
	})
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	mw.WriteField("functionConfig", fnConfig)
	fw, _ := mw.CreateFormFile("data", "wordcount")
	fw.Write(pkg)
	mw.Close()
	if code, b := request(t, http.MethodPost, base, &body, mw.FormDataContentType()); code != http.StatusNoContent {
		t.Fatalf("create: %d %s", code, b)
	}
	t.Cleanup(func() { request(t, http.MethodDelete, base, nil, "") })

	type status struct {
		NumRunning int `json:"numRunning"`
		Instances  []struct {
			Status struct {
				Running                  bool   `json:"running"`
				Error                    string `json:"error"`
				NumReceived              int64  `json:"numReceived"`
				NumSuccessfullyProcessed int64  `json:"numSuccessfullyProcessed"`
			} `json:"status"`
		} `json:"instances"`
	}
	var st status
	getStatus := func() bool {
		code, b := request(t, http.MethodGet, base+"/status", nil, "")
		return code == http.StatusOK && json.Unmarshal(b, &st) == nil && st.NumRunning == 1 && len(st.Instances) == 1
	}
	eventually(t, 60*time.Second, getStatus, "the worker to run the function")
	// The instance subscribes from the latest position: produce until the
	// first output shows it is there.
	var first pulsar.Message
	eventually(t, 60*time.Second, func() bool {
		send(t, client, in, "A b a")
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		m, err := outC.Receive(ctx)
		if err == nil {
			outC.Ack(m)
			first = m
		}
		return err == nil
	}, "the first output")
	if got := string(first.Payload()); !strings.HasPrefix(got, "a=") || !strings.Contains(got, " b=") {
		t.Fatalf("output %q, want a=N b=N a=N+1", got)
	}
	eventually(t, 30*time.Second, func() bool {
		return getStatus() && st.Instances[0].Status.NumReceived >= 1 && st.Instances[0].Status.NumSuccessfullyProcessed >= 1
	}, "the status to count the message")
	// The counters are in the worker's state store.
	code, b := request(t, http.MethodGet, s.WebServiceURL()+"/magnetar/v1/functions/public/default/wc/counter/a", nil, "")
	var v struct{ Value int64 }
	if code != http.StatusOK || json.Unmarshal(b, &v) != nil || v.Value < 2 {
		t.Fatalf("counter a: %d %s", code, b)
	}
}

func request(t *testing.T, method, url string, body io.Reader, ctype string) (int, []byte) {
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

// --- helpers ---

func buildBinaries(t *testing.T, pkgs ...string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	bins := map[string]string{}
	for _, pkg := range pkgs {
		out := filepath.Join(dir, filepath.Base(pkg))
		args := []string{"build", "-o", out}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, pkg)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
		bins[filepath.Base(pkg)] = out
	}
	return bins
}

var topicSeq sync.Map

// topic returns a fresh topic name for the running test.
func topic(t *testing.T, role string) string {
	n, _ := topicSeq.LoadOrStore(t.Name()+role, new(int))
	*n.(*int)++
	name := strings.NewReplacer("/", "-", "_", "-").Replace(strings.ToLower(t.Name()))
	return fmt.Sprintf("persistent://public/default/%s-%s-%d-%d", name, role, *n.(*int), time.Now().UnixNano())
}

// instanceConf is the -instance-conf a worker would write for a function
// reading in and writing out, from the earliest position.
func instanceConf(t *testing.T, s *standalone.Standalone, name, in, out string) map[string]any {
	return map[string]any{
		"pulsarServiceURL": s.ServiceURL(), "pulsarWebServiceUrl": s.WebServiceURL(),
		"instanceID": 0, "funcID": "fid-" + name, "funcVersion": "fver", "maxBufTuples": 1024,
		"port": freePort(t), "metricsPort": freePort(t), "clusterName": "standalone", "killAfterIdleMs": 0,
		"expectedHealthCheckInterval": 0,
		"tenant":                      "public", "nameSpace": "default", "name": name, "className": "",
		"processingGuarantees": 0, "secretsMap": "", "userConfig": "", "runtime": 3, "autoAck": true, "parallelism": 1,
		"subscriptionType": 0, "timeoutMs": 0, "subscriptionName": "", "cleanupSubscription": true,
		"subscriptionPosition": 1, "sourceInputSpecs": map[string]string{in: "{}"}, "sinkSpecsTopic": out,
		"cpu": 1.0, "ram": 268435456, "disk": 10737418240, "maxMessageRetries": 0, "deadLetterTopic": "",
	}
}

func freePort(t *testing.T) int {
	p, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type instanceProc struct {
	cmd         *exec.Cmd
	stderr      *syncBuffer
	done        chan struct{}
	port        int
	metricsPort int
}

func startInstance(t *testing.T, bin string, cfg map[string]any) *instanceProc {
	t.Helper()
	p := &instanceProc{stderr: &syncBuffer{}, done: make(chan struct{}), port: cfg["port"].(int), metricsPort: cfg["metricsPort"].(int)}
	p.cmd = exec.Command(bin, "-instance-conf", mustJSON(t, cfg))
	p.cmd.Stdout = io.Discard
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if p.running() {
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("instance stderr:\n%s", p.stderr.String())
		}
	})
	// Ready when it reports its start on stderr.
	eventually(t, 60*time.Second, func() bool {
		if !p.running() {
			t.Fatalf("instance exited at start (%d):\n%s", p.cmd.ProcessState.ExitCode(), p.stderr.String())
		}
		return strings.Contains(p.stderr.String(), `msg="instance started"`)
	}, "the instance to start")
	return p
}

func (p *instanceProc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *instanceProc) control(t *testing.T) pb.InstanceControlClient {
	conn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(p.port), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewInstanceControlClient(conn)
}

// terminate sends SIGTERM, as the worker stops an instance, and returns the
// exit code.
func (p *instanceProc) terminate(t *testing.T) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("instance still running 30 s after SIGTERM")
	}
	return p.cmd.ProcessState.ExitCode()
}

// memory reports the resident set size of the instance process, and how
// much of it is anonymous memory (heap, stacks) and file pages (the
// binary's text, shared).
func (p *instanceProc) memory(t *testing.T) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && (f[0] == "VmRSS:" || f[0] == "RssAnon:" || f[0] == "RssFile:") {
			parts = append(parts, f[0]+" "+f[1]+" KiB")
		}
	}
	return strings.Join(parts, ", ")
}

func waitStatus(t *testing.T, ctl pb.InstanceControlClient, ok func(*pb.FunctionStatus) bool) *pb.FunctionStatus {
	t.Helper()
	var st *pb.FunctionStatus
	eventually(t, 60*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		if st, err = ctl.GetFunctionStatus(ctx, &emptypb.Empty{}); err != nil {
			return false
		}
		return ok(st)
	}, "the function status")
	return st
}

func subscribe(t *testing.T, client pulsar.Client, topic string) pulsar.Consumer {
	t.Helper()
	c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "test", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func send(t *testing.T, client pulsar.Client, topic, payload string) {
	t.Helper()
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte(payload)}); err != nil {
		t.Fatal(err)
	}
}

func receive(t *testing.T, c pulsar.Consumer) pulsar.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, err := c.Receive(ctx)
	if err != nil {
		t.Fatalf("receive from %s: %v", c.Subscription(), err)
	}
	c.Ack(m)
	return m
}

func eventually(t *testing.T, timeout time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return string(b)
}

func enableDeduplication(t *testing.T, s *standalone.Standalone) {
	t.Helper()
	resp, err := http.Post(s.WebServiceURL()+"/admin/v2/namespaces/public/default/deduplication", "application/json", strings.NewReader("true"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("enable deduplication: %s", resp.Status)
	}
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// newStateWorker is a fake of the worker's state API (counters only, which
// wordcount uses) that requires the bearer token.
func newStateWorker(t *testing.T, token string) *httptest.Server {
	var mu sync.Mutex
	counts := map[string]int64{}
	const prefix = "/magnetar/v1/functions/public/default/wordcount/counter/"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"reason":"missing token"}`)
			return
		}
		key, ok := strings.CutPrefix(r.URL.Path, prefix)
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"reason":"no such function"}`)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if r.Method == http.MethodPost {
			var body struct{ Delta int64 }
			json.NewDecoder(r.Body).Decode(&body)
			counts[key] += body.Delta
		}
		json.NewEncoder(w).Encode(map[string]int64{"value": counts[key]})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// syncBuffer is a bytes.Buffer safe for the child's writes and the test's
// reads.
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
