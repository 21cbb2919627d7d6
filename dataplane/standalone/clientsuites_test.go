package standalone_test

import (
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

// The everyday suites of the two other reference clients, run against an
// in-process standalone: e2e/clients/python (pytest, the Apache Pulsar
// Python client, a binding of the C++ client libpulsar) and e2e/clients/java
// (JUnit 5 under Maven, the Java client and admin client). Each suite gets
// the broker's addresses as MAGNETAR_SERVICE_URL and MAGNETAR_ADMIN_URL.
// docs/compatibility.md lists their results.

// skipOrFail skips the test, or fails it when the environment variable
// require is "1" (CI sets it once the client's toolchain is installed).
func skipOrFail(t *testing.T, require, format string, args ...any) {
	t.Helper()
	if os.Getenv(require) == "1" {
		t.Fatalf(format+" ("+require+"=1)", args...)
	}
	t.Skipf(format+" ("+require+"=1 makes this a failure)", args...)
}

func suiteDir(t *testing.T, name string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "e2e", "clients", name))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func startForSuite(t *testing.T) []string {
	t.Helper()
	cfg := standalonetest.Config(t.TempDir(), standalonetest.FreeAddr(t))
	// 1 MiB, as Pulsar's own test setups: the suites' chunking and
	// too-big tests rely on it.
	cfg.Broker.MaxMessageSize = 1 << 20
	sa := standalonetest.Start(t, cfg)
	return []string{"MAGNETAR_SERVICE_URL=" + sa.ServiceURL(), "MAGNETAR_ADMIN_URL=" + sa.WebServiceURL()}
}

// TestPythonClient runs the pytest suite in e2e/clients/python. It is
// skipped when python3 cannot import pulsar (pip install
// pulsar-client==3.13.0) or pytest.
func TestPythonClient(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an external client")
	}
	dir := suiteDir(t, "python")
	if out, err := exec.Command("python3", "-c", "import pulsar, pytest").CombinedOutput(); err != nil {
		skipOrFail(t, "MAGNETAR_REQUIRE_PYTHON_PULSAR", "python3 cannot import pulsar and pytest (pip install pulsar-client==3.13.0 pytest): %v\n%s", err, out)
	}
	env := startForSuite(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "python3", "-m", "pytest", "-q", "-rfEsxX", "-p", "no:cacheprovider", dir)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	t.Logf("pytest:\n%s", out)
	if err != nil {
		t.Fatalf("pytest failed: %v", err)
	}
}

// TestJavaClient runs the Maven project e2e/clients/java (`mvn -B -q -o
// test`), its output in a temporary directory. It builds offline: Maven's local
// repository must already hold the dependencies (.ci/run resolves them
// online once). It is skipped when java or mvn is missing or the offline
// build cannot resolve them, and fails instead when MAGNETAR_REQUIRE_JAVA=1.
func TestJavaClient(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an external client")
	}
	const require = "MAGNETAR_REQUIRE_JAVA"
	for _, tool := range []string{"java", "mvn"} {
		if _, err := exec.LookPath(tool); err != nil {
			skipOrFail(t, require, "%s not on PATH: %v", tool, err)
		}
	}
	pom := filepath.Join(suiteDir(t, "java"), "pom.xml")
	build := t.TempDir()
	mvn := func(ctx context.Context, env []string, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "mvn", append([]string{"-B", "-q", "-o", "-f", pom, "-Dmagnetar.buildDir=" + build}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		return cmd.CombinedOutput()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if out, err := mvn(ctx, nil, "test-compile"); err != nil {
		skipOrFail(t, require, "offline Maven build of e2e/clients/java failed (resolve once online: mvn -f e2e/clients/java/pom.xml test, as .ci/run does): %v\n%s", err, out)
	}
	env := startForSuite(t)
	out, err := mvn(ctx, env, "test")
	t.Logf("mvn test:\n%s", out)
	if sum, serr := surefireSummary(filepath.Join(build, "surefire-reports")); serr == nil {
		t.Logf("JUnit: %s", sum)
	}
	if err != nil {
		t.Fatalf("mvn test failed: %v", err)
	}
}

// surefireSummary totals the TEST-*.xml reports in dir and lists the tests
// that failed or were skipped.
func surefireSummary(dir string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "TEST-*.xml"))
	if err != nil || len(files) == 0 {
		return "", fmt.Errorf("no reports in %s: %v", dir, err)
	}
	type testcase struct {
		Class   string    `xml:"classname,attr"`
		Name    string    `xml:"name,attr"`
		Failure *struct{} `xml:"failure"`
		Error   *struct{} `xml:"error"`
		Skipped *struct {
			Message string `xml:"message,attr"`
		} `xml:"skipped"`
	}
	var total, failed, skipped int
	var notes []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		var suite struct {
			Cases []testcase `xml:"testcase"`
		}
		if err := xml.Unmarshal(b, &suite); err != nil {
			return "", fmt.Errorf("%s: %w", f, err)
		}
		for _, c := range suite.Cases {
			total++
			name := c.Class[strings.LastIndexByte(c.Class, '.')+1:] + "." + c.Name
			switch {
			case c.Failure != nil || c.Error != nil:
				failed++
				notes = append(notes, "FAIL "+name)
			case c.Skipped != nil:
				skipped++
				notes = append(notes, "SKIP "+name+": "+c.Skipped.Message)
			}
		}
	}
	sort.Strings(notes)
	return fmt.Sprintf("%d tests, %d passed, %d failed, %d skipped\n%s",
		total, total-failed-skipped, failed, skipped, strings.Join(notes, "\n")), nil
}
