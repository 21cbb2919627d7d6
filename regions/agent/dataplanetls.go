package agent

// The agent's admin calls go to a data plane's https:// admin URL when it
// serves TLS (its status names TLS URLs and the CA certificate of its
// processes), so the agent's tokens never cross the network in the clear.
// One transport carries every admin client's requests; it verifies a
// data plane's certificate against the CA certificates of every status the
// agent has seen (a region's clusters share their provisioner's CA, and a
// replaced CA is added when a status names it).

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// dataPlaneTrust holds the CA certificates of the data planes' TLS
// listeners.
type dataPlaneTrust struct {
	mu   sync.Mutex
	pems map[string]bool
	pool atomic.Pointer[x509.CertPool]
}

// add trusts the CA certificates of caPEM (a status's CACertPEM).
func (t *dataPlaneTrust) add(caPEM string) {
	if caPEM == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pems[caPEM] {
		return
	}
	pool := x509.NewCertPool()
	if old := t.pool.Load(); old != nil {
		pool = old.Clone()
	}
	if !pool.AppendCertsFromPEM([]byte(caPEM)) {
		return
	}
	if t.pems == nil {
		t.pems = map[string]bool{}
	}
	t.pems[caPEM] = true
	t.pool.Store(pool)
}

// dialTLS dials addr and verifies its certificate against the trusted CA
// certificates and its host name (an IP address against the
// certificate's IP addresses).
func (t *dataPlaneTrust) dialTLS(ctx context.Context, network, addr string) (net.Conn, error) {
	pool := t.pool.Load()
	if pool == nil {
		return nil, errors.New("agent: no data plane's CA certificate is known yet")
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	raw, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c := tls.Client(raw, &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12})
	if err := c.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	return c, nil
}

// newAdminTransport returns the transport of the agent's admin calls:
// https:// through trust, http:// as usual.
func newAdminTransport(trust *dataPlaneTrust) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialTLSContext = trust.dialTLS
	return tr
}
