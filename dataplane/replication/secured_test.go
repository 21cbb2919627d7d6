package replication_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin/config"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	pb "github.com/magnetar-dev/magnetar/api/pulsarwire"
	"github.com/magnetar-dev/magnetar/dataplane/auth"
	"github.com/magnetar-dev/magnetar/dataplane/auth/authtest"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
	"github.com/magnetar-dev/magnetar/dataplane/replication"
	"github.com/magnetar-dev/magnetar/dataplane/standalone"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
	"github.com/magnetar-dev/magnetar/policy"
)

// securedRegion is a standalone with TLS, token authentication and
// authorization (superuser "admin"), its own CA and its own token key.
type securedRegion struct {
	name   string
	s      *standalone.Standalone
	ca     *authtest.CA
	secret []byte
	admin  pulsaradmin.Client
}

func startSecuredRegion(t *testing.T, name string) *securedRegion {
	t.Helper()
	ca := authtest.NewCA(t)
	certFile, keyFile := ca.Issue(t, name, "broker", "127.0.0.1", "localhost")
	secret, err := auth.NewSecretKey()
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.NewTokenProvider(auth.TokenConfig{SecretKey: secret})
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.NewAuthenticator("", tokens)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.New()
	if err != nil {
		t.Fatal(err)
	}
	r, err := auth.NewCertReloader(auth.TLSFiles{CertFile: certFile, KeyFile: keyFile, TrustFile: ca.File})
	if err != nil {
		t.Fatal(err)
	}
	cfg := standalonetest.Config(t.TempDir(), standalonetest.FreeAddr(t))
	cfg.Broker.ClusterName = name
	cfg.Broker.TLSAddr = "127.0.0.1:0"
	cfg.Broker.TLSConfig = r.ServerConfig()
	cfg.Broker.Authenticator = a
	cfg.Broker.Authorizer = auth.NewAuthorizer(eng, []string{"admin"})
	s := standalonetest.Start(t, cfg)
	sr := &securedRegion{name: name, s: s, ca: ca, secret: secret}
	adm, err := pulsaradmin.NewClient(&config.Config{WebServiceURL: s.WebServiceURL(), Token: sr.token(t, "admin")})
	if err != nil {
		t.Fatal(err)
	}
	sr.admin = adm
	return sr
}

