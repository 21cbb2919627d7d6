package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The addresses the upstream suite has compiled in (pulsar://localhost:6650,
// http://localhost:8080); the bookie's is ours.
const (
	brokerAddr = "127.0.0.1:6650"
	httpAddr   = "127.0.0.1:8080"
	bookieAddr = "127.0.0.1:3181"
	adminURL   = "http://" + httpAddr + "/admin/v2"
)

// standalone is one `magnetar standalone` process with a fresh data dir.
type standalone struct {
	bin     string
	flags   []string // extra flags
	dataDir string
	logPath string

	cmd    *exec.Cmd
	log    *os.File
	exited chan struct{} // closed when the process has been reaped
	err    error         // its exit status, after exited
}

// startStandalone wipes dataDir, starts the process with its output in
// logPath, waits for health and applies the upstream CI setup.
func startStandalone(ctx context.Context, bin string, flags []string, dataDir, logPath string) (*standalone, error) {
	for _, a := range []string{brokerAddr, httpAddr, bookieAddr} {
		if err := waitPortFree(ctx, a, 30*time.Second); err != nil {
			return nil, err
		}
	}
	if err := os.RemoveAll(dataDir); err != nil {
		return nil, err
	}
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args := append([]string{"standalone",
		"--data-dir", dataDir,
		"--broker-addr", brokerAddr,
		"--http-addr", httpAddr,
		"--bookie-addr", bookieAddr,
	}, withoutAdminToken(flags)...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, err
	}
	s := &standalone{bin: bin, flags: flags, dataDir: dataDir, logPath: logPath, cmd: cmd, log: lf, exited: make(chan struct{})}
	go func() {
		s.err = cmd.Wait()
		close(s.exited)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for !s.healthy(ctx) {
		if !s.alive() {
			return nil, fmt.Errorf("magnetar standalone exited during start (%v); see %s", s.err, logPath)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.stop()
			return nil, fmt.Errorf("magnetar standalone not healthy after 60s; see %s", logPath)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := setupLikeUpstreamCI(ctx, adminTokenOf(flags)); err != nil {
		s.stop()
		return nil, fmt.Errorf("setup: %w", err)
	}
	return s, nil
}

// secureFlags configure the standalone as upstream CI's broker for the
// TLS and authentication tests (M6): TLS on 6651 and 8443 with the suite's
// certificates (issued for localhost, so the advertised host is
// localhost), the tls, token and basic providers, authorization with
// superusers localhost, superUser and admin, and anonymous clients as
// "anonymous".
func secureFlags(upstream string) []string {
	it := filepath.Join(upstream, "integration-tests")
	return []string{
		"--advertised-address", "localhost:6650",
		"--tls-addr", "127.0.0.1:6651", "--https-addr", "127.0.0.1:8443",
		"--tls-cert-file", filepath.Join(it, "certs", "broker-cert.pem"),
		"--tls-key-file", filepath.Join(it, "certs", "broker-key.pem"),
		"--tls-trust-certs-file", filepath.Join(it, "certs", "cacert.pem"),
		"--auth-tls",
		"--auth-token-secret-key", filepath.Join(it, "tokens", "secret.key"),
		"--auth-basic-htpasswd", filepath.Join(it, "conf", ".htpasswd"),
		"--anonymous-role", "anonymous",
		"--superuser-roles", "localhost,superUser,admin",
		"--authorization",
		adminTokenFlag, filepath.Join(it, "tokens", "admin-token"),
	}
}

// adminTokenFlag is not a magnetar flag: startStandalone strips it and the
// setup authenticates with the file it names.
const adminTokenFlag = "--compatrun-admin-token"

// adminTokenOf returns the token of an adminTokenFlag in flags, or "".
func adminTokenOf(flags []string) string {
	for i, f := range flags {
		if f == adminTokenFlag && i+1 < len(flags) {
			b, _ := os.ReadFile(flags[i+1])
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}

// withoutAdminToken drops adminTokenFlag and its value.
func withoutAdminToken(flags []string) []string {
	out := make([]string, 0, len(flags))
	for i := 0; i < len(flags); i++ {
		if flags[i] == adminTokenFlag {
			i++
			continue
		}
		out = append(out, flags[i])
	}
	return out
}

// alive reports whether the process is still running.
func (s *standalone) alive() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// healthy asks GET /admin/v2/brokers/health and checks the binary port
// accepts connections.
func (s *standalone) healthy(ctx context.Context) bool {
	if !s.alive() {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, adminURL+"/brokers/health", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	c, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", brokerAddr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// logSize is the current length of the broker log.
func (s *standalone) logSize() int64 {
	fi, err := os.Stat(s.logPath)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// stop sends SIGTERM, waits up to 30 s, then kills the process group.
func (s *standalone) stop() {
	if s == nil {
		return
	}
	defer s.log.Close()
	if !s.alive() {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
	}
}

// waitPortFree waits until nothing listens on addr, so the suite never
// talks to a broker this runner did not start.
func waitPortFree(ctx context.Context, addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return nil
		}
		c.Close()
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("something else listens on %s; stop it first (the suite's addresses are fixed)", addr)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// setupLikeUpstreamCI does what scripts/pulsar-test-service-start.sh does
// and Magnetar supports: tenant public with admin role anonymous,
// produce+consume for anonymous on public/default, tenant private and
// namespace private/auth with produce+consume for token-principal.
// The M6 broker (authorization on) enforces the permissions; the plain one
// stores them.
func setupLikeUpstreamCI(ctx context.Context, token string) error {
	steps := []struct {
		method, path, body string
	}{
		{http.MethodPost, "/tenants/public", `{"adminRoles":["anonymous"],"allowedClusters":["standalone"]}`},
		{http.MethodPost, "/namespaces/public/default/permissions/anonymous", `["produce","consume"]`},
		{http.MethodPut, "/tenants/private", `{"adminRoles":[],"allowedClusters":["standalone"]}`},
		{http.MethodPut, "/namespaces/private/auth", `{}`},
		{http.MethodPost, "/namespaces/private/auth/permissions/token-principal", `["produce","consume"]`},
	}
	for _, st := range steps {
		if err := adminCall(ctx, st.method, st.path, st.body, token); err != nil {
			return err
		}
	}
	return nil
}

func adminCall(ctx context.Context, method, path, body, token string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, adminURL+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	return nil
}

// brokerExcerpt returns the warning/error lines (and any panic) the broker
// logged between offsets from and to, at most max lines.
func brokerExcerpt(path string, from, to int64, max int) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	if to <= from {
		return nil
	}
	buf := make([]byte, to-from)
	n, err := f.ReadAt(buf, from)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil
	}
	var out []string
	inPanic := false
	for _, l := range strings.Split(string(buf[:n]), "\n") {
		if strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "fatal error:") || strings.HasPrefix(l, "WARNING: DATA RACE") {
			inPanic = true
		}
		if inPanic || strings.Contains(l, " level=WARN") || strings.Contains(l, " level=ERROR") ||
			strings.Contains(l, " WARN ") || strings.Contains(l, " ERROR ") {
			out = append(out, l)
			if len(out) >= max {
				out = append(out, "… (truncated)")
				break
			}
		}
	}
	return out
}

// brokerBinary resolves bin to an absolute path.
func brokerBinary(bin string) (string, error) {
	p, err := filepath.Abs(bin)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("magnetar binary: %w", err)
	}
	return p, nil
}
