package e2e

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The Java client harness: e2e/javaclient is a Maven project whose main
// class, io.magnetar.e2e.JavaClient, runs one Apache Pulsar Java producer or
// consumer (org.apache.pulsar:pulsar-client, the version its pom.xml pins),
// optionally following a failover endpoint with ControlledClusterFailover,
// and prints one line per event. StartJavaProducer and StartJavaConsumer run
// it as a child process and parse those lines. javaclient/failover_client.py
// is the same program on pulsar-client for Python (StartPythonProducer,
// StartPythonConsumer).

// requireJavaEnv, when "1", turns the skips of SkipIfNoJava into failures
// (CI sets it once it has java and mvn).
const requireJavaEnv = "MAGNETAR_REQUIRE_JAVA"

// SkipIfNoJava skips the test when java or mvn is not on PATH, or when the
// Java client cannot be built (Maven cannot resolve the Pulsar client), and
// fails it instead when MAGNETAR_REQUIRE_JAVA=1. It builds the client jar
// the first time it is called in a test binary.
func SkipIfNoJava(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("process-level test")
	}
	skip := t.Skipf
	if os.Getenv(requireJavaEnv) == "1" {
		skip = t.Fatalf
	}
	for _, tool := range []string{"java", "mvn"} {
		if _, err := exec.LookPath(tool); err != nil {
			skip("%s not on PATH (%s=1 makes this a failure): %v", tool, requireJavaEnv, err)
			return
		}
	}
	if _, err := javaClasspath(); err != nil {
		skip("Java client not built (%s=1 makes this a failure): %v", requireJavaEnv, err)
	}
}

var (
	javaBuildOnce sync.Once
	javaCP        string
	javaBuildErr  error
)

// javaClasspath builds e2e/javaclient once per test binary and returns the
// classpath that runs it. The build is cached in
// $TMPDIR/magnetar-javaclient-<hash>, the hash covering the pom and every
// source file, so later test runs reuse it; Maven's own cache (~/.m2) keeps
// the dependencies. It builds offline (mvn -o) when ~/.m2 already has
// everything, else online.
func javaClasspath() (string, error) {
	javaBuildOnce.Do(func() { javaCP, javaBuildErr = buildJavaClient() })
	return javaCP, javaBuildErr
}

func buildJavaClient() (string, error) {
	src, err := filepath.Abs("javaclient")
	if err != nil {
		return "", err
	}
	sum, err := hashJavaProject(src)
	if err != nil {
		return "", fmt.Errorf("javaclient: hash sources: %w", err)
	}
	dir := filepath.Join(os.TempDir(), "magnetar-javaclient-"+sum[:16])
	cp := filepath.Join(dir, "target", "javaclient.jar") + string(os.PathListSeparator) +
		filepath.Join(dir, "target", "lib", "*")
	if _, err := os.Stat(filepath.Join(dir, "built")); err == nil {
		return cp, nil
	}
	// Build in a fresh directory and rename it into place, so concurrent
	// test binaries never see half a build.
	tmp, err := os.MkdirTemp(os.TempDir(), "magnetar-javaclient-build")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := copyJavaProject(src, tmp); err != nil {
		return "", fmt.Errorf("javaclient: copy sources: %w", err)
	}
	mvn := func(args ...string) ([]byte, error) {
		cmd := exec.Command("mvn", append([]string{"-B", "-q"}, args...)...)
		cmd.Dir = tmp
		return cmd.CombinedOutput()
	}
	if _, err := mvn("-o", "package", "-DskipTests"); err != nil {
		if out, err := mvn("package", "-DskipTests"); err != nil {
			return "", fmt.Errorf("javaclient: mvn package: %w\n%s", err, tailBytes(out, 3000))
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, "built"), []byte(sum+"\n"), 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(filepath.Join(dir, "built")); statErr != nil {
			return "", fmt.Errorf("javaclient: install build: %w", err)
		}
		// another test binary installed the same build first
	}
	return cp, nil
}

