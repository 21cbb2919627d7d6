package conf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/magnetar-dev/magnetar/api/pulsarfunctions"
)

// workerJSON is an -instance-conf as a worker writes it: every key of
// Pulsar's GoInstanceConfig, functionDetails included.
const workerJSON = `{
 "pulsarServiceURL":"pulsar://127.0.0.1:6650","stateStorageServiceUrl":"http://127.0.0.1:8080",
 "pulsarWebServiceUrl":"http://127.0.0.1:8080","instanceID":1,"funcID":"f-uuid","funcVersion":"v-uuid",
 "maxBufTuples":1024,"port":40001,"metricsPort":40002,"clusterName":"standalone","killAfterIdleMs":0,
 "expectedHealthCheckInterval":30,"tenant":"public","nameSpace":"default","name":"excl",
 "className":"","logTopic":"persistent://public/default/excl-log","processingGuarantees":0,
 "secretsMap":"{\"db\":\"s3cret\"}","userConfig":"{\"suffix\":\"!\",\"n\":3}","runtime":3,"autoAck":true,
 "parallelism":2,"clientAuthenticationPlugin":"","clientAuthenticationParameters":"",
 "tlsTrustCertsFilePath":"","tlsHostnameVerificationEnable":false,"tlsAllowInsecureConnection":false,
 "subscriptionType":0,"timeoutMs":0,"subscriptionName":"","cleanupSubscription":true,"subscriptionPosition":1,
 "sourceInputSpecs":{"persistent://public/default/in":"{\"receiverQueueSize\":{\"value\":50}}","persistent://public/default/in2":""},
 "sourceSpecsTopic":"","sinkSpecsTopic":"persistent://public/default/out","cpu":1.0,"ram":268435456,"disk":10737418240,
 "maxMessageRetries":3,"deadLetterTopic":"persistent://public/default/dlq",
 "functionDetails":"{\"tenant\":\"public\",\"namespace\":\"default\",\"name\":\"excl\",\"runtime\":\"GO\",\"autoAck\":true,\"parallelism\":2,\"source\":{\"inputSpecs\":{\"persistent://public/default/in\":{}},\"cleanupSubscription\":true,\"subscriptionPosition\":\"EARLIEST\",\"negativeAckRedeliveryDelayMs\":\"250\"},\"sink\":{\"topic\":\"persistent://public/default/out\",\"producerSpec\":{\"compressionType\":\"ZSTD\",\"batchingSpec\":{\"enabled\":true,\"batchingMaxPublishDelayMs\":5}}},\"resources\":{\"cpu\":1.0,\"ram\":\"268435456\",\"disk\":\"10737418240\"},\"retryDetails\":{\"maxMessageRetries\":3,\"deadLetterTopic\":\"persistent://public/default/dlq\"},\"componentType\":\"FUNCTION\",\"someFutureField\":1}",
 "someFutureKey":"ignored"
}`

func TestResolveWorkerJSON(t *testing.T) {
	c, err := ParseJSON([]byte(workerJSON))
	if err != nil {
		t.Fatal(err)
	}
	in, err := c.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	d := in.Details
	if in.FQFN() != "public/default/excl" || in.SubscriptionName() != "public/default/excl" {
		t.Errorf("FQFN %q, subscription %q", in.FQFN(), in.SubscriptionName())
	}
	if in.InstanceID != 1 || in.Port != 40001 || in.MetricsPort != 40002 || in.FuncID != "f-uuid" || in.ClusterName != "standalone" {
		t.Errorf("identity fields: %+v", in.Conf)
	}
	if in.HealthCheckInterval() != 30*time.Second || in.KillAfterIdle() != 0 {
		t.Errorf("health %s, idle %s", in.HealthCheckInterval(), in.KillAfterIdle())
	}
	if len(in.Inputs) != 2 || in.Inputs[0].Topic != "persistent://public/default/in" || in.Inputs[1].Topic != "persistent://public/default/in2" {
		t.Fatalf("inputs %+v", in.Inputs)
	}
	if q := in.Inputs[0].Spec.GetReceiverQueueSize().GetValue(); q != 50 {
		t.Errorf("receiver queue size %d, want 50 (flat sourceInputSpecs win)", q)
	}
	if d.Sink.Topic != "persistent://public/default/out" || d.LogTopic != "persistent://public/default/excl-log" {
		t.Errorf("sink %q, log topic %q", d.Sink.Topic, d.LogTopic)
	}
	if d.Sink.ProducerSpec.GetCompressionType() != pb.CompressionType_ZSTD || d.Sink.ProducerSpec.GetBatchingSpec().GetBatchingMaxPublishDelayMs() != 5 {
		t.Errorf("producer spec from functionDetails lost: %v", d.Sink.ProducerSpec)
	}
	if d.Source.SubscriptionPosition != pb.SubscriptionPosition_EARLIEST || d.Source.NegativeAckRedeliveryDelayMs != 250 || !d.Source.CleanupSubscription {
		t.Errorf("source %v", d.Source)
	}
	if r := d.RetryDetails; r.GetMaxMessageRetries() != 3 || r.GetDeadLetterTopic() != "persistent://public/default/dlq" {
		t.Errorf("retry details %v", r)
	}
	if in.UserConfig["suffix"] != "!" || in.UserConfig["n"] != float64(3) || in.Secrets["db"] != "s3cret" {
		t.Errorf("user config %v, secrets %v", in.UserConfig, in.Secrets)
	}
	if d.Resources.GetRam() != 268435456 || d.Runtime != pb.FunctionDetails_GO || d.Parallelism != 2 {
		t.Errorf("resources %v runtime %v parallelism %d", d.Resources, d.Runtime, d.Parallelism)
	}
}

