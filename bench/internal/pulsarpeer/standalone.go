package pulsarpeer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/magnetar-dev/magnetar/internal/freeport"
)

// DefaultHeapArgs are the broker JVM's heap and collector flags: a heap
// that starts at 1 GiB and may grow to 2 GiB, 1 GiB of direct memory (the
// broker's and the bookie's Netty buffers), G1 (the JVM's own choice on a
// 2-core, 24 GB machine, made explicit). Pulsar's own launcher uses other
// settings (a fixed heap and another collector); results record what ran
// (Standalone.JVMArgs).
var DefaultHeapArgs = []string{"-Xms1g", "-Xmx2g", "-XX:MaxDirectMemorySize=1g", "-XX:+UseG1GC"}

// moduleArgs open the JDK internals Pulsar's Netty, BookKeeper and metrics
// code reach into on Java 17.
var moduleArgs = []string{
	"--add-opens", "java.base/java.lang=ALL-UNNAMED",
	"--add-opens", "java.base/java.io=ALL-UNNAMED",
	"--add-opens", "java.base/java.nio=ALL-UNNAMED",
	"--add-opens", "java.base/java.util.zip=ALL-UNNAMED",
	"--add-opens", "java.base/sun.net=ALL-UNNAMED",
	"--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED",
	"--add-opens", "java.base/jdk.internal.platform=ALL-UNNAMED",
	"--add-opens", "java.management/sun.management=ALL-UNNAMED",
	"--add-opens", "jdk.management/com.sun.management.internal=ALL-UNNAMED",
	"-Dio.netty.tryReflectionSetAccessible=true",
}

// Config is one standalone's settings. Home and Dir are required; the
// zero value of every other field is its documented default.
type Config struct {
	// Home is the Pulsar home (Setup or Locate).
	Home Home
	// Dir is the run's directory: configuration, data and pulsar.log. It
	// should be empty (a fresh standalone).
	Dir string
	// Java is the java binary (default "java" on PATH; Java 17+).
	Java string
	// HeapArgs replace DefaultHeapArgs when non-nil.
	HeapArgs []string
	// Cluster is clusterName (default "standalone").
	Cluster string
	// Functions, when set, turns the in-broker functions worker on
	// (functionsWorkerEnabled=true, process runtime); nil runs the broker
	// alone (functionsWorkerEnabled=false, --no-functions-worker).
	Functions *Functions
	// ExtraConf adds or overrides standalone.conf keys.
	ExtraConf map[string]string
	// ReadyTimeout bounds the wait for health (default 4 minutes: the
	// standalone took 6-54 s to be ready here, tracking the load).
	ReadyTimeout time.Duration
	// StopGrace is how long Stop waits after SIGTERM before SIGKILL
	// (default 20 s).
	StopGrace time.Duration
}

// Functions configures the in-broker functions worker.
type Functions struct {
	// JavaInstanceJar is javaInstanceJarLocation: the jar passed to each
	// Java instance as -cp (Magnetar's functions home's pathing jar,
	// java-instance.jar, runs the same instance as Magnetar's worker).
	// Required.
	JavaInstanceJar string
	// InstanceClasspath is passed to the broker JVM as
	// -Dpulsar.functions.instance.classpath, which the worker hands to
	// each Java instance. Empty: unset, and the worker passes the broker's
	// own class path (the 327 jars of lib/), which also works.
	InstanceClasspath string
	// InstanceLog4jConfig is passed to the broker JVM as
	// -Dpulsar.functions.log.conf: the Java instances' log4j2
	// configuration (empty: Pulsar's fallback, java_instance_log4j2.xml
	// resolved by the instance).
	InstanceLog4jConfig string
	// PythonInstance is pythonInstanceLocation. Pulsar's process runtime
	// refuses to start without one; a path that does not exist is
	// accepted (default <Dir>/no-python-instance/python_instance_main.py).
	PythonInstance string
	// ExtraWorkerConf adds or overrides functions_worker.yml keys.
	ExtraWorkerConf map[string]any
}

