package pgtest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/magnetar-dev/magnetar/internal/freeport"
)

// ErrNotInstalled: initdb, pg_ctl and postgres were not found.
var ErrNotInstalled = errors.New("pgtest: PostgreSQL server binaries (initdb, pg_ctl, postgres) not found in PATH, /usr/lib/postgresql/*/bin or /usr/local/bin")

// RequireEnv names the environment variable that turns a missing
// PostgreSQL from a skip into a failure (CI sets it to 1).
const RequireEnv = "MAGNETAR_REQUIRE_POSTGRES"

// BinEnv names an environment variable that, when set, is the only
// directory FindBinaries looks in.
const BinEnv = "MAGNETAR_POSTGRES_BIN"

// FindBinaries returns the directory holding initdb, pg_ctl and postgres:
// the first of PATH, /usr/lib/postgresql/<newest>/bin, /usr/local/bin
// where all three are ($MAGNETAR_POSTGRES_BIN only, when set).
func FindBinaries() (string, error) {
	var dirs []string
	if d := os.Getenv(BinEnv); d != "" {
		dirs = []string{d}
	} else {
		dirs = searchPath()
	}
	for _, d := range dirs {
		ok := true
		for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
			if fi, err := os.Stat(filepath.Join(d, b)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
				ok = false
				break
			}
		}
		if ok {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w (searched %s)", ErrNotInstalled, strings.Join(dirs, ", "))
}

func searchPath() []string {
	var dirs []string
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	versions, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(versions, func(i, j int) bool { // newest major first
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(versions[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(versions[j])))
		return vi > vj
	})
	dirs = append(dirs, versions...)
	return append(dirs, "/usr/local/bin")
}

// Server is a throw-away PostgreSQL server: its data directory, unix socket
// and log live in one temporary directory that Stop removes. It listens on
// 127.0.0.1 on a free port, runs with fsync off and trusts every local
// connection. When the test runs as root, the server runs as the user
// "nobody" (PostgreSQL refuses to run as root).
type Server struct {
	bin  string
	dir  string
	port int
	cred *syscall.Credential // nil: run as the current user

	cmd    *exec.Cmd
	exited chan struct{} // closed when the postmaster has exited
	log    *bytes.Buffer // not read while the server runs; see logTail

	admin *sql.DB

	mu     sync.Mutex
	nextDB int
}

// Start initializes and starts a server. It returns ErrNotInstalled when
// the binaries are missing.
func Start(ctx context.Context) (_ *Server, err error) {
	bin, err := FindBinaries()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin}
	if os.Geteuid() == 0 {
		if s.cred, err = unprivileged(); err != nil {
			return nil, err
		}
	}
	if s.dir, err = os.MkdirTemp("", "magnetar-pgtest-"); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(s.dir)
		}
	}()
	if s.cred != nil {
		if err := os.Chown(s.dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return nil, fmt.Errorf("pgtest: chown %s: %w", s.dir, err)
		}
	}
	if out, err := s.run(ctx, "initdb", "-D", s.dataDir(), "-U", "postgres", "--auth=trust", "--no-sync",
		"-E", "UTF8", "--locale=C"); err != nil {
		return nil, fmt.Errorf("pgtest: initdb: %w\n%s", err, out)
	}
	if err := os.Mkdir(s.sockDir(), 0o700); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	if s.cred != nil {
		if err := os.Chown(s.sockDir(), int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return nil, fmt.Errorf("pgtest: chown %s: %w", s.sockDir(), err)
		}
	}
	// A port picked now can be taken before postgres binds it: try again.
	for attempt := 1; ; attempt++ {
		err = s.startPostmaster(ctx)
		if err == nil || attempt == 3 || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// unprivileged returns the credentials of "nobody".
func unprivileged() (*syscall.Credential, error) {
	u, err := user.Lookup("nobody")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root and PostgreSQL refuses root; no user \"nobody\" to run it as: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("pgtest: user nobody has uid %q gid %q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }
func (s *Server) sockDir() string { return filepath.Join(s.dir, "sock") }

func (s *Server) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + s.dir, "LC_ALL=C", "TZ=UTC"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	return cmd
}

func (s *Server) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	return s.command(ctx, name, args...).CombinedOutput()
}

