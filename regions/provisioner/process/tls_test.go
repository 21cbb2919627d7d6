package process_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"go.uber.org/zap"

	"github.com/magnetar-dev/magnetar/dataplane/auth"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/etcdstore"
	"github.com/magnetar-dev/magnetar/e2e"
	"github.com/magnetar-dev/magnetar/internal/pki"
	"github.com/magnetar-dev/magnetar/regions/provisioner"
	"github.com/magnetar-dev/magnetar/regions/provisioner/process"
	"github.com/magnetar-dev/magnetar/regions/provisioner/provisionertest"
)

// TestTLSCluster provisions a cluster with the default (TLS) settings and
// checks every link: the processes run with TLS flags, the real Pulsar Go
// client produces and consumes over pulsar+ssl:// trusting only the CA
// the status returns, the admin API answers over https://, and the
// metadata store and the bookie refuse plain-text clients and TLS clients
// without a certificate of the region CA (with an error, not a hang),
// while one with such a certificate gets in. The plain listeners keep
// working.
func TestTLSCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	p := newProvisioner(t, dir)
	spec := provisioner.ClusterSpec{Name: "organizations/acme/clusters/sec", Size: provisioner.Size{Brokers: 1, Bookies: 1}, Revision: 1}
	st := provisionertest.WaitReady(t, p, spec)
	if !strings.HasPrefix(st.TLSServiceURL, "pulsar+ssl://127.0.0.1:") || !strings.HasPrefix(st.TLSAdminURL, "https://127.0.0.1:") {
		t.Fatalf("TLS URLs %q %q", st.TLSServiceURL, st.TLSAdminURL)
	}
	for _, ph := range st.Processes {
		if ph.Role == "broker" && "https://"+ph.HTTPSAddr != st.TLSAdminURL {
			t.Fatalf("broker's https address %q, want the one of %s", ph.HTTPSAddr, st.TLSAdminURL)
		}
	}

	// The region CA: under the data directory, key readable by the owner only.
	caFile := filepath.Join(dir, "ca", pki.CertFile)
	onDisk, err := os.ReadFile(caFile)
	if err != nil || string(onDisk) != st.CACertPEM {
		t.Fatalf("CA file %s (%v) differs from the status's CA", caFile, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "ca", pki.KeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("CA key: %v, mode %v", err, fi.Mode())
	}
	trust := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(trust, []byte(st.CACertPEM), 0o644); err != nil {
		t.Fatal(err)
	}

	// Every process runs with its TLS flags.
	byRole := map[string]provisioner.ProcessHealth{}
	for _, ph := range st.Processes {
		byRole[ph.Role] = ph
		args, ok := process.Cmdline(ph.PID)
		if !ok {
			t.Fatalf("%s-%d: no command line", ph.Role, ph.Index)
		}
		for _, flag := range map[string][]string{
			"metadata": {"--tls-require-client-cert", "--peer-tls-require-client-cert"},
			"bookie":   {"--tls-require-client-cert", "--metadata-tls-cert-file"},
			"broker":   {"--bookie-tls-cert-file", "--metadata-tls-cert-file", "--tls-addr", "--https-addr"},
		}[ph.Role] {
			if !slices.Contains(args, flag) {
				t.Errorf("%s-%d runs without %s: %q", ph.Role, ph.Index, flag, args)
			}
		}
	}

	// Produce and consume over pulsar+ssl://, validating the broker's name.
	cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: st.TLSServiceURL, TLSTrustCertsFilePath: trust,
		TLSValidateHostname: true, OperationTimeout: 30 * time.Second, Logger: plog.NewLoggerWithSlog(quiet())})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const topic = "persistent://public/default/over-tls"
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatalf("subscribe over %s: %v", st.TLSServiceURL, err)
	}
	defer cons.Close()
	prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatalf("producer over %s: %v", st.TLSServiceURL, err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 20
	for i := range n {
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte{byte(i)}}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	for i := range n {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if got := m.Payload(); len(got) != 1 || got[0] != byte(i) {
			t.Fatalf("message %d: %v", i, got)
		}
		cons.Ack(m)
	}
	produceConsume(t, st.ServiceURL, "persistent://public/default/plain-too", "plain")

	// The admin API over https://, trusting the CA only.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(st.CACertPEM))
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := hc.Get(st.TLSAdminURL + "/admin/v2/brokers/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("health over https: %s", resp.Status)
	}

	// The metadata store: plain text and a TLS client without a client
	// certificate are refused; the broker's certificate is let in.
	md := byRole["metadata"].Addr
	clusterTLS := filepath.Join(dir, "clusters", "acme-sec", "tls")
	withCert := clientConf(t, trust, filepath.Join(clusterTLS, "broker-0.pem"), filepath.Join(clusterTLS, "broker-0-key.pem"))
	noCert := clientConf(t, trust, "", "")
	for _, tc := range []struct {
		name, endpoint string
		tls            *tls.Config
		ok             bool
	}{
		{"plain text", "http://" + md, nil, false},
		{"TLS without a client certificate", "https://" + md, noCert, false},
		{"TLS with the broker's certificate", "https://" + md, withCert, true},
	} {
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		s, err := etcdstore.New(cctx, etcdstore.Config{Endpoints: []string{tc.endpoint}, TLS: tc.tls, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
		switch {
		case cctx.Err() != nil:
			t.Errorf("metadata store, %s: New returned only at the test's deadline: %v", tc.name, err)
		case tc.ok && err != nil:
			t.Errorf("metadata store, %s: %v", tc.name, err)
		case !tc.ok && err == nil:
			t.Errorf("metadata store, %s: connected", tc.name)
		}
		if err == nil {
			s.Close()
		}
		ccancel()
	}

	// The bookie: the same three clients.
	bk := byRole["bookie"].Addr
	for _, tc := range []struct {
		name string
		cfg  wire.ClientConfig
		ok   bool
	}{
		{"plain text", wire.ClientConfig{}, false},
		{"TLS without a client certificate", wire.ClientConfig{TLS: noCert}, false},
		{"TLS with the broker's certificate", wire.ClientConfig{TLS: withCert}, true},
	} {
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		c, err := wire.Dial(cctx, bk, tc.cfg)
		switch {
		case cctx.Err() != nil:
			t.Errorf("bookie, %s: Dial returned only at the test's deadline: %v", tc.name, err)
		case tc.ok && err != nil:
			t.Errorf("bookie, %s: %v", tc.name, err)
		case !tc.ok && err == nil:
			t.Errorf("bookie, %s: connected", tc.name)
		}
		if err == nil {
			c.Close()
		}
		ccancel()
	}
}

func clientConf(t *testing.T, trust, cert, key string) *tls.Config {
	t.Helper()
	r, err := auth.NewClientCertReloader(auth.TLSFiles{TrustFile: trust, CertFile: cert, KeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	return r.ClientConfig()
}

// TestInsecureConformance runs the conformance suite with
// InsecureDataPlanes: no TLS URLs, no CA.
func TestInsecureConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	provisionertest.Run(t, func(t *testing.T) provisioner.Provisioner {
		dir := t.TempDir()
		p, err := process.New(process.Config{DataDir: dir, Binary: e2e.Binary(t), Logger: quiet(),
			CheckInterval: 200 * time.Millisecond, StopGrace: 5 * time.Second, InsecureDataPlanes: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			p.Close()
			if err := p.StopAll(context.Background()); err != nil {
				t.Errorf("StopAll: %v", err)
			}
			if _, err := os.Stat(filepath.Join(dir, "ca")); err == nil {
				t.Errorf("an insecure provisioner created a CA")
			}
		})
		return p
	})
}
