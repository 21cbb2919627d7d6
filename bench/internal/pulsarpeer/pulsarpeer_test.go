package pulsarpeer

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestStandaloneConf(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"broker alone", Config{Cluster: "standalone"}, []string{
			"functionsWorkerEnabled=false", "brokerServicePort=16650", "webServicePort=18080",
			"bindAddress=127.0.0.1", "advertisedAddress=127.0.0.1", "clusterName=standalone",
			"managedLedgerDefaultEnsembleSize=1", "managedLedgerDefaultWriteQuorum=1", "managedLedgerDefaultAckQuorum=1",
			"listeningInterface=lo", "allowLoopback=true", "allowEphemeralPorts=true",
			"nettyMaxFrameSizeBytes=5253120", "maxMessageSize=5242880",
		}},
		{"with worker, extra key", Config{Cluster: "c1", Functions: &Functions{JavaInstanceJar: "/j.jar"},
			ExtraConf: map[string]string{"transactionCoordinatorEnabled": "true", "maxMessageSize": "1048576"}}, []string{
			"functionsWorkerEnabled=true", "clusterName=c1", "transactionCoordinatorEnabled=true", "maxMessageSize=1048576",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := strings.Split(standaloneConf(tc.cfg, 16650, 18080), "\n")
			for _, w := range tc.want {
				found := false
				for _, l := range lines {
					found = found || l == w
				}
				if !found {
					t.Errorf("standalone.conf lacks %q:\n%s", w, strings.Join(lines, "\n"))
				}
			}
		})
	}
}

func TestWorkerConf(t *testing.T) {
	b, err := workerConf(&Functions{JavaInstanceJar: "/h/java-instance.jar", PythonInstance: "/nowhere/p.py",
		ExtraWorkerConf: map[string]any{"numFunctionPackageReplicas": 2}}, "/d/worker")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := yaml.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if got["functionRuntimeFactoryClassName"] != "org.apache.pulsar.functions.runtime.process.ProcessRuntimeFactory" {
		t.Errorf("runtime factory %v", got["functionRuntimeFactoryClassName"])
	}
	rc, _ := got["functionRuntimeFactoryConfigs"].(map[string]any)
	if rc["javaInstanceJarLocation"] != "/h/java-instance.jar" || rc["pythonInstanceLocation"] != "/nowhere/p.py" || rc["logDirectory"] != "/d/worker/logs" {
		t.Errorf("runtime factory configs %v", rc)
	}
	if got["numFunctionPackageReplicas"] != 2 || got["downloadDirectory"] != "/d/worker/download" {
		t.Errorf("worker conf %v", got)
	}
}

// TestStartStop runs the real standalone (broker alone) when its home is
// laid out (setup.sh): ready, then stopped with its whole process group.
// Without the home it skips, or fails under MAGNETAR_REQUIRE_PULSAR_PEER=1
// (.ci/run sets it once setup.sh ran).
func TestStartStop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real Apache Pulsar standalone")
	}
	home, err := Locate("")
	if err != nil {
		if os.Getenv("MAGNETAR_REQUIRE_PULSAR_PEER") == "1" {
			t.Fatalf("the Pulsar peer's home: %v", err)
		}
		t.Skipf("the Pulsar peer's home is not laid out (bench/internal/pulsarpeer/setup.sh): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	s, err := Start(ctx, Config{Home: home, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ready after %v (%s, %s)", s.ReadyAfter, s.BrokerURL, s.HeapFlags())
	if err := s.Stop(); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "pulsar.log")); err != nil {
		t.Error(err)
	}
}
