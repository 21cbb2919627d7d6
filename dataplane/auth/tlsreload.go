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

// TLSFiles names a server's certificate, key and (optional) trust bundle.
type TLSFiles struct {
	CertFile, KeyFile string
	// TrustFile holds the CA certificates client certificates are verified
	// against. Empty: client certificates are not requested.
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
	cert, err := tls.LoadX509KeyPair(r.files.CertFile, r.files.KeyFile)
	if err != nil {
		return fmt.Errorf("auth: TLS certificate: %w", err)
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
	r.cert, r.pool, r.stamp = &cert, pool, st
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

// Leaf returns the certificate currently served.
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