// hashJavaProject hashes the names and contents of the project's files, leaving
// out Maven's output (target/) and Python's bytecode cache.
func hashJavaProject(root string) (string, error) {
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "target" || d.Name() == "__pycache__") {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		rel, _ := filepath.Rel(root, f)
		fmt.Fprintf(h, "%s\x00%d\x00", rel, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func copyJavaProject(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			if d.Name() == "target" || d.Name() == "__pycache__" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
}

func tailBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// ClientOptions configure one producer or consumer, Java or Python: both
// programs take the same flags. ServiceURL is the cluster it starts on;
// with ProviderURL set it follows that failover endpoint
// (ControlledClusterFailover, or failover_client.py's EndpointProvider,
// ServiceURL as its default URL).
type ClientOptions struct {
	ServiceURL string
	// ProviderURL is the failover endpoint polled every CheckInterval
	// (default 1 s), with the header "Authorization: Bearer ProviderToken"
	// when ProviderToken is set.
	ProviderURL   string
	ProviderToken string
	CheckInterval time.Duration
	// AuthPlugin and AuthParams authenticate the client to the brokers
	// (ClientBuilder.authentication), e.g.
	// org.apache.pulsar.client.impl.auth.AuthenticationToken and
	// "token:..." or "file:///path"; the Python client takes the same Java
	// names and parameters (failover_client.py's make_authentication). On
	// every cluster the endpoint names, unless its answer names another
	// authentication.
	AuthPlugin, AuthParams string
	// TLSTrustCertsFile is the PEM file of the CAs the client trusts on
	// pulsar+ssl:// URLs (ClientBuilder.tlsTrustCertsFilePath), on every
	// cluster the endpoint names unless its answer names another trust
	// file (tlsTrustCertsFilePath).
	TLSTrustCertsFile string

	Topic string

	// Producer: payloads are "<Name>-<seq>" (seq from 0, six digits),
	// Count messages (0: until stopped) at Rate per second (default 100),
	// with Key as the message key when set; Batching off when NoBatching.
	Name       string
	Key        string
	Count      int
	Rate       int
	NoBatching bool

	// Consumer: Subscription of SubscriptionType (default Shared), always
	// with replicated subscription state, from the earliest message.
	Subscription     string
	SubscriptionType string
}

// consumerArgs is args("consume"), failing the test when o has no
// Subscription.
func (o ClientOptions) consumerArgs(t testing.TB, name string) []string {
	t.Helper()
	if o.Subscription == "" {
		t.Fatalf("%s: ClientOptions.Subscription is required", name)
	}
	return o.args("consume")
}

func (o ClientOptions) args(mode string) []string {
	a := []string{mode, "--service-url", o.ServiceURL, "--topic", o.Topic}
	if o.ProviderURL != "" {
		ci := o.CheckInterval
		if ci <= 0 {
			ci = time.Second
		}
		a = append(a, "--provider-url", o.ProviderURL, "--check-interval-ms", strconv.FormatInt(ci.Milliseconds(), 10))
		if o.ProviderToken != "" {
			a = append(a, "--provider-token", o.ProviderToken)
		}
	}
	if o.AuthPlugin != "" {
		a = append(a, "--auth-plugin", o.AuthPlugin, "--auth-params", o.AuthParams)
	}
	if o.TLSTrustCertsFile != "" {
		a = append(a, "--tls-trust-certs-file", o.TLSTrustCertsFile)
	}
	if mode == "produce" {
		if o.Name != "" {
			a = append(a, "--name", o.Name)
		}
		if o.Key != "" {
			a = append(a, "--key", o.Key)
		}
		if o.Rate > 0 {
			a = append(a, "--rate", strconv.Itoa(o.Rate))
		}
		a = append(a, "--count", strconv.Itoa(o.Count), "--batching", strconv.FormatBool(!o.NoBatching))
	} else {
		a = append(a, "--subscription", o.Subscription)
		if o.SubscriptionType != "" {
			a = append(a, "--type", o.SubscriptionType)
		}
	}
	return a
}

// URLChange is one service URL the client used: At is when the test
// read the line, JavaAt the client's own clock when it saw the change.
type URLChange struct {
	URL    string
	At     time.Time
	JavaAt time.Time
}

// ClientAck is an acknowledged send.
type ClientAck struct {
	Seq   int
	MsgID string
	At    time.Time
}

// ClientSendError is a send that failed.
type ClientSendError struct {
	Seq int
	Err string
}

// ClientMessage is a message the consumer received (and then acknowledged).
// Producer and Seq are parsed from a "<name>-<seq>" payload (Seq is -1 for
// any other payload); ReplicatedFrom is the cluster it was replicated from,
// empty for a message produced in the cluster that delivered it, "?" when
// the client cannot tell (Python).
type ClientMessage struct {
	Payload        string
	Producer       string
	Seq            int
	MsgID          string
	ReplicatedFrom string
	At             time.Time
}

// ClientDone is the DONE line: messages sent, acknowledged and failed (a
// consumer reports its received count in all three).
type ClientDone struct{ Sent, Acked, Failed int }

// clientProc is one running client process (JavaClient or
// failover_client.py) and what its output said so far.
type clientProc struct {
	t    testing.TB
	name string
	cmd  *exec.Cmd

	stdin  io.WriteCloser
	exited chan struct{}
	readWG sync.WaitGroup

	mu       sync.Mutex
	stderr   bytes.Buffer
	exitErr  error
	ready    bool
	fatal    string
	done     *ClientDone
	urls     []URLChange
	acks     []ClientAck
	sendErrs []ClientSendError
	msgs     []ClientMessage
	bad      []string
}

// ClientProducer is a running producer (Java, or Python).
type ClientProducer struct{ *clientProc }

// ClientConsumer is a running consumer (Java, or Python).
type ClientConsumer struct{ *clientProc }

// StartJavaProducer starts a Java producer and waits until it is created.
// The test's cleanup kills it if the test did not Stop it, and logs its
// stderr when the test failed.
func StartJavaProducer(t testing.TB, name string, o ClientOptions) *ClientProducer {
	t.Helper()
	return &ClientProducer{startJava(t, name, o.args("produce"))}
}

// StartJavaConsumer starts a Java consumer and waits until it is subscribed.
func StartJavaConsumer(t testing.TB, name string, o ClientOptions) *ClientConsumer {
	t.Helper()
	return &ClientConsumer{startJava(t, name, o.consumerArgs(t, name))}
}

// requirePythonEnv, when "1", turns the skips of SkipIfNoPythonPulsar into
// failures (CI sets it once pulsar-client for Python is installed).
const requirePythonEnv = "MAGNETAR_REQUIRE_PYTHON_PULSAR"

// SkipIfNoPythonPulsar skips the test unless python3 can import pulsar with
// its ServiceInfoProvider (pulsar-client 3.13 and later), and fails it
// instead when MAGNETAR_REQUIRE_PYTHON_PULSAR=1.
func SkipIfNoPythonPulsar(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("process-level test")
	}
	out, err := exec.Command("python3", "-c", "import pulsar; pulsar.ServiceInfoProvider").CombinedOutput()
	if err != nil {
		skip := t.Skipf
		if os.Getenv(requirePythonEnv) == "1" {
			skip = t.Fatalf
		}
		skip("python3 cannot import pulsar.ServiceInfoProvider (pip install pulsar-client==3.13.0; %s=1 makes this a failure): %v\n%s",
			requirePythonEnv, err, out)
	}
}

// StartPythonProducer is StartJavaProducer with pulsar-client for Python
// (javaclient/failover_client.py: the same flags and output, its failover
// provider a ServiceInfoProvider polling ProviderURL).
func StartPythonProducer(t testing.TB, name string, o ClientOptions) *ClientProducer {
	t.Helper()
	return &ClientProducer{startPython(t, name, o.args("produce"))}
}

// StartPythonConsumer is StartJavaConsumer with pulsar-client for Python.
// Its messages' ReplicatedFrom is "?": the Python client does not say.
func StartPythonConsumer(t testing.TB, name string, o ClientOptions) *ClientConsumer {
	t.Helper()
	return &ClientConsumer{startPython(t, name, o.consumerArgs(t, name))}
}

func startPython(t testing.TB, name string, args []string) *clientProc {
	t.Helper()
	SkipIfNoPythonPulsar(t)
	script, err := filepath.Abs(filepath.Join("javaclient", "failover_client.py"))
	if err != nil {
		t.Fatal(err)
	}
	return startClient(t, name, "python3", append([]string{"-u", script}, args...))
}

func startJava(t testing.TB, name string, args []string) *clientProc {
	t.Helper()
	SkipIfNoJava(t)
	cp, _ := javaClasspath()
	return startClient(t, name, "java", append([]string{"-Xmx256m", "-XX:+UseSerialGC", "-cp", cp, "io.magnetar.e2e.JavaClient"}, args...))
}

// startClient runs argv (JavaClient, or the Python client with the same
// command line and output) and waits for its READY line.
func startClient(t testing.TB, name, prog string, args []string) *clientProc {
	t.Helper()
	p := &clientProc{t: t, name: name, cmd: exec.Command(prog, args...), exited: make(chan struct{})}
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.stdin = stdin
	p.cmd.Stderr = lockedWriter{&p.mu, &p.stderr}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: start %s: %v", name, prog, err)
	}
	p.readWG.Add(1)
	go func() {
		defer p.readWG.Done()
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.parse(sc.Text(), time.Now())
		}
		if err := sc.Err(); err != nil {
			p.mu.Lock()
			p.bad = append(p.bad, "reading output: "+err.Error())
			p.mu.Unlock()
		}
		io.Copy(io.Discard, stdout) // never leave the client blocked on a full pipe
	}()
	go func() {
		p.readWG.Wait() // all output parsed before Wait closes the pipe
		err := p.cmd.Wait()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s (%s) stderr, last 8 KiB:\n%s", name, prog, tailBytes([]byte(p.Stderr()), 8<<10))
		}
	})
	p.waitFor("READY", 60*time.Second, func() bool { return p.ready })
	return p
}

