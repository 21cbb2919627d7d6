package auth

import "context"

// TLSProvider authenticates clients by their certificate ("tls"): the role
// is the verified leaf certificate's subject common name. The listener
// verifies the chain against its trust bundle; a connection without a
// verified client certificate is refused here.
type TLSProvider struct{}

var _ Provider = TLSProvider{}

// Method returns "tls".
func (TLSProvider) Method() string { return MethodTLS }

// Authenticate returns the common name of c's leaf certificate.
func (TLSProvider) Authenticate(_ context.Context, c Credentials) (Identity, error) {
	if len(c.PeerCertificates) == 0 {
		return Identity{}, failf("no verified client certificate")
	}
	leaf := c.PeerCertificates[0]
	if leaf.Subject.CommonName == "" {
		return Identity{}, failf("client certificate has no common name")
	}
	return Identity{Role: leaf.Subject.CommonName, Method: MethodTLS, Expires: leaf.NotAfter}, nil
}
