package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/controlplane/issuer"
	"github.com/magnetar-dev/magnetar/internal/accesstoken"
)

// clusterAccess reaches a managed cluster's data plane as its users do:
// at the URLs the API publishes (pulsar+ssl:// and https:// when the
// cluster serves TLS), trusting the CA certificate the API returns, and,
// when built with an API key, with access tokens the control plane issues
// for the cluster's audience in exchange for that key.
type clusterAccess struct {
	serviceURL, adminURL string
	caFile               string              // "" when the cluster serves no TLS
	tokens               *accesstoken.Source // nil: anonymous, or oauth2
	aud                  string
	// oauth2, when set, are the parameters of the Pulsar client's oauth2
	// plugin, used instead of tokens.
	oauth2 map[string]string
}

// accessCluster returns the access to cl (a Cluster of the API, e.g. a
// finished operation's response) for apiKey ("" for anonymous clients),
// exchanging it at the control plane at cpBase.
func accessCluster(t *testing.T, cpBase string, cl map[string]any, apiKey string) clusterAccess {
	t.Helper()
	a := clusterAccess{}
	a.serviceURL, _ = cl["serviceUrl"].(string)
	a.adminURL, _ = cl["adminUrl"].(string)
	name, _ := cl["name"].(string)
	if a.serviceURL == "" || a.adminURL == "" || name == "" {
		t.Fatalf("cluster without its name and URLs: %v", cl)
	}
	if ca, _ := cl["caCertificate"].(string); ca != "" {
		a.caFile = filepath.Join(t.TempDir(), "ca.pem")
		if err := os.WriteFile(a.caFile, []byte(ca), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if apiKey != "" {
		a.tokens, a.aud = accesstoken.New(cpBase, apiKey), issuer.ClusterAudience(name)
	}
	return a
}

// token returns an access token for the cluster ("" when anonymous).
func (a clusterAccess) token(ctx context.Context) (string, error) {
	if a.tokens == nil {
		return "", nil
	}
	return a.tokens.Token(ctx, a.aud)
}

// options returns pulsar.ClientOptions for the cluster.
func (a clusterAccess) options() pulsar.ClientOptions {
	o := pulsar.ClientOptions{URL: a.serviceURL, TLSTrustCertsFilePath: a.caFile,
		OperationTimeout: 30 * time.Second, ConnectionTimeout: 5 * time.Second, Logger: quietPulsarLogger()}
	if a.oauth2 != nil {
		o.Authentication = pulsar.NewAuthenticationOAuth2(a.oauth2)
	} else if a.tokens != nil {
		o.Authentication = pulsar.NewAuthenticationTokenFromSupplier(func() (string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return a.token(ctx)
		})
	}
	return o
}

// client returns a Pulsar client of the cluster, closed when the test ends.
func (a clusterAccess) client(t *testing.T) pulsar.Client {
	t.Helper()
	c, err := pulsar.NewClient(a.options())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// http returns an HTTP client for the cluster's admin API: it trusts the
// cluster's CA and sends the access token.
func (a clusterAccess) http(t *testing.T) *http.Client {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second}
	if a.caFile != "" {
		hc = tlsHTTPClient(t, a.caFile)
	}
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	hc.Transport = bearerTransport{base: base, a: a}
	return hc
}

// admin is the cluster's admin URL followed by path ("/admin/v2/...").
func (a clusterAccess) admin(path string) string {
	return strings.TrimSuffix(a.adminURL, "/") + path
}

// bearerTransport adds the cluster's access token to every request.
type bearerTransport struct {
	base http.RoundTripper
	a    clusterAccess
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	tok, err := b.a.token(r.Context())
	if err != nil {
		return nil, err
	}
	if tok != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	return b.base.RoundTrip(r)
}
