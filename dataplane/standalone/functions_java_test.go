package standalone_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/controlplane/store/pgtest"
	"github.com/magnetar-dev/magnetar/dataplane/functions/javainstance"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

// TestJavaFunctionsAdmin runs the Maven project e2e/clients/javafunctions
// (`mvn -B -q -o test`): Apache Pulsar's Java admin client 4.2.4 drives the
// functions worker of an in-process standalone through
// PulsarAdmin.functions(), .sources() and .sinks(). Pulsar's own Java
// instance runs the examples jar's functions and the builtin data-generator
// source and JDBC PostgreSQL sink, the sink into a real PostgreSQL server
// (pgtest) with the table person.
//
// It is skipped when java or mvn is missing, the offline build cannot
// resolve the dependencies (.ci/run resolves them online once), or the
// functions home is missing (javainstance.Locate; lay it out with
// dataplane/functions/javainstance/setup.sh); it fails instead when
// MAGNETAR_REQUIRE_JAVA=1. Without PostgreSQL the sink test is skipped,
// unless MAGNETAR_REQUIRE_POSTGRES=1.
func TestJavaFunctionsAdmin(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an external client and Java function instances")
	}
	const require = "MAGNETAR_REQUIRE_JAVA"
	for _, tool := range []string{"java", "mvn"} {
		if _, err := exec.LookPath(tool); err != nil {
			skipOrFail(t, require, "%s not on PATH: %v", tool, err)
		}
	}
	home, err := javainstance.Locate("")
	if err != nil {
		skipOrFail(t, require, "no functions home: %v", err)
	}
	jars, _ := filepath.Glob(filepath.Join(home.ExamplesDir, "pulsar-functions-api-examples-*.jar"))
	if len(jars) != 1 {
		skipOrFail(t, require, "functions home %s: want one pulsar-functions-api-examples jar in %s, found %d (run %s)",
			home.Dir, home.ExamplesDir, len(jars), javainstance.SetupScript)
	}

	pom := filepath.Join(suiteDir(t, "javafunctions"), "pom.xml")
	build := t.TempDir()
	mvn := func(ctx context.Context, env []string, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "mvn", append([]string{"-B", "-q", "-o", "-f", pom, "-Dmagnetar.buildDir=" + build}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		return cmd.CombinedOutput()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if out, err := mvn(ctx, nil, "test-compile"); err != nil {
		skipOrFail(t, require, "offline Maven build of e2e/clients/javafunctions failed (resolve once online: mvn -f e2e/clients/javafunctions/pom.xml test, as .ci/run does): %v\n%s", err, out)
	}

	env := []string{"MAGNETAR_FUNCTIONS_EXAMPLES=" + jars[0]}
	env = append(env, personTable(t)...)

	dir := t.TempDir()
	cfg := standalonetest.Config(dir, standalonetest.FreeAddr(t))
	cfg.FunctionsJavaHome = home.Dir
	logs := &lockedBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	sa := standalonetest.Start(t, cfg)
	if sa.FunctionsWorker() == nil {
		t.Fatal("the standalone runs no functions worker")
	}
	env = append(env, "MAGNETAR_SERVICE_URL="+sa.ServiceURL(), "MAGNETAR_ADMIN_URL="+sa.WebServiceURL())

	start := time.Now()
	out, err := mvn(ctx, env, "test")
	t.Logf("mvn test (%s):\n%s", time.Since(start).Round(time.Second), out)
	sum, serr := surefireSummary(filepath.Join(build, "surefire-reports"))
	if serr == nil {
		t.Logf("JUnit: %s", sum)
	}
	if err != nil || serr != nil || strings.HasPrefix(sum, "0 tests") {
		t.Logf("functions worker log:\n%s", functionsLines(logs.String()))
		logInstanceOutput(t, filepath.Join(dir, "functions", "logs"))
		t.Fatalf("mvn test failed: %v (reports: %v)", err, serr)
	}
}

// personTable starts a PostgreSQL server, creates a database with the
// table the JDBC sink writes (the columns of the data generator's Person
// it keeps) and returns the suite's JDBC settings. Without PostgreSQL it
// returns none (the sink test skips), unless MAGNETAR_REQUIRE_POSTGRES=1.
func personTable(t *testing.T) []string {
	t.Helper()
	if _, err := pgtest.FindBinaries(); errors.Is(err, pgtest.ErrNotInstalled) && os.Getenv(pgtest.RequireEnv) != "1" {
		t.Logf("no PostgreSQL: the JDBC sink test skips (%v)", err)
		return nil
	}
	dsn := pgtest.DSN(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, `create table person (username text, email text, sex text, age int, password text)`); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return []string{
		"MAGNETAR_JDBC_URL=jdbc:postgresql://" + u.Host + u.Path,
		"MAGNETAR_JDBC_USER=" + u.User.Username(),
	}
}

// lockedBuffer is a log destination shared by the standalone's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// functionsLines keeps the log lines about functions and instances.
func functionsLines(log string) string {
	var keep []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "function") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// logInstanceOutput logs the last lines of every instance's output (the
// *.out files: stdout and stderr; the *.log beside them repeat stdout).
func logInstanceOutput(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(p) != ".out" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		rel, _ := filepath.Rel(dir, p)
		t.Logf("instance output %s (last %d lines):\n%s", rel, len(lines), strings.Join(lines, "\n"))
		return nil
	})
}
