package worker

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/magnetar-dev/magnetar/api/pulsarfunctions"
)

// JavaRuntime is Pulsar's own Java instance, from its published artifacts
// (dataplane/functions/javainstance sets it up).
type JavaRuntime struct {
	// Java is the java command. Default "java".
	Java string
	// InstanceJar is the root class path (the jar holding JavaInstanceMain
	// and the API jars); Classpath the instance class path
	// (-Dpulsar.functions.instance.classpath); Log4jConfig the instances'
	// log4j2 configuration file.
	InstanceJar, Classpath, Log4jConfig string
}

// Runtimes are the instance runtimes a worker can start.
type Runtimes struct {
	// Java, when nil, makes the worker refuse Java functions, sources and
	// sinks.
	Java *JavaRuntime
	// PythonMain is our Python instance's python_instance_main.py
	// (dataplane/functions/pyinstance); "" refuses Python functions.
	PythonMain string
	// Python is the interpreter. Default "python3".
	Python string
}

// Pulsar's Java instance classes the worker names.
const (
	javaInstanceMain      = "org.apache.pulsar.functions.instance.JavaInstanceMain"
	clearTextSecrets      = "org.apache.pulsar.functions.secretsprovider.ClearTextSecretsProvider"
	metadataStateProvider = "org.apache.pulsar.functions.instance.state.PulsarMetadataStateStoreProviderImpl"
	tokenAuthPlugin       = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
)

// instanceEnv is what every instance of one worker is told about the
// cluster it runs in.
type instanceEnv struct {
	ServiceURL    string // pulsar:// or pulsar+ssl:// of the brokers
	WebServiceURL string // http(s):// of this worker (state API for Python and Go)
	ClusterName   string
	// JavaStateURL is the metadata-store URL Java instances keep state in
	// ("etcd:http://..."); "" leaves Java state off.
	JavaStateURL string
	// Token authenticates instances to the brokers when set; TokenFile
	// holds one instead, read by the instances at every authentication
	// (so it can be renewed under them).
	Token, TokenFile string
	// TLSTrustCerts is the CA file for pulsar+ssl:// URLs.
	TLSTrustCerts string
	// HealthCheckInterval is --expected_healthcheck_interval in seconds.
	HealthCheckInterval int
	LogDir              string
	NarDir              string
}

// launch is one start of one instance.
type launch struct {
	details  *pb.FunctionDetails
	index    int
	pkgPath  string // the package file ("" for none)
	port     int    // InstanceControl gRPC
	metrics  int    // Prometheus
	workerID string
}

func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// errNoRuntime refuses a component whose runtime this worker lacks.
var errNoRuntime = errors.New("worker: runtime not available")

// command returns argv of one instance start.
func (rt *Runtimes) command(env *instanceEnv, l *launch) ([]string, error) {
	d := l.details
	detailsJSON, err := protojson.MarshalOptions{}.Marshal(d)
	if err != nil {
		return nil, err
	}
	// Pulsar's worker prints compact JSON and wraps it in single quotes
	// (its instances strip one pair); protojson's output may carry random
	// spaces, so compact it.
	compact, err := compactJSON(detailsJSON)
	if err != nil {
		return nil, err
	}
	logDir := filepath.Join(env.LogDir, d.Tenant, d.Namespace, d.Name)
	idx := strconv.Itoa(l.index)
	switch d.Runtime {
	case pb.FunctionDetails_JAVA:
		j := rt.Java
		if j == nil {
			return nil, fmt.Errorf("%w: Java (run dataplane/functions/javainstance/setup.sh and give the worker its home)", errNoRuntime)
		}
		java := j.Java
		if java == "" {
			java = "java"
		}
		args := []string{java, "-cp", j.InstanceJar,
			"-Dpulsar.functions.instance.classpath=" + j.Classpath,
			"-Dlog4j.configurationFile=" + j.Log4jConfig,
			"-Dpulsar.function.log.dir=" + logDir,
			"-Dpulsar.function.log.file=" + d.Name + "-" + idx,
			"-Dio.netty.tryReflectionSetAccessible=true",
			"-Dorg.apache.pulsar.shade.io.netty.tryReflectionSetAccessible=true",
			"-Dio.grpc.netty.shaded.io.netty.tryReflectionSetAccessible=true",
			"--add-opens", "java.base/java.nio=ALL-UNNAMED",
			"--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED",
			"--add-opens", "java.base/java.util.zip=ALL-UNNAMED",
		}
		args = append(args, strings.Fields(d.RuntimeFlags)...)
		if d.Resources != nil && d.Resources.Ram > 0 {
			args = append(args, "-Xmx"+strconv.FormatInt(d.Resources.Ram, 10))
		}
		args = append(args, javaInstanceMain,
			"--jar", l.pkgPath)
		args = append(args, env.instanceArgs(l, compact)...)
		args = append(args, "--pending_async_requests", "1000")
		if env.JavaStateURL != "" {
			args = append(args, "--state_storage_impl_class", metadataStateProvider,
				"--state_storage_serviceurl", env.JavaStateURL)
		}
		args = append(args,
			"--expected_healthcheck_interval", strconv.Itoa(env.HealthCheckInterval),
			"--secrets_provider", clearTextSecrets,
			"--cluster_name", env.ClusterName,
			"--nar_extraction_directory", env.NarDir)
		return args, nil
	case pb.FunctionDetails_PYTHON:
		if rt.PythonMain == "" {
			return nil, fmt.Errorf("%w: Python", errNoRuntime)
		}
		py := rt.Python
		if py == "" {
			py = "python3"
		}
		args := []string{py}
		args = append(args, strings.Fields(d.RuntimeFlags)...)
		args = append(args, rt.PythonMain,
			"--py", l.pkgPath,
			"--logging_directory", logDir,
			"--logging_file", d.Name+"-"+idx,
			"--logging_config_file", "")
		args = append(args, env.instanceArgs(l, compact)...)
		args = append(args,
			"--state_storage_serviceurl", env.WebServiceURL,
			"--expected_healthcheck_interval", strconv.Itoa(env.HealthCheckInterval),
			"--cluster_name", env.ClusterName)
		return args, nil
	case pb.FunctionDetails_GO:
		conf, err := goInstanceConf(env, l, compact)
		if err != nil {
			return nil, err
		}
		return []string{l.pkgPath, "-instance-conf", conf}, nil
	}
	return nil, fmt.Errorf("%w: runtime %v", errNoRuntime, d.Runtime)
}