// Standalone is a running Pulsar standalone.
type Standalone struct {
	// BrokerURL is the binary protocol URL (pulsar://127.0.0.1:port).
	BrokerURL string
	// WebURL is the admin REST API (and, with the worker, /admin/v3).
	WebURL string
	// BookiePort is the embedded bookie's port.
	BookiePort int
	// JVMArgs are the broker JVM's flags before -cp (heap, collector,
	// module opens, system properties): for the results.
	JVMArgs []string
	// ReadyAfter is how long the standalone took to answer health (and,
	// with the worker, the functions API).
	ReadyAfter time.Duration

	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the JVM has exited
	err     error         // Wait's result, set before done is closed
	grace   time.Duration
}

// Start writes the configuration into cfg.Dir, starts the standalone on
// free loopback ports in a process group of its own and waits until it is
// ready: health answers, the namespace public/default exists and, with
// the worker, the functions API answers and the worker's leader is ready
// (or ctx ends, or ReadyTimeout passes; then it is stopped).
func Start(ctx context.Context, cfg Config) (*Standalone, error) {
	if cfg.Home.Lib == "" || cfg.Dir == "" {
		return nil, errors.New("pulsarpeer: Config.Home and Config.Dir are required")
	}
	if cfg.Functions != nil && cfg.Functions.JavaInstanceJar == "" {
		return nil, errors.New("pulsarpeer: Functions.JavaInstanceJar is required")
	}
	if cfg.Java == "" {
		cfg.Java = "java"
	}
	if cfg.HeapArgs == nil {
		cfg.HeapArgs = DefaultHeapArgs
	}
	if cfg.Cluster == "" {
		cfg.Cluster = "standalone"
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 4 * time.Minute
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 20 * time.Second
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("pulsarpeer: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("pulsarpeer: %w", err)
	}
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = freeport.Port(); err != nil {
			return nil, fmt.Errorf("pulsarpeer: %w", err)
		}
	}
	brokerPort, webPort, bookiePort := ports[0], ports[1], ports[2]

	write := func(name string, b []byte) (string, error) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return "", fmt.Errorf("pulsarpeer: %w", err)
		}
		return p, nil
	}
	confPath, err := write("standalone.conf", []byte(standaloneConf(cfg, brokerPort, webPort)))
	if err != nil {
		return nil, err
	}
	logConf, err := write("log4j2.properties", []byte(log4jConf))
	if err != nil {
		return nil, err
	}

	jvm := append([]string{}, cfg.HeapArgs...)
	jvm = append(jvm, moduleArgs...)
	jvm = append(jvm, "-Dlog4j2.configurationFile="+logConf)
	args := []string{"--config", confPath}
	if f := cfg.Functions; f != nil {
		if f.PythonInstance == "" {
			f2 := *f
			f2.PythonInstance = filepath.Join(dir, "no-python-instance", "python_instance_main.py")
			f = &f2
		}
		wc, err := workerConf(f, filepath.Join(dir, "worker"))
		if err != nil {
			return nil, err
		}
		wcPath, err := write("functions_worker.yml", wc)
		if err != nil {
			return nil, err
		}
		args = append(args, "--functions-worker-conf", wcPath)
		if f.InstanceClasspath != "" {
			jvm = append(jvm, "-Dpulsar.functions.instance.classpath="+f.InstanceClasspath)
		}
		if f.InstanceLog4jConfig != "" {
			jvm = append(jvm, "-Dpulsar.functions.log.conf="+f.InstanceLog4jConfig)
		}
	} else {
		args = append(args, "--no-functions-worker")
	}
	args = append(args, "--no-stream-storage",
		"--metadata-dir", filepath.Join(dir, "data", "metadata"),
		"--bookkeeper-dir", filepath.Join(dir, "data", "bookkeeper"),
		"--zookeeper-dir", filepath.Join(dir, "data", "zookeeper"),
		"--bookkeeper-port", strconv.Itoa(bookiePort))

	logPath := filepath.Join(dir, "pulsar.log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("pulsarpeer: %w", err)
	}
	argv := append(append(append([]string{}, jvm...), "-cp", filepath.Join(cfg.Home.Lib, "*"), MainClass), args...)
	cmd := exec.Command(cfg.Java, argv...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = lf, lf
	// A group of its own: Stop signals the broker and the function
	// instances it started (which stay in its group) at once. The JVM
	// dies with the benchmark.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("pulsarpeer: start %s: %w", cfg.Java, err)
	}
	s := &Standalone{
		BrokerURL:  "pulsar://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(brokerPort)),
		WebURL:     "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(webPort)),
		BookiePort: bookiePort,
		JVMArgs:    jvm,
		cmd:        cmd,
		logPath:    logPath,
		done:       make(chan struct{}),
		grace:      cfg.StopGrace,
	}
	go func() { // owned by s: ends when the JVM exits
		s.err = cmd.Wait()
		lf.Close()
		close(s.done)
	}()
	// Health answers before the standalone has created the tenant and
	// namespace public/default (and, with the worker, public/functions):
	// a function created then is refused with "Namespace does not exist".
	probes := []probe{{path: "/admin/v2/brokers/health"}, {path: "/admin/v2/namespaces/public/default"}}
	if cfg.Functions != nil {
		// The functions API answers before the worker's leader is ready
		// to take a function: until then a create is refused with 503
		// "Leader not yet ready. Please retry again".
		probes = append(probes, probe{path: "/admin/v3/functions/public/default"},
			probe{path: "/admin/v2/worker/cluster/leader/ready", body: "true"})
	}
	if err := s.waitReady(ctx, cfg.ReadyTimeout, probes); err != nil {
		s.Stop()
		return nil, err
	}
	s.ReadyAfter = time.Since(t0)
	return s, nil
}

