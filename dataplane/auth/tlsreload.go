package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// reloadCheckInterval bounds how often CertReloader stats its files.
const reloadCheckInterval = time.Second

// TLSFiles names a server's certificate, key and (optional) trust bundle,
// or a client's trust bundle and (optional) certificate and key.
type TLSFiles struct {
	CertFile, KeyFile string
	// TrustFile holds the CA certificates client certificates are verified
	// against. Empty: client certificates are not requested. For a client
	// (NewClientCertReloader): the CA certificates server certificates are
	// verified against; empty: the system's roots.
	TrustFile string
	// RequireClientCert refuses handshakes without a verified client
	// certificate; otherwise one is verified when given (Pulsar's
	// tlsRequireTrustedClientCertOnConnect).
	RequireClientCert bool
	// Log, when set, is told of every reload and failed reload.
	Log *slog.Logger
}

// CertReloader serves TLSFiles and re-reads them when their size or
// modification time changes, checked at most once a second on handshakes.
// A file that fails to parse leaves the last good certificate in use.
// A server uses ServerConfig, a client ClientConfig.
type CertReloader struct {
	files TLSFiles
	now   func() time.Time

	mu      sync.Mutex
	checked time.Time
	stamp   [3]fileStamp
	cert    *tls.Certificate
	pool    *x509.CertPool
	lastErr error
}

type fileStamp struct {
	size int64
	mod  time.Time
}

// NewCertReloader loads files once; the first load must succeed.
func NewCertReloader(files TLSFiles) (*CertReloader, error) {
	if files.CertFile == "" || files.KeyFile == "" {
		return nil, errors.New("auth: TLS needs a certificate file and a key file")
	}
	if files.RequireClientCert && files.TrustFile == "" {
		return nil, errors.New("auth: requiring client certificates needs a trust file")
	}
	return newCertReloader(files)
}

// NewClientCertReloader loads a client's files once; the first load must
// succeed. CertFile and KeyFile (a client certificate, for servers that
// verify one) are optional but go together; TrustFile empty means the
// system's roots.
func NewClientCertReloader(files TLSFiles) (*CertReloader, error) {
	if (files.CertFile == "") != (files.KeyFile == "") {
		return nil, errors.New("auth: a TLS client certificate needs both a certificate file and a key file")
	}
	return newCertReloader(files)
}

func newCertReloader(files TLSFiles) (*CertReloader, error) {
	r := &CertReloader{files: files, now: time.Now}
	if err := r.load(r.stamps()); err != nil {
		return nil, err
	}
	r.checked = r.now()
	return r, nil
}

func (r *CertReloader) paths() [3]string {
	return [3]string{r.files.CertFile, r.files.KeyFile, r.files.TrustFile}
}

func (r *CertReloader) stamps() [3]fileStamp {
	var s [3]fileStamp
	for i, p := range r.paths() {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err == nil {
			s[i] = fileStamp{fi.Size(), fi.ModTime()}
		}
	}
	return s
}

func (r *CertReloader) load(st [3]fileStamp) error {
	var cert *tls.Certificate
	if r.files.CertFile != "" {
		c, err := tls.LoadX509KeyPair(r.files.CertFile, r.files.KeyFile)
		if err != nil {
			return fmt.Errorf("auth: TLS certificate: %w", err)
		}
		cert = &c
	}
	var pool *x509.CertPool
	if r.files.TrustFile != "" {
		b, err := os.ReadFile(r.files.TrustFile)
		if err != nil {
			return fmt.Errorf("auth: TLS trust file: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return fmt.Errorf("auth: TLS trust file %s holds no PEM certificate", r.files.TrustFile)
		}
	}
	r.cert, r.pool, r.stamp = cert, pool, st
	return nil
}

// current returns the certificate and pool, reloading changed files.
func (r *CertReloader) current() (*tls.Certificate, *x509.CertPool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); now.Sub(r.checked) >= reloadCheckInterval {
		r.checked = now
		if st := r.stamps(); st != r.stamp {
			// A failed reload (a half-written file) keeps the old pair and
			// is retried at the next check.
			err := r.load(st)
			if log := r.files.Log; log != nil {
				switch {
				case err != nil && (r.lastErr == nil || r.lastErr.Error() != err.Error()):
					log.Warn("TLS files changed but do not load; serving the previous certificate", "cert", r.files.CertFile, "err", err)
				case err == nil:
					log.Info("TLS certificate reloaded", "cert", r.files.CertFile)
				}
			}
			r.lastErr = err
		}
	}
	return r.cert, r.pool
}

// LastReloadError is the error of the most recent failed reload, or nil.
func (r *CertReloader) LastReloadError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}

// Leaf returns the certificate currently served (nil for a client
// without one).
func (r *CertReloader) Leaf() *tls.Certificate {
	c, _ := r.current()
	return c
}

// ServerConfig returns a tls.Config that serves the current certificate
// and verifies client certificates against the current trust bundle.
func (r *CertReloader) ServerConfig() *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		cert, pool := r.current()
		if cert == nil {
			return nil, errors.New("auth: TLS server has no certificate")
		}
		c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*cert}}
		if pool != nil {
			c.ClientCAs = pool
			c.ClientAuth = tls.VerifyClientCertIfGiven
			if r.files.RequireClientCert {
				c.ClientAuth = tls.RequireAndVerifyClientCert
			}
		}
		return c, nil
	}
	return base
}

// ClientConfig returns a tls.Config that presents the current client
// certificate (if any) to servers that ask for one, re-read when its files
// change, and verifies servers against the trust bundle as loaded now: a
// changed trust file takes effect in configs made after the change. The
// dialer sets ServerName (crypto/tls does in tls.Dial, gRPC from the
// target).
func (r *CertReloader) ClientConfig() *tls.Config {
	_, pool := r.current()
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		RootCAs:    pool,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if cert, _ := r.current(); cert != nil {
				return cert, nil
			}
			return &tls.Certificate{}, nil // none: the server decides
		},
	}
}