func TestResolveFlatOnly(t *testing.T) {
	// What Pulsar's own Go instance reads: the flat fields, one input topic.
	c, err := ParseJSON([]byte(`'{"pulsarServiceURL":"pulsar://h:6650","tenant":"t","nameSpace":"n","name":"f",
	 "sourceSpecsTopic":"in","isRegexPatternSubscription":true,"receiverQueueSize":7,"sinkSpecsTopic":"out",
	 "processingGuarantees":2,"subscriptionType":1,"subscriptionName":"sub","killAfterIdleMs":1500}'`))
	if err != nil {
		t.Fatal(err)
	}
	in, err := c.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	d := in.Details
	if len(in.Inputs) != 1 || in.Inputs[0].Topic != "in" || !in.Inputs[0].Spec.IsRegexPattern || in.Inputs[0].Spec.ReceiverQueueSize.GetValue() != 7 {
		t.Errorf("inputs %+v", in.Inputs)
	}
	if d.ProcessingGuarantees != pb.ProcessingGuarantees_EFFECTIVELY_ONCE || d.Source.SubscriptionType != pb.SubscriptionType_FAILOVER {
		t.Errorf("guarantee %v, type %v", d.ProcessingGuarantees, d.Source.SubscriptionType)
	}
	if in.SubscriptionName() != "sub" || d.Sink.Topic != "out" || in.KillAfterIdle() != 1500*time.Millisecond {
		t.Errorf("subscription %q, sink %q, idle %s", in.SubscriptionName(), d.Sink.Topic, in.KillAfterIdle())
	}
	if len(in.UserConfig) != 0 || len(in.Secrets) != 0 || in.UserConfig == nil {
		t.Errorf("user config %v, secrets %v: want empty maps", in.UserConfig, in.Secrets)
	}
}

func TestResolveErrors(t *testing.T) {
	base := `"pulsarServiceURL":"pulsar://h:6650","tenant":"t","nameSpace":"n","name":"f","sourceSpecsTopic":"in"`
	tests := []struct {
		name, json, want string
	}{
		{"missing fields", `{"sourceSpecsTopic":"in"}`, "missing pulsarServiceURL, tenant, nameSpace, name"},
		{"no input", `{"pulsarServiceURL":"pulsar://h:6650","tenant":"t","nameSpace":"n","name":"f"}`, "no input topic"},
		{"guarantee", `{` + base + `,"processingGuarantees":7}`, "processingGuarantees 7"},
		{"subscription type", `{` + base + `,"subscriptionType":3}`, "subscriptionType 3"},
		{"position", `{` + base + `,"subscriptionPosition":2}`, "subscriptionPosition 2"},
		{"port", `{` + base + `,"port":70000}`, "port 70000"},
		{"same ports", `{` + base + `,"port":4000,"metricsPort":4000}`, "both 4000"},
		{"user config", `{` + base + `,"userConfig":"[1]"}`, "userConfig is not a JSON object"},
		{"secrets", `{` + base + `,"secretsMap":"{"}`, "secretsMap is not a JSON object"},
		{"details", `{` + base + `,"functionDetails":"{\"tenant\":5}"}`, "functionDetails is not FunctionDetails JSON"},
		{"consumer spec", `{` + base + `,"sourceInputSpecs":{"x":"nope"}}`, `sourceInputSpecs["x"]`},
		{"retries", `{` + base + `,"maxMessageRetries":-1}`, "maxMessageRetries -1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseJSON([]byte(tc.json))
			if err == nil {
				_, err = c.Resolve()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestFlagsLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "conf.yaml")
	yaml := "pulsarServiceURL: pulsar://h:6650\ntenant: t\nnameSpace: n\nname: f\nsourceInputSpecs:\n  in: \"\"\nport: 4001\nuserConfig: '{\"a\": 1}'\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := (&Flags{Path: path}).Load()
	if err != nil {
		t.Fatal(err)
	}
	in, err := c.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if in.Port != 4001 || len(in.Inputs) != 1 || in.Inputs[0].Topic != "in" || in.UserConfig["a"] != float64(1) {
		t.Errorf("from YAML: %+v", in)
	}

	for _, f := range []Flags{{}, {JSON: "{}", Path: path}, {Path: filepath.Join(dir, "absent.yaml")}} {
		if _, err := f.Load(); err == nil {
			t.Errorf("Load(%+v) succeeded", f)
		}
	}
}