// instanceArgs are the arguments the Java and Python instances share:
// identity, details, the brokers and their credentials, and ports.
func (env *instanceEnv) instanceArgs(l *launch, detailsJSON string) []string {
	args := []string{
		"--instance_id", strconv.Itoa(l.index),
		"--function_id", newUUID(),
		"--function_version", newUUID(),
		"--function_details", "'" + detailsJSON + "'",
		"--pulsar_serviceurl", env.ServiceURL,
	}
	args = append(args, env.authArgs()...)
	return append(args,
		"--max_buffered_tuples", "1024",
		"--port", strconv.Itoa(l.port),
		"--metrics_port", strconv.Itoa(l.metrics))
}

func (env *instanceEnv) authArgs() []string {
	var args []string
	if p := env.authParams(); p != "" {
		args = append(args, "--client_auth_plugin", tokenAuthPlugin, "--client_auth_params", p)
	}
	tls := strings.HasPrefix(env.ServiceURL, "pulsar+ssl://")
	args = append(args, "--use_tls", strconv.FormatBool(tls), "--tls_allow_insecure", "false",
		"--hostname_verification_enabled", "false")
	if env.TLSTrustCerts != "" {
		args = append(args, "--tls_trust_cert_path", env.TLSTrustCerts)
	}
	return args
}

// authParams are Pulsar's AuthenticationToken parameters of the
// instances ("" without a credential).
func (env *instanceEnv) authParams() string {
	switch {
	case env.TokenFile != "":
		return "file://" + env.TokenFile
	case env.Token != "":
		return "token:" + env.Token
	}
	return ""
}

func compactJSON(b []byte) (string, error) {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return "", err
	}
	out, err := json.Marshal(v)
	return string(out), err
}

// goInstanceConf is the -instance-conf JSON of a Go instance: Pulsar's
// GoInstanceConfig field names.
func goInstanceConf(env *instanceEnv, l *launch, detailsJSON string) (string, error) {
	d := l.details
	c := map[string]any{
		"pulsarServiceURL":              env.ServiceURL,
		"stateStorageServiceUrl":        env.WebServiceURL,
		"pulsarWebServiceUrl":           env.WebServiceURL,
		"instanceID":                    l.index,
		"funcID":                        newUUID(),
		"funcVersion":                   newUUID(),
		"maxBufTuples":                  1024,
		"port":                          l.port,
		"metricsPort":                   l.metrics,
		"clusterName":                   env.ClusterName,
		"killAfterIdleMs":               0,
		"expectedHealthCheckInterval":   env.HealthCheckInterval,
		"tenant":                        d.Tenant,
		"nameSpace":                     d.Namespace,
		"name":                          d.Name,
		"className":                     d.ClassName,
		"logTopic":                      d.LogTopic,
		"processingGuarantees":          int(d.ProcessingGuarantees),
		"secretsMap":                    d.SecretsMap,
		"userConfig":                    d.UserConfig,
		"runtime":                       int(d.Runtime),
		"autoAck":                       d.AutoAck,
		"parallelism":                   d.Parallelism,
		"tlsTrustCertsFilePath":         env.TLSTrustCerts,
		"tlsAllowInsecureConnection":    false,
		"tlsHostnameVerificationEnable": false,
		"functionDetails":               detailsJSON,
	}
	if p := env.authParams(); p != "" {
		c["clientAuthenticationPlugin"] = tokenAuthPlugin
		c["clientAuthenticationParameters"] = p
	}
	if s := d.Source; s != nil {
		specs := map[string]string{}
		topic := ""
		for t, cs := range s.InputSpecs {
			b, err := protojson.Marshal(cs)
			if err != nil {
				return "", err
			}
			specs[t] = string(b)
			topic = t
		}
		c["subscriptionType"] = int(s.SubscriptionType)
		c["timeoutMs"] = s.TimeoutMs
		c["subscriptionName"] = s.SubscriptionName
		c["cleanupSubscription"] = s.CleanupSubscription
		c["subscriptionPosition"] = int(s.SubscriptionPosition)
		c["sourceInputSpecs"] = specs
		c["sourceSpecsTopic"] = topic
	}
	if s := d.Sink; s != nil {
		c["sinkSpecsTopic"] = s.Topic
	}
	if r := d.Resources; r != nil {
		c["cpu"], c["ram"], c["disk"] = r.Cpu, r.Ram, r.Disk
	}
	if r := d.RetryDetails; r != nil {
		c["maxMessageRetries"] = r.MaxMessageRetries
		c["deadLetterTopic"] = r.DeadLetterTopic
	}
	b, err := json.Marshal(c)
	return string(b), err
}