// parse records one output line.
func (p *clientProc) parse(line string, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	kind, rest, _ := strings.Cut(line, " ")
	f := strings.Fields(rest)
	switch {
	case kind == "READY":
		p.ready = true
		return
	case kind == "FATAL":
		p.fatal = rest
		return
	case kind == "URL" && len(f) == 2:
		ms, err := strconv.ParseInt(f[0], 10, 64)
		if err == nil {
			p.urls = append(p.urls, URLChange{URL: f[1], At: at, JavaAt: time.UnixMilli(ms)})
			return
		}
	case kind == "ACK" && len(f) == 2:
		seq, err := strconv.Atoi(f[0])
		if err == nil {
			p.acks = append(p.acks, ClientAck{Seq: seq, MsgID: f[1], At: at})
			return
		}
	case kind == "ERR" && len(f) >= 1:
		seq, err := strconv.Atoi(f[0])
		if err == nil {
			_, msg, _ := strings.Cut(rest, " ")
			p.sendErrs = append(p.sendErrs, ClientSendError{Seq: seq, Err: msg})
			return
		}
	case kind == "MSG" && len(f) == 3:
		m := ClientMessage{Payload: f[0], Seq: -1, MsgID: f[1], At: at}
		if f[2] != "-" {
			m.ReplicatedFrom = f[2]
		}
		if i := strings.LastIndexByte(f[0], '-'); i > 0 {
			if seq, err := strconv.Atoi(f[0][i+1:]); err == nil {
				m.Producer, m.Seq = f[0][:i], seq
			}
		}
		p.msgs = append(p.msgs, m)
		return
	case kind == "DONE" && len(f) == 3:
		var d ClientDone
		var e1, e2, e3 error
		d.Sent, e1 = strconv.Atoi(f[0])
		d.Acked, e2 = strconv.Atoi(f[1])
		d.Failed, e3 = strconv.Atoi(f[2])
		if errors.Join(e1, e2, e3) == nil {
			p.done = &d
			return
		}
	}
	p.bad = append(p.bad, line)
}

