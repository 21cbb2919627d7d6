package main

import (
	"crypto/tls"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/magnetar-dev/magnetar/dataplane/auth"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/etcdstore"
)

// tlsServerFlags are a TLS listener's files: --<prefix>tls-cert-file,
// --<prefix>tls-key-file, --<prefix>tls-trust-certs-file and
// --<prefix>tls-require-client-cert (Pulsar's tlsCertificateFilePath,
// tlsKeyFilePath, tlsTrustCertsFilePath, tlsRequireTrustedClientCertOnConnect).
type tlsServerFlags struct {
	certFile, keyFile, trustFile string
	requireClientCert            bool
}

// register adds the flags; what names the listener in their help, note
// (if any) is added to the certificate's.
func (t *tlsServerFlags) register(f *pflag.FlagSet, prefix, what, note string) {
	f.StringVar(&t.certFile, prefix+"tls-cert-file", "", "PEM certificate chain of "+what+" (re-read when it changes)"+note)
	f.StringVar(&t.keyFile, prefix+"tls-key-file", "", "PEM private key of "+what+" (re-read when it changes)")
	f.StringVar(&t.trustFile, prefix+"tls-trust-certs-file", "", "PEM CA certificates client certificates of "+what+" are verified against (enables client certificates)")
	f.BoolVar(&t.requireClientCert, prefix+"tls-require-client-cert", false, "refuse clients of "+what+" without a trusted certificate")
}

func (t *tlsServerFlags) set() bool { return t.certFile != "" || t.keyFile != "" }

// serverConfig returns the listener's reloading TLS configuration, or nil
// when no certificate is given.
func (t *tlsServerFlags) serverConfig() (*tls.Config, error) {
	if !t.set() {
		return nil, nil
	}
	r, err := auth.NewCertReloader(auth.TLSFiles{CertFile: t.certFile, KeyFile: t.keyFile, TrustFile: t.trustFile,
		RequireClientCert: t.requireClientCert, Log: slog.Default()})
	if err != nil {
		return nil, err
	}
	return r.ServerConfig(), nil
}

// etcd returns the files as an etcd member's listener settings.
func (t *tlsServerFlags) etcd() etcdstore.ServerTLS {
	return etcdstore.ServerTLS{CertFile: t.certFile, KeyFile: t.keyFile, TrustFile: t.trustFile, ClientCertAuth: t.requireClientCert}
}

// tlsClientFlags are a client's TLS files for the links to one kind of
// server: --<prefix>-tls-trust-certs-file, --<prefix>-tls-cert-file and
// --<prefix>-tls-key-file.
type tlsClientFlags struct {
	trustFile, certFile, keyFile string
}

// register adds the flags; what names the servers in their help, when
// says when the links use TLS.
func (t *tlsClientFlags) register(f *pflag.FlagSet, prefix, what, when string) {
	f.StringVar(&t.trustFile, prefix+"-tls-trust-certs-file", "", "PEM CA certificates the certificates of "+what+" are verified against (default: the system's roots); "+when)
	f.StringVar(&t.certFile, prefix+"-tls-cert-file", "", "PEM client certificate presented to "+what+" when asked for one (re-read when it changes)")
	f.StringVar(&t.keyFile, prefix+"-tls-key-file", "", "PEM private key of --"+prefix+"-tls-cert-file")
}

func (t *tlsClientFlags) set() bool { return t.trustFile != "" || t.certFile != "" || t.keyFile != "" }

// clientConfig returns the client TLS configuration, or nil when no flag
// is given.
func (t *tlsClientFlags) clientConfig() (*tls.Config, error) {
	if !t.set() {
		return nil, nil
	}
	r, err := auth.NewClientCertReloader(auth.TLSFiles{CertFile: t.certFile, KeyFile: t.keyFile, TrustFile: t.trustFile, Log: slog.Default()})
	if err != nil {
		return nil, err
	}
	return r.ClientConfig(), nil
}
