package pulsarpeer

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// DefaultMaxMessageSize is the broker's maxMessageSize (Pulsar's default,
// 5 MiB, as Magnetar's --max-message-size).
const DefaultMaxMessageSize = 5 << 20

// frameOverhead is what a bookie frame carries beyond the entry: the
// bookie's nettyMaxFrameSizeBytes is maxMessageSize plus this, or a full
// 5 MiB chunk is refused with TooLongFrameException and the broker marks
// its only bookie faulty.
const frameOverhead = 10240

// standaloneConf returns the lines of standalone.conf for the ports and
// settings given: only the keys that matter; Pulsar's defaults for the
// rest. The standalone reads the same file as its bookie's base
// configuration, so the bookie's keys are here too.
func standaloneConf(c Config, brokerPort, webPort int) string {
	kv := map[string]string{
		"clusterName":                      c.Cluster,
		"bindAddress":                      "127.0.0.1",
		"advertisedAddress":                "127.0.0.1",
		"brokerServicePort":                strconv.Itoa(brokerPort),
		"webServicePort":                   strconv.Itoa(webPort),
		"functionsWorkerEnabled":           strconv.FormatBool(c.Functions != nil),
		"managedLedgerDefaultEnsembleSize": "1",
		"managedLedgerDefaultWriteQuorum":  "1",
		"managedLedgerDefaultAckQuorum":    "1",
		"maxMessageSize":                   strconv.Itoa(DefaultMaxMessageSize),
		// The embedded bookie: on loopback, on --bookkeeper-port (without
		// allowEphemeralPorts the port flag is ignored for a random one).
		"listeningInterface":     "lo",
		"allowLoopback":          "true",
		"allowEphemeralPorts":    "true",
		"nettyMaxFrameSizeBytes": strconv.Itoa(DefaultMaxMessageSize + frameOverhead),
	}
	for k, v := range c.ExtraConf {
		kv[k] = v
	}
	var b strings.Builder
	b.WriteString("# standalone.conf written by magnetar bench/internal/pulsarpeer: only the keys that matter.\n")
	for _, k := range slices.Sorted(maps.Keys(kv)) {
		fmt.Fprintf(&b, "%s=%s\n", k, kv[k])
	}
	return b.String()
}

// workerConf returns functions_worker.yml for the in-broker worker: the
// process runtime with Magnetar's Java instance, directories under dir.
// The broker overwrites the worker's port, host name, id, cluster and
// service URLs with its own.
func workerConf(f *Functions, dir string) ([]byte, error) {
	conf := map[string]any{
		"pulsarFunctionsNamespace":         "public/functions",
		"functionMetadataTopicName":        "metadata",
		"clusterCoordinationTopicName":     "coordinate",
		"functionAssignmentTopicName":      "assignments",
		"numFunctionPackageReplicas":       1,
		"downloadDirectory":                dir + "/download",
		"connectorsDirectory":              dir + "/connectors",
		"functionsDirectory":               dir + "/functions",
		"narExtractionDirectory":           dir + "/nar",
		"uploadBuiltinSinksSources":        false,
		"schedulerClassName":               "org.apache.pulsar.functions.worker.scheduler.RoundRobinScheduler",
		"failureCheckFreqMs":               30000,
		"rescheduleTimeoutMs":              60000,
		"rebalanceCheckFreqSec":            -1,
		"initialBrokerReconnectMaxRetries": 60,
		"assignmentWriteMaxRetries":        60,
		"instanceLivenessCheckFreqMs":      30000,
		"topicCompactionFrequencySec":      1800,
		"functionRuntimeFactoryClassName":  "org.apache.pulsar.functions.runtime.process.ProcessRuntimeFactory",
		"functionRuntimeFactoryConfigs": map[string]any{
			"logDirectory":            dir + "/logs",
			"javaInstanceJarLocation": f.JavaInstanceJar,
			// The factory refuses to start without it; a file that does
			// not exist is accepted (Python functions then fail to start).
			"pythonInstanceLocation": f.PythonInstance,
		},
	}
	for k, v := range f.ExtraWorkerConf {
		conf[k] = v
	}
	b, err := yaml.Marshal(conf)
	if err != nil {
		return nil, fmt.Errorf("pulsarpeer: functions_worker.yml: %w", err)
	}
	return append([]byte("# functions_worker.yml written by magnetar bench/internal/pulsarpeer.\n"), b...), nil
}

// log4jConf is the broker's logging: everything at info to the console,
// which Start sends to <dir>/pulsar.log.
const log4jConf = `# log4j2 configuration written by magnetar bench/internal/pulsarpeer.
status = warn
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_OUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{ISO8601} %-5level [%t] %c{1} - %m%n
rootLogger.level = info
rootLogger.appenderRef.console.ref = console
`