// waitFor polls cond (called with p.mu held) until it holds; it fails the
// test when the process exits first, reports FATAL, or timeout passes.
func (p *clientProc) waitFor(what string, timeout time.Duration, cond func() bool) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p.mu.Lock()
		ok, fatal := cond(), p.fatal
		p.mu.Unlock()
		if ok {
			return
		}
		if fatal != "" {
			p.t.Fatalf("%s: client failed: %s\n%s", p.name, fatal, tailBytes([]byte(p.Stderr()), 4<<10))
		}
		select {
		case <-p.exited:
			p.mu.Lock()
			ok = cond()
			p.mu.Unlock()
			if ok {
				return
			}
			p.t.Fatalf("%s: client exited (%v) before %s\n%s", p.name, p.exitError(), what, tailBytes([]byte(p.Stderr()), 4<<10))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: no %s after %v", p.name, what, timeout)
		}
	}
}

func (p *clientProc) exitError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

// WaitURL waits until the client has switched to a service URL containing
// substr and returns that change.
func (p *clientProc) WaitURL(substr string, timeout time.Duration) URLChange {
	p.t.Helper()
	var got URLChange
	p.waitFor("service URL "+substr, timeout, func() bool {
		for _, u := range p.urls {
			if strings.Contains(u.URL, substr) {
				got = u
				return true
			}
		}
		return false
	})
	return got
}