func (sr *securedRegion) token(t *testing.T, role string) string {
	t.Helper()
	tok, err := auth.Mint(sr.secret, auth.MintOptions{Subject: role, Expiry: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// register records remote in r's cluster registry: its TLS broker URL, its
// CA, and the token r's replicators present there.
func (sr *securedRegion) register(t *testing.T, remote *securedRegion, token string) {
	t.Helper()
	body := fmt.Sprintf(`{"serviceUrl":%q,"brokerServiceUrlTls":%q,"brokerClientTlsEnabled":true,
		"brokerClientTrustCertsFilePath":%q,
		"authenticationPlugin":"org.apache.pulsar.client.impl.auth.AuthenticationToken","authenticationParameters":"token:%s"}`,
		remote.s.WebServiceURL(), remote.s.Broker().ServiceURLTLS(), remote.ca.File, token)
	req, _ := http.NewRequest(http.MethodPost, sr.s.WebServiceURL()+"/admin/v2/clusters/"+remote.name, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+sr.token(t, "admin"))
	if _, err := sr.admin.Clusters().Get(remote.name); err != nil {
		req.Method = http.MethodPut
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s: register %s: HTTP %d", sr.name, remote.name, resp.StatusCode)
	}
}

// TestReplicationSecured: replication over TLS with token authentication
// into a cluster with authorization on. The replicator's role may only
// produce to the namespace; with a bad token nothing is replicated and the
// topic stats say why; once the cluster record carries a valid token,
// everything produced meanwhile arrives.
func TestReplicationSecured(t *testing.T) {
	east, west := startSecuredRegion(t, "east"), startSecuredRegion(t, "west")
	east.register(t, west, "not-a-token")
	west.register(t, east, east.token(t, "admin"))
	for _, r := range []*securedRegion{east, west} {
		if err := r.admin.Tenants().Create(utils.TenantData{Name: "geo", AllowedClusters: []string{"east", "west"}}); err != nil {
			t.Fatal(err)
		}
		if err := r.admin.Namespaces().CreateNamespace("geo/sec"); err != nil {
			t.Fatal(err)
		}
	}
	ns, _ := utils.GetNameSpaceName("geo", "sec")
	if err := west.admin.Namespaces().GrantNamespacePermission(*ns, "repl-from-east", []utils.AuthAction{"produce"}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*securedRegion{east, west} {
		if err := r.admin.Namespaces().SetNamespaceReplicationClusters("geo/sec", []string{"east", "west"}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ce := newTokenClient(t, east.s.ServiceURL(), east.token(t, "admin"))
	topic := "persistent://geo/sec/t"
	want := map[string][]string{"s": produce(t, ctx, ce, topic, "s", 200)}

	tn := mustTopic(t, topic)
	var lastErr string
	for start := time.Now(); time.Since(start) < 30*time.Second; time.Sleep(200 * time.Millisecond) {
		st, err := east.admin.Topics().GetStats(tn)
		if err != nil {
			t.Fatal(err)
		}
		if raw, ok := st.Replication["west"]; ok && !raw.Connected {
			lastErr = replicationError(t, east, topic)
			if lastErr != "" {
				break
			}
		}
	}
	if !strings.Contains(lastErr, "uthentication") {
		t.Fatalf("replication with a bad token: last error %q, want an authentication error", lastErr)
	}

	east.register(t, west, west.token(t, "repl-from-east"))
	cw := newTokenClient(t, west.s.ServiceURL(), west.token(t, "admin"))
	receiveAll(t, ctx, cw, topic, "check", want)
}

// replicationError reads lastError of the west entry of a topic's stats
// (a Magnetar field pulsaradmin does not decode).
func replicationError(t *testing.T, r *securedRegion, topic string) string {
	t.Helper()
	tn := mustTopic(t, topic)
	req, _ := http.NewRequest(http.MethodGet, r.s.WebServiceURL()+"/admin/v2/"+tn.GetRestPath()+"/stats", nil)
	req.Header.Set("Authorization", "Bearer "+r.token(t, "admin"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Replication map[string]struct {
			LastError string `json:"lastError"`
		} `json:"replication"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st.Replication["west"].LastError
}

func newTokenClient(t *testing.T, url, token string) pulsar.Client {
	t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, Authentication: pulsar.NewAuthenticationToken(token),
		OperationTimeout: 30 * time.Second, Logger: plog.NewLoggerWithSlog(standalonetest.QuietLogger())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestSchemaRequestsAuthorized: GET_OR_CREATE_SCHEMA needs produce on the
// topic; a role without it is refused, a superuser is not.
func TestSchemaRequestsAuthorized(t *testing.T) {
	r := startSecuredRegion(t, "solo")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	schema := &pb.Schema{Name: new("s"), Type: pb.Schema_String.Enum(), SchemaData: []byte{}}
	for _, tc := range []struct {
		role    string
		wantErr bool
	}{{"nobody", true}, {"admin", false}} {
		tok := r.token(t, tc.role)
		c, err := replication.Dial(ctx, r.s.ServiceURL(), replication.DialOptions{AuthMethod: "token",
			AuthData: func() ([]byte, error) { return []byte(tok), nil }})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.GetOrCreateSchema(ctx, "persistent://public/default/schema-authz", schema)
		c.Close()
		if tc.wantErr != (err != nil) {
			t.Fatalf("role %s: GET_OR_CREATE_SCHEMA: %v, want error %v", tc.role, err, tc.wantErr)
		}
		if err != nil && !errors.Is(err, protocol.ErrAuthorization) {
			t.Fatalf("role %s: %v, want an authorization error", tc.role, err)
		}
	}
}