// startPostmaster runs postgres as a child of this process (so a crashed
// test binary takes it down: Pdeathsig) and waits until it accepts
// connections.
func (s *Server) startPostmaster(ctx context.Context) error {
	port, err := freeport.Port()
	if err != nil {
		return err
	}
	s.port = port
	// Not CommandContext: the server outlives ctx, which only bounds Start.
	cmd := s.command(context.Background(), "postgres", "-D", s.dataDir(), "-p", strconv.Itoa(port),
		"-k", s.sockDir(), "-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "shared_buffers=32MB")
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT // immediate shutdown if we die
	s.log = &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	s.cmd = cmd
	s.exited = make(chan struct{})
	waitErr := make(chan error, 1)
	go func() { // owned by the Server: Stop waits for exited
		waitErr <- cmd.Wait()
		close(s.exited)
	}()

	admin, err := sql.Open("pgx", s.DSN("postgres"))
	if err != nil {
		_ = s.kill()
		return fmt.Errorf("pgtest: %w", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = admin.PingContext(pctx)
		cancel()
		if err == nil {
			s.admin = admin
			return nil
		}
		select {
		case werr := <-waitErr:
			admin.Close()
			return fmt.Errorf("pgtest: postgres exited at start-up (%v):\n%s", werr, s.log.String())
		case <-ctx.Done():
			admin.Close()
			_ = s.kill()
			return fmt.Errorf("pgtest: waiting for postgres: %w", ctx.Err())
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			admin.Close()
			_ = s.kill()
			return fmt.Errorf("pgtest: postgres not ready after 60s: %w", err)
		}
	}
}

// kill stops the postmaster the way pg_ctl stop -m immediate does (SIGQUIT)
// and waits for it.
func (s *Server) kill() error {
	if s.cmd == nil {
		return nil
	}
	_ = s.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd = nil
	return nil
}

// DSN is the URL of database db on this server.
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

// CreateDatabase creates a new, empty database and returns its DSN and a
// function that drops it (disconnecting anyone still connected).
func (s *Server) CreateDatabase(ctx context.Context) (dsn string, drop func() error, err error) {
	s.mu.Lock()
	s.nextDB++
	name := fmt.Sprintf("test_%d", s.nextDB)
	s.mu.Unlock()
	if _, err := s.admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("pgtest: create database: %w", err)
	}
	drop = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := s.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		return err
	}
	return s.DSN(name), drop, nil
}

// Stop shuts the server down (pg_ctl stop -m immediate) and removes its
// directory.
func (s *Server) Stop() error {
	if s.admin != nil {
		_ = s.admin.Close()
	}
	var err error
	if s.cmd != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, perr := s.run(ctx, "pg_ctl", "stop", "-D", s.dataDir(), "-m", "immediate", "-w")
		cancel()
		if perr != nil {
			err = fmt.Errorf("pgtest: pg_ctl stop: %w\n%s", perr, out)
		}
		select {
		case <-s.exited:
			s.cmd = nil
		default:
			_ = s.kill() // pg_ctl failed or is slow: signal the postmaster ourselves
		}
	}
	return errors.Join(err, os.RemoveAll(s.dir))
}

// Log returns what the server has logged; call it only after Stop.
func (s *Server) Log() string {
	if s.log == nil {
		return ""
	}
	return s.log.String()
}

// The shared server of one test binary.
var shared struct {
	mu     sync.Mutex
	inMain bool
	srv    *Server
	err    error
	tried  bool
}

// Main runs the tests of a package that uses DSN and stops the shared
// server, if any test started it. Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
func Main(m *testing.M) int {
	shared.mu.Lock()
	shared.inMain = true
	shared.mu.Unlock()
	code := m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv != nil {
		if err := shared.srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			if code == 0 {
				code = 1
			}
		}
		shared.srv = nil
	}
	return code
}

// skipOrFail skips t because PostgreSQL is not installed, or fails it
// when MAGNETAR_REQUIRE_POSTGRES=1.
func skipOrFail(t testing.TB, err error) {
	t.Helper()
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%v (%s=1: PostgreSQL is required)", err, RequireEnv)
	}
	t.Skipf("skipping PostgreSQL test: %v (set %s=1 to make this a failure)", err, RequireEnv)
}

// DSN returns the DSN of a fresh, empty database on the shared server,
// starting the server on first use, and drops the database when t ends.
// Without pgtest.Main in TestMain, each call starts its own server and
// stops it when t ends. Skips t when PostgreSQL is not installed, unless
// MAGNETAR_REQUIRE_POSTGRES=1.
func DSN(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := server(ctx, t)
	if err != nil {
		if errors.Is(err, ErrNotInstalled) {
			skipOrFail(t, err)
		}
		t.Fatal(err)
	}
	dsn, drop, err := srv.CreateDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Errorf("pgtest: drop database: %v", err)
		}
	})
	return dsn
}

func server(ctx context.Context, t testing.TB) (*Server, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.inMain {
		srv, err := Start(ctx)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() {
			if err := srv.Stop(); err != nil {
				t.Errorf("%v", err)
			}
		})
		return srv, nil
	}
	if !shared.tried {
		shared.tried = true
		shared.srv, shared.err = Start(ctx)
	}
	return shared.srv, shared.err
}