// URLChanges returns every service URL the client has printed, the first
// being the one it started with.
func (p *clientProc) URLChanges() []URLChange {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]URLChange(nil), p.urls...)
}

// Unparsed returns output lines the harness did not understand.
func (p *clientProc) Unparsed() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.bad...)
}

// Stderr returns what the JVM wrote to standard error (the client's log).
func (p *clientProc) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// Stop closes the client's standard input, so it stops, flushes pending
// sends and prints DONE, and waits for it to exit (Wait, 90 s).
func (p *clientProc) Stop() (ClientDone, error) {
	p.stdin.Close()
	return p.Wait(90 * time.Second)
}

// Wait waits for the client to exit by itself (a producer after Count
// messages) and returns its DONE figures; it kills the client after
// timeout.
func (p *clientProc) Wait(timeout time.Duration) (ClientDone, error) {
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.kill()
		return ClientDone{}, fmt.Errorf("%s: client still running after %v", p.name, timeout)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exitErr != nil {
		return ClientDone{}, fmt.Errorf("%s: client: %w (%s)", p.name, p.exitErr, p.fatal)
	}
	if p.done == nil {
		return ClientDone{}, fmt.Errorf("%s: client exited without DONE", p.name)
	}
	return *p.done, nil
}

// Terminate sends SIGTERM, on which the client stops as on Stop, and
// waits for it to exit; it returns the same as Stop.
func (p *clientProc) Terminate() (ClientDone, error) {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return ClientDone{}, fmt.Errorf("%s: SIGTERM: %w", p.name, err)
	}
	return p.Stop()
}

func (p *clientProc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Kill()
	<-p.exited
}

// Acked returns the acknowledged sends in the order they were acknowledged.
func (p *ClientProducer) Acked() []ClientAck {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]ClientAck(nil), p.acks...)
}

// SendErrors returns the failed sends.
func (p *ClientProducer) SendErrors() []ClientSendError {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]ClientSendError(nil), p.sendErrs...)
}

// WaitAcked waits until n sends have been acknowledged in all.
func (p *ClientProducer) WaitAcked(n int, timeout time.Duration) {
	p.t.Helper()
	p.waitFor(fmt.Sprintf("%d acknowledged sends", n), timeout, func() bool { return len(p.acks) >= n })
}

// WaitAckedAfter waits until n sends have been acknowledged after since.
func (p *ClientProducer) WaitAckedAfter(since time.Time, n int, timeout time.Duration) {
	p.t.Helper()
	p.waitFor(fmt.Sprintf("%d sends acknowledged after %s", n, since.Format(time.RFC3339Nano)), timeout, func() bool {
		c := 0
		for _, a := range p.acks {
			if a.At.After(since) {
				c++
			}
		}
		return c >= n
	})
}

// Received returns the received messages in arrival order.
func (c *ClientConsumer) Received() []ClientMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]ClientMessage(nil), c.msgs...)
}

// WaitReceived waits until n messages have been received in all.
func (c *ClientConsumer) WaitReceived(n int, timeout time.Duration) {
	c.t.Helper()
	c.waitFor(fmt.Sprintf("%d received messages", n), timeout, func() bool { return len(c.msgs) >= n })
}

// WaitReceivedAll polls until every payload in want has been received or
// timeout passes, and returns the payloads still missing, sorted.
func (c *ClientConsumer) WaitReceivedAll(want map[string]bool, timeout time.Duration) []string {
	var missing []string
	pollClient(timeout, c.exited, func() bool {
		got := map[string]bool{}
		for _, m := range c.Received() {
			got[m.Payload] = true
		}
		missing = missing[:0]
		for p := range want {
			if !got[p] {
				missing = append(missing, p)
			}
		}
		return len(missing) == 0
	})
	sort.Strings(missing)
	return missing
}

// pollClient calls cond every 50 ms until it holds (true) or timeout passes
// (false). A close of stop ends the wait after one more call.
func pollClient(timeout time.Duration, stop <-chan struct{}, cond func() bool) bool {
	deadline := time.After(timeout)
	for {
		if cond() {
			return true
		}
		select {
		case <-stop:
			return cond()
		case <-deadline:
			return cond()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
