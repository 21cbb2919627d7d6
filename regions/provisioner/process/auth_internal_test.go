package process

import (
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/magnetar-dev/magnetar/regions/provisioner"
)

// TestBrokerAuthArgs: a broker of a cluster with Auth accepts each of its
// audiences (one --auth-oidc-audience per audience), and a state.json
// auth record with a single "Audience" reads as Audiences of one.
func TestBrokerAuthArgs(t *testing.T) {
	p, err := New(Config{DataDir: t.TempDir(), Binary: "/bin/true", InsecureDataPlanes: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	auth := &provisioner.Auth{Issuer: "http://cp", Audiences: []string{"urn:magnetar:cluster:o/c", "urn:magnetar:organization:o"}, SuperuserRoles: []string{"operators:*"}}
	c := &cluster{dir: t.TempDir(), st: state{Name: "organizations/o/clusters/c", Auth: auth, Metadata: &member{Role: "metadata", Addr: "127.0.0.1:1"}}}
	args := p.args(c, &member{Role: "broker", Addr: "127.0.0.1:2", HTTPAddr: "127.0.0.1:3"})
	var auds []string
	for i, a := range args {
		if a == "--auth-oidc-audience" && i+1 < len(args) {
			auds = append(auds, args[i+1])
		}
	}
	if !slices.Equal(auds, auth.Audiences) || !slices.Contains(args, "--authorization") {
		t.Fatalf("broker args %q: audiences %q, want %q and --authorization", args, auds, auth.Audiences)
	}

	var st state
	if err := json.Unmarshal([]byte(`{"name":"organizations/o/clusters/c","auth":{"Issuer":"http://cp","Audience":"urn:magnetar:cluster:o/c","SuperuserRoles":["a"]}}`), &st); err != nil {
		t.Fatal(err)
	}
	if st.Auth == nil || !slices.Equal(st.Auth.Audiences, []string{"urn:magnetar:cluster:o/c"}) || st.Auth.Issuer != "http://cp" || !slices.Equal(st.Auth.SuperuserRoles, []string{"a"}) {
		t.Fatalf("a single-audience record reads as %+v", st.Auth)
	}
	if err := (provisioner.ClusterSpec{Name: "organizations/o/clusters/c", Size: provisioner.Size{Brokers: 1, Bookies: 1},
		Auth: &provisioner.Auth{Issuer: "http://cp"}}).Validate(); err == nil {
		t.Fatal("an auth without audiences is valid")
	}
}