// Pid is the broker JVM's process id (and its process group's).
func (s *Standalone) Pid() int { return s.cmd.Process.Pid }

// HeapFlags returns the heap and collector flags the JVM ran with.
func (s *Standalone) HeapFlags() string {
	var out []string
	for _, a := range s.JVMArgs {
		if strings.HasPrefix(a, "-Xm") || strings.HasPrefix(a, "-XX:") {
			out = append(out, a)
		}
	}
	return strings.Join(out, " ")
}

// probe is one readiness check: GET path answers 200 and, when body is
// set, that body (trimmed).
type probe struct{ path, body string }

// waitReady runs every probe in turn until each passes, the JVM exits, ctx
// ends or timeout passes.
func (s *Standalone) waitReady(ctx context.Context, timeout time.Duration, probes []probe) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for _, p := range probes {
		for {
			err := s.get(ctx, p.path, p.body)
			if err == nil {
				break
			}
			select {
			case <-s.done:
				return fmt.Errorf("pulsarpeer: the standalone exited before ready: %v; log tail:\n%s", s.err, s.LogTail(30))
			case <-ctx.Done():
				return fmt.Errorf("pulsarpeer: the standalone is not ready after %v (%s: %v); log tail:\n%s", timeout, p.path, err, s.LogTail(30))
			case <-tick.C:
			}
		}
	}
	return nil
}

func (s *Standalone) get(ctx context.Context, path, want string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.WebURL+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	if got := strings.TrimSpace(string(b)); want != "" && got != want {
		return fmt.Errorf("GET %s: %q, want %q", path, got, want)
	}
	return nil
}

// Stop sends SIGTERM to the standalone's process group (the broker and its
// function instances), waits up to the grace period, then SIGKILLs the
// group; it always waits for the JVM to be gone and kills what is left of
// the group. A JVM that had already exited is an error.
func (s *Standalone) Stop() error {
	pgid := s.cmd.Process.Pid
	defer syscall.Kill(-pgid, syscall.SIGKILL) // stragglers whose leader is gone
	select {
	case <-s.done:
		return fmt.Errorf("pulsarpeer: the standalone exited early: %v; log tail:\n%s", s.err, s.LogTail(15))
	default:
	}
	syscall.Kill(-pgid, syscall.SIGTERM)
	t := time.NewTimer(s.grace)
	defer t.Stop()
	select {
	case <-s.done:
		return nil
	case <-t.C:
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-s.done
		return fmt.Errorf("pulsarpeer: the standalone did not stop within %v of SIGTERM; killed", s.grace)
	}
}

// Exited is closed when the JVM has exited.
func (s *Standalone) Exited() <-chan struct{} { return s.done }

// LogPath is the standalone's output (stdout and stderr: the broker's log
// and, through the worker, its function instances').
func (s *Standalone) LogPath() string { return s.logPath }

// LogTail returns the last n lines of the standalone's output.
func (s *Standalone) LogTail(n int) string {
	b, _ := os.ReadFile(s.logPath)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
