package pf

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/magnetar-dev/magnetar/client/functions/internal/conf"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

func resolve(t *testing.T, js string) *conf.Instance {
	t.Helper()
	c, err := conf.ParseJSON([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	in, err := c.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestFunctionContextGetters(t *testing.T) {
	cfg := resolve(t, `{"pulsarServiceURL":"pulsar://h:6650","tenant":"t","nameSpace":"n","name":"f",
	 "instanceID":2,"funcID":"id","funcVersion":"v","port":1,"metricsPort":2,"clusterName":"c",
	 "expectedHealthCheckInterval":30,"sourceInputSpecs":{"b":"","a":""},"sinkSpecsTopic":"out",
	 "userConfig":"{\"k\":\"v\"}","secretsMap":"{\"pw\":\"x\"}"}`)
	st, err := newStateClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fc := newFunctionContext(cfg, st)
	for _, c := range []struct{ got, want any }{
		{fc.GetInstanceID(), 2}, {strings.Join(fc.GetInputTopics(), ","), "a,b"}, {fc.GetOutputTopic(), "out"},
		{fc.GetTenantAndNamespace(), "t/n"}, {fc.GetTenantAndNamespaceAndName(), "t/n/f"},
		{fc.GetFuncTenant(), "t"}, {fc.GetFuncNamespace(), "n"}, {fc.GetFuncName(), "f"},
		{fc.GetFuncID(), "id"}, {fc.GetFuncVersion(), "v"}, {fc.GetPort(), 1}, {fc.GetMetricsPort(), 2},
		{fc.GetClusterName(), "c"}, {fc.GetExpectedHealthCheckInterval(), int32(30)},
		{fc.GetExpectedHealthCheckIntervalAsDuration(), 30 * time.Second},
		{fc.GetMaxIdleTime(), int64(90 * time.Second)},
		{fc.GetUserConfValue("k"), "v"}, {fc.GetUserConfValue("absent"), nil}, {fc.GetUserConfMap()["k"], "v"},
		{fc.GetSecretValue("pw"), "x"}, {fc.GetCurrentRecord(), nil}, {fc.NewOutputMessage("x"), nil},
	} {
		if c.got != c.want {
			t.Errorf("got %v (%T), want %v (%T)", c.got, c.got, c.want, c.want)
		}
	}
	fc.RecordMetric("no instance", 1) // a no-op, not a panic
	fc.GetInputTopics()[0] = "changed"
	if fc.GetInputTopics()[0] != "a" {
		t.Error("GetInputTopics returned the shared slice")
	}
	if _, err := fc.GetState(context.Background(), "k"); !errors.Is(err, ErrStateNotConfigured) {
		t.Errorf("GetState without a state URL: %v", err)
	}
	var zero FunctionContext // as a function's own unit test may make one
	if zero.GetFuncName() != "" || zero.GetUserConfValue("k") != nil || zero.GetOutputTopic() != "" || zero.GetInputTopics() != nil {
		t.Error("a zero FunctionContext is not empty")
	}
	if err := zero.IncrCounter(context.Background(), "k", 1); !errors.Is(err, ErrStateNotConfigured) {
		t.Errorf("IncrCounter on a zero FunctionContext: %v", err)
	}
	ctx := NewContext(context.Background(), fc)
	if got, ok := FromContext(ctx); !ok || got != fc {
		t.Error("FromContext lost the FunctionContext")
	}
	if _, ok := FromContext(context.Background()); ok {
		t.Error("FromContext found a FunctionContext in an empty context")
	}
}

func TestStats(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := newStats(reg, metricLabels("t", "n", "f", 3, "c"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(1_700_000_000_000)
	s.received(now)
	s.received(now)
	s.latency(2 * time.Millisecond)
	s.latency(4 * time.Millisecond)
	s.processed()
	for i := range latestExceptions + 2 {
		s.userException(errors.New("user "+string(rune('a'+i))), now)
	}
	s.sysException(errors.New("sys"), now)
	s.recordUser("m", 2)
	s.recordUser("m", 3)

	st := s.status(3)
	if st.InstanceId != "3" || st.NumReceived != 2 || st.NumSuccessfullyProcessed != 1 || st.NumUserExceptions != latestExceptions+2 ||
		st.NumSystemExceptions != 1 || st.AverageLatency != 3 || st.LastInvocationTime != now.UnixMilli() {
		t.Errorf("status %v", st)
	}
	if len(st.LatestUserExceptions) != latestExceptions || st.LatestUserExceptions[0].ExceptionString != "user c" ||
		st.LatestUserExceptions[latestExceptions-1].ExceptionString != "user l" {
		t.Errorf("latest user exceptions %v: want the last %d", st.LatestUserExceptions, latestExceptions)
	}
	m := s.metrics()
	if m.ReceivedTotal != 2 || m.ReceivedTotal_1Min != 2 || m.UserMetrics["m_sum"] != 5 || m.UserMetrics["m_count"] != 2 {
		t.Errorf("metrics %v", m)
	}
	s.resetWindow()
	if m := s.metrics(); m.ReceivedTotal != 2 || m.ReceivedTotal_1Min != 0 || m.AvgProcessLatency_1Min != 0 {
		t.Errorf("after reset %v", m)
	}
	var d dto.Metric
	if s.prom.received.Write(&d); d.GetCounter().GetValue() != 2 {
		t.Errorf("%s = %v", metricReceived, d.GetCounter().GetValue())
	}
	if s.prom.received1m.Write(&d); d.GetGauge().GetValue() != 0 {
		t.Errorf("%s = %v after reset", metricReceived1m, d.GetGauge().GetValue())
	}
	names := map[string]bool{}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		names[mf.GetName()] = true
		for _, l := range mf.GetMetric()[0].GetLabel() {
			if l.GetName() == "namespace" && l.GetValue() != "t/n" || l.GetName() == "fqfn" && l.GetValue() != "t/n/f" {
				t.Errorf("%s label %s=%s", mf.GetName(), l.GetName(), l.GetValue())
			}
		}
	}
	for _, n := range []string{metricReceived, metricProcessed, metricUserExceptions, metricSysExceptions, metricLatency, metricLastInvocation, metricUser} {
		if !names[n] {
			t.Errorf("registry lacks %s", n)
		}
	}
}

func TestOptionsFromConfig(t *testing.T) {
	cfg := resolve(t, `{"pulsarServiceURL":"pulsar://h:6650","tenant":"t","nameSpace":"n","name":"f","instanceID":1,
	 "sourceInputSpecs":{"p.*":"{\"isRegexPattern\":true,\"receiverQueueSize\":{\"value\":9}}"},"sinkSpecsTopic":"out",
	 "subscriptionType":2,"subscriptionPosition":1,"maxMessageRetries":2,"deadLetterTopic":"dlq",
	 "functionDetails":"{\"source\":{\"negativeAckRedeliveryDelayMs\":\"150\"},\"sink\":{\"producerSpec\":{\"compressionType\":\"NONE\",\"maxPendingMessages\":7,\"batchingSpec\":{\"enabled\":false,\"batchBuilder\":\"KEY_BASED\"}}}}"}`)
	i := &instance{cfg: cfg}
	co := i.consumerOptions(cfg.Inputs[0])
	if co.TopicsPattern != "p.*" || co.Topic != "" || co.Type != pulsar.KeyShared || co.SubscriptionInitialPosition != pulsar.SubscriptionPositionEarliest ||
		co.ReceiverQueueSize != 9 || co.NackRedeliveryDelay != 150*time.Millisecond || co.SubscriptionName != "t/n/f" {
		t.Errorf("consumer options %+v", co)
	}
	if co.DLQ == nil || co.DLQ.MaxDeliveries != 3 || co.DLQ.DeadLetterTopic != "dlq" {
		t.Errorf("DLQ %+v: want 1+2 deliveries to dlq", co.DLQ)
	}
	if co.Properties["application"] != "pulsar-function" || co.Properties["id"] != "t/n/f" || co.Properties["instance_id"] != "1" {
		t.Errorf("properties %v", co.Properties)
	}
	po := i.producerOptions("out")
	if po.CompressionType != pulsar.NoCompression || po.MaxPendingMessages != 7 || !po.DisableBatching ||
		po.BatcherBuilderType != pulsar.KeyBasedBatchBuilder || po.SendTimeout >= 0 {
		t.Errorf("producer options %+v", po)
	}

	plain := &instance{cfg: resolve(t, `{"pulsarServiceURL":"pulsar://h:6650","tenant":"t","nameSpace":"n","name":"f","sourceSpecsTopic":"in"}`)}
	if po := plain.producerOptions("out"); po.CompressionType != pulsar.LZ4 || po.BatchingMaxPublishDelay != defaultBatchingDelay || po.DisableBatching {
		t.Errorf("default producer options %+v", po)
	}
	if co := plain.consumerOptions(plain.cfg.Inputs[0]); co.Type != pulsar.Shared || co.DLQ != nil || co.Topic != "in" {
		t.Errorf("default consumer options %+v", co)
	}
}

type fakeID struct {
	pulsar.MessageID
	ledger, entry int64
	batch         int32
}

func (f fakeID) LedgerID() int64 { return f.ledger }
func (f fakeID) EntryID() int64  { return f.entry }
func (f fakeID) BatchIdx() int32 { return f.batch }

func TestSequenceID(t *testing.T) {
	ids := []fakeID{{ledger: 5, entry: 0, batch: -1}, {ledger: 5, entry: 0, batch: 1}, {ledger: 5, entry: 1, batch: 0}, {ledger: 6, entry: 0, batch: 0}, {ledger: 1<<31 - 1, entry: 1<<20 - 1, batch: 1<<12 - 1}}
	var last int64 = -1
	for _, id := range ids {
		seq, ok := sequenceID(id)
		if !ok || seq <= last {
			t.Fatalf("sequenceID(%+v) = %d, %v; want > %d", id, seq, ok, last)
		}
		last = seq
	}
	for _, id := range []fakeID{{ledger: 1 << 31}, {entry: 1 << 20}, {batch: 1 << 12}, {ledger: -1}} {
		if _, ok := sequenceID(id); ok {
			t.Errorf("sequenceID(%+v) fits", id)
		}
	}
}

// TestRunStopsEverything runs an instance in-process against a standalone
// and checks that cancelling it stops every goroutine it started.
func TestRunStopsEverything(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a standalone")
	}
	s := standalonetest.Start(t, standalonetest.Config(t.TempDir(), standalonetest.FreeAddr(t)))
	client := standalonetest.NewClient(t, s.ServiceURL())
	in, out := "persistent://public/default/run-in", "persistent://public/default/run-out"
	outC, err := client.Subscribe(pulsar.ConsumerOptions{Topic: out, SubscriptionName: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer outC.Close()
	prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: in})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	// A first message has the test's own client start all its goroutines.
	if _, err := prod.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("w")}); err != nil {
		t.Fatal(err)
	}
	before := goroutines()

	cfg := resolve(t, `{"pulsarServiceURL":"`+s.ServiceURL()+`","tenant":"public","nameSpace":"default","name":"run",
	 "sourceInputSpecs":{"`+in+`":""},"sinkSpecsTopic":"`+out+`","subscriptionPosition":1,"logTopic":"persistent://public/default/run-log"}`)
	h, _ := newHandler(func(in []byte) ([]byte, error) { return append(in, '!'), nil })
	i, err := newInstance(cfg, h, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- i.run(ctx) }()
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	defer rcancel()
	for _, want := range []string{"w!", "a!"} {
		m, err := outC.Receive(rctx)
		if err != nil || string(m.Payload()) != want {
			t.Fatalf("received %v, %v; want %s", m, err, want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if p := i.fc.NewOutputMessage("persistent://public/default/late"); p != nil {
		t.Error("NewOutputMessage after the instance stopped returned a producer")
	}
	// What the instance started is gone; the standalone in this process
	// keeps goroutines of its own for the topics the instance used.
	var leaked []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		leaked = leaked[:0]
		for id, stack := range goroutines() {
			if _, old := before[id]; !old && !strings.Contains(stack, "magnetar/dataplane/") {
				leaked = append(leaked, stack)
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(leaked) > 0 {
		t.Fatalf("goroutines left after run returned:\n%s", strings.Join(leaked, "\n\n"))
	}
}

// goroutines returns the stacks of the running goroutines by id, except
// the caller's.
func goroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	m := map[string]string{}
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i == 0 { // the caller
			continue
		}
		if f := strings.Fields(g); len(f) > 1 && f[0] == "goroutine" {
			m[f[1]] = g
		}
	}
	return m
}

func TestHealthCheckExpiry(t *testing.T) {
	cfg := resolve(t, `{"pulsarServiceURL":"pulsar://h:6650","tenant":"t","nameSpace":"n","name":"f","sourceSpecsTopic":"in","expectedHealthCheckInterval":1}`)
	h, _ := newHandler(func() {})
	i, err := newInstance(cfg, h, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	i.lastHealth.Store(time.Now().Add(-time.Hour).UnixNano())
	err = i.loop(context.Background())
	if !errors.Is(err, errHealthCheck) {
		t.Fatalf("loop = %v, want errHealthCheck", err)
	}

	// HealthCheck keeps it alive; cancelling ends it cleanly.
	(&controlServer{i: i}).HealthCheck(context.Background(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()
	if err := i.loop(ctx); err != nil {
		t.Fatalf("loop with a fresh health check = %v", err)
	}
}
