package provisionertest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/internal/pki"
	"github.com/magnetar-dev/magnetar/regions/provisioner"
)

// ReadyTimeout bounds how long the suite waits for a cluster to converge.
var ReadyTimeout = 2 * time.Minute

// Run checks the Provisioner contract on a fresh provisioner from newP:
// create, idempotent re-apply, scale up and down, delete.
func Run(t *testing.T, newP func(t *testing.T) provisioner.Provisioner) {
	t.Run("Lifecycle", func(t *testing.T) { lifecycle(t, newP(t)) })
}

func lifecycle(t *testing.T, p provisioner.Provisioner) {
	ctx := t.Context()
	const name = "organizations/conf/clusters/c1"

	if _, err := p.Status(ctx, name); !errors.Is(err, provisioner.ErrNotFound) {
		t.Fatalf("Status of an unknown cluster: want ErrNotFound, got %v", err)
	}
	if err := p.Delete(ctx, name); err != nil {
		t.Fatalf("Delete of an unknown cluster: %v", err)
	}
	if _, err := p.Apply(ctx, provisioner.ClusterSpec{Name: name}); !errors.Is(err, provisioner.ErrInvalidSpec) {
		t.Fatalf("Apply of a zero-size spec: want ErrInvalidSpec, got %v", err)
	}

	spec := provisioner.ClusterSpec{Name: name, Size: provisioner.Size{Brokers: 1, Bookies: 1}, Revision: 7}
	st := WaitReady(t, p, spec)
	if !strings.HasPrefix(st.ServiceURL, "pulsar://") || !strings.HasPrefix(st.AdminURL, "http://") {
		t.Fatalf("READY status with URLs %q %q", st.ServiceURL, st.AdminURL)
	}
	if got := brokersIn(st.ServiceURL); got != 1 {
		t.Fatalf("service URL %q lists %d brokers, want 1", st.ServiceURL, got)
	}
	checkTLS(t, st)
	if st.Name != name || st.Revision != 7 || st.Size != spec.Size {
		t.Fatalf("status %+v does not echo the spec %+v", st, spec)
	}
	names, err := p.List(ctx)
	if err != nil || !slices.Contains(names, name) {
		t.Fatalf("List = %v, %v; want it to contain %s", names, err, name)
	}

	// Idempotent: the same spec again changes nothing.
	again, err := p.Apply(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if again.State != provisioner.StateReady || again.ServiceURL != st.ServiceURL || !samePIDs(st, again) {
		t.Fatalf("re-applying the same spec changed the cluster: before %+v after %+v", st, again)
	}
	got, err := p.Status(ctx, name)
	if err != nil || got.State != provisioner.StateReady || got.ServiceURL != st.ServiceURL {
		t.Fatalf("Status = %+v, %v", got, err)
	}

	// Scale brokers up, then down again.
	spec.Size.Brokers, spec.Revision = 2, 8
	up := WaitReady(t, p, spec)
	if got := brokersIn(up.ServiceURL); got != 2 {
		t.Fatalf("after scaling to 2 brokers the service URL is %q", up.ServiceURL)
	}
	if n := count(up, "broker"); n != 2 {
		t.Fatalf("after scaling to 2 brokers: %d broker processes", n)
	}
	checkTLS(t, up)
	spec.Size.Brokers, spec.Revision = 1, 9
	down := WaitReady(t, p, spec)
	if down.ServiceURL != st.ServiceURL {
		t.Fatalf("after scaling back to 1 broker the service URL is %q, want %q", down.ServiceURL, st.ServiceURL)
	}

	if err := p.Delete(ctx, name); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := p.Status(ctx, name); !errors.Is(err, provisioner.ErrNotFound) {
		t.Fatalf("Status after Delete: want ErrNotFound, got %v", err)
	}
	if names, err := p.List(ctx); err != nil || slices.Contains(names, name) {
		t.Fatalf("List after Delete = %v, %v", names, err)
	}
	if err := p.Delete(ctx, name); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
}

// WaitReady applies spec until the cluster is READY at spec's size, or fails
// the test after ReadyTimeout.
func WaitReady(t testing.TB, p provisioner.Provisioner, spec provisioner.ClusterSpec) provisioner.ClusterStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	var last provisioner.ClusterStatus
	for {
		st, err := p.Apply(ctx, spec)
		if err != nil && ctx.Err() == nil {
			t.Fatalf("Apply(%+v): %v", spec, err)
		}
		if err == nil {
			last = st
			if st.State == provisioner.StateReady && st.Size == spec.Size && count(st, "broker") == spec.Size.Brokers {
				return st
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("cluster %s not READY at %+v after %v; last status %+v", spec.Name, spec.Size, ReadyTimeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func brokersIn(serviceURL string) int {
	_, hosts, _ := strings.Cut(serviceURL, "://")
	return len(strings.Split(hosts, ","))
}

// checkTLS checks the TLS fields of a READY status: all empty, or URLs
// listing the same number of brokers as ServiceURL and a CA certificate.
func checkTLS(t testing.TB, st provisioner.ClusterStatus) {
	t.Helper()
	if st.TLSServiceURL == "" {
		if st.TLSAdminURL != "" || st.CACertPEM != "" {
			t.Fatalf("status without a TLS service URL has TLS admin URL %q and CA %q", st.TLSAdminURL, st.CACertPEM)
		}
		return
	}
	if !strings.HasPrefix(st.TLSServiceURL, "pulsar+ssl://") || !strings.HasPrefix(st.TLSAdminURL, "https://") {
		t.Fatalf("READY status with TLS URLs %q %q", st.TLSServiceURL, st.TLSAdminURL)
	}
	if got, want := brokersIn(st.TLSServiceURL), brokersIn(st.ServiceURL); got != want {
		t.Fatalf("TLS service URL %q lists %d brokers, the service URL %q %d", st.TLSServiceURL, got, st.ServiceURL, want)
	}
	ca, err := pki.ParseCert([]byte(st.CACertPEM))
	if err != nil || !ca.IsCA {
		t.Fatalf("CA certificate of the status: %v (%q)", err, st.CACertPEM)
	}
}

func count(st provisioner.ClusterStatus, role string) int {
	n := 0
	for _, ph := range st.Processes {
		if ph.Role == role {
			n++
		}
	}
	return n
}

func samePIDs(a, b provisioner.ClusterStatus) bool {
	if len(a.Processes) != len(b.Processes) {
		return false
	}
	for i := range a.Processes {
		if a.Processes[i].PID != b.Processes[i].PID {
			return false
		}
	}
	return true
}
