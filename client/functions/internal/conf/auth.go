package conf

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/apache/pulsar-client-go/pulsar"
)

// The plugin names Pulsar's clients give token authentication.
var tokenPlugins = map[string]bool{
	"token": true,
	"org.apache.pulsar.client.impl.auth.AuthenticationToken": true,
}

// TokenSource is a function returning the bearer token to send now.
type TokenSource func() (string, error)

// TokenSource returns the source of the bearer token the authentication
// fields name, or nil when they name none.
//
// clientAuthenticationParameters take the forms Pulsar's
// AuthenticationToken accepts: "token:<jwt>", "file:///path" (read again at
// every use, so a rotated file is picked up), a JSON object {"token": ...}
// or {"file": ...}, or, with the token plugin named, the bare token. With
// no plugin named only the prefixed and JSON forms count as a token.
func (c *Conf) TokenSource() (TokenSource, error) {
	plugin := strings.TrimSpace(c.ClientAuthenticationPlugin)
	params := strings.TrimSpace(c.ClientAuthenticationParameters)
	if params == "" || (plugin != "" && !tokenPlugins[plugin]) {
		return nil, nil
	}
	switch {
	case strings.HasPrefix(params, "token:"):
		return staticToken(strings.TrimPrefix(params, "token:"))
	case strings.HasPrefix(params, "file:"):
		return fileToken(params)
	case strings.HasPrefix(params, "{"):
		var m map[string]string
		if err := json.Unmarshal([]byte(params), &m); err != nil {
			return nil, fmt.Errorf("conf: clientAuthenticationParameters: %w", err)
		}
		if t := m["token"]; t != "" {
			return staticToken(t)
		}
		if f := m["file"]; f != "" {
			return fileToken(f)
		}
		if plugin == "" {
			return nil, nil
		}
		return nil, errors.New(`conf: clientAuthenticationParameters name neither "token" nor "file"`)
	case plugin == "":
		return nil, nil
	default:
		return staticToken(params)
	}
}

func staticToken(t string) (TokenSource, error) {
	t = strings.TrimSpace(t)
	if t == "" {
		return nil, errors.New("conf: clientAuthenticationParameters carry an empty token")
	}
	return func() (string, error) { return t, nil }, nil
}

// fileToken reads the token from a file named by a file: URL or a path.
func fileToken(ref string) (TokenSource, error) {
	path := ref
	if strings.HasPrefix(ref, "file:") {
		u, err := url.Parse(ref)
		if err != nil {
			return nil, fmt.Errorf("conf: token file %q: %w", ref, err)
		}
		path = u.Path
		if path == "" {
			path = u.Opaque
		}
	}
	if path == "" {
		return nil, fmt.Errorf("conf: token file %q names no path", ref)
	}
	return func() (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("token file: %w", err)
		}
		t := strings.TrimSpace(string(b))
		if t == "" {
			return "", fmt.Errorf("token file %s is empty", path)
		}
		return t, nil
	}, nil
}

// PulsarAuth returns the Pulsar client authentication the fields name, or
// nil for none. Tokens use TokenSource; any other plugin is handed to the
// Pulsar client with its parameters as a JSON object, converting Pulsar's
// "key:value,key:value" form when needed.
func (c *Conf) PulsarAuth() (pulsar.Authentication, error) {
	src, err := c.TokenSource()
	if err != nil {
		return nil, err
	}
	if src != nil {
		return pulsar.NewAuthenticationTokenFromSupplier(src), nil
	}
	plugin := strings.TrimSpace(c.ClientAuthenticationPlugin)
	if plugin == "" {
		return nil, nil
	}
	params := strings.TrimSpace(c.ClientAuthenticationParameters)
	if !strings.HasPrefix(params, "{") {
		m := map[string]string{}
		for _, kv := range strings.Split(params, ",") {
			if kv = strings.TrimSpace(kv); kv == "" {
				continue
			}
			k, v, ok := strings.Cut(kv, ":")
			if !ok {
				return nil, fmt.Errorf("conf: clientAuthenticationParameters: %q is not key:value", kv)
			}
			m[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
		b, _ := json.Marshal(m)
		params = string(b)
	}
	a, err := pulsar.NewAuthentication(plugin, params)
	if err != nil {
		return nil, fmt.Errorf("conf: authentication plugin %q: %w", plugin, err)
	}
	return a, nil
}

// HTTPTLSConfig is the TLS configuration for https URLs (the state API):
// the trusted certificates and the insecure flag of the broker connection.
func (c *Conf) HTTPTLSConfig() (*tls.Config, error) {
	cfg := &tls.Config{InsecureSkipVerify: c.TLSAllowInsecureConnection}
	if c.TLSTrustCertsFilePath != "" {
		pem, err := os.ReadFile(c.TLSTrustCertsFilePath)
		if err != nil {
			return nil, fmt.Errorf("conf: tlsTrustCertsFilePath: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("conf: tlsTrustCertsFilePath %s holds no PEM certificate", c.TLSTrustCertsFilePath)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}
