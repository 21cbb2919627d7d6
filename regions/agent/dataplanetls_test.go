package agent

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/internal/pki"
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
