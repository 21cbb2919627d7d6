package agent

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/internal/pki"
	"github.com/magnetar-dev/magnetar/regions/provisioner"
)

// TestAdminTransportTrust: the agent's admin transport reaches an
// https:// data plane only once a status named the CA of its certificate,
// and refuses one whose certificate another CA signed.
func TestAdminTransportTrust(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	other, err := pki.Create("another CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := func(s *httptest.Server) string {
		return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw}))
	}
	var trust dataPlaneTrust
	hc := &http.Client{Transport: newAdminTransport(&trust)}
	get := func() error {
		resp, err := hc.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(); err == nil || !strings.Contains(err.Error(), "no data plane's CA") {
		t.Fatalf("before any CA is known: %v", err)
	}
	trust.add(string(other.CertPEM))
	if err := get(); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("with another CA only: %v, want a certificate error", err)
	}
	trust.add(certPEM(srv))
	if err := get(); err != nil {
		t.Fatalf("with its CA: %v", err)
	}
}

// statusProvisioner answers Status with st.
type statusProvisioner struct {
	provisioner.Provisioner
	st provisioner.ClusterStatus
}

func (p statusProvisioner) Status(context.Context, string) (provisioner.ClusterStatus, error) {
	return p.st, nil
}

// TestAdminURLsOfTLSClusters: for a cluster serving TLS the agent's admin
// calls (the cluster's admin URL, each broker's for metering) use its
// https:// URLs; a plain-text cluster's stay http://.
func TestAdminURLsOfTLSClusters(t *testing.T) {
	ca, err := pki.Create("region CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	brokers := []provisioner.ProcessHealth{
		{Role: "metadata", Addr: "h:2379"},
		{Role: "broker", Addr: "h:6650", HTTPAddr: "h:8080", HTTPSAddr: "h:8443"},
	}
	secure := provisioner.ClusterStatus{ServiceURL: "pulsar://h:6650", AdminURL: "http://h:8080",
		TLSServiceURL: "pulsar+ssl://h:6651", TLSAdminURL: "https://h:8443", CACertPEM: string(ca.CertPEM), Processes: brokers}
	plain := provisioner.ClusterStatus{ServiceURL: "pulsar://h:6650", AdminURL: "http://h:8080",
		Processes: []provisioner.ProcessHealth{{Role: "broker", HTTPAddr: "h:8080"}}}
	for _, c := range []struct {
		name         string
		st           provisioner.ClusterStatus
		admin, meter string
	}{
		{"tls", secure, "https://h:8443", "https://h:8443"},
		{"plain", plain, "http://h:8080", "http://h:8080"},
	} {
		if _, admin := clientURLs(c.st); admin != c.admin {
			t.Errorf("%s: admin URL %q, want %q", c.name, admin, c.admin)
		}
		a := &Agent{prov: statusProvisioner{st: c.st}}
		if got := a.brokerAdminURLs(t.Context(), "c", "fallback"); len(got) != 1 || got[0] != c.meter {
			t.Errorf("%s: metering URLs %q, want [%s]", c.name, got, c.meter)
		}
	}
}
