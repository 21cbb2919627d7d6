package agent

import (
	"reflect"
	"testing"
	"time"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

func TestGrantsFromRoleBindings(t *testing.T) {
	const (
		org    = "organizations/acme"
		prod   = org + "/clusters/prod"
		shop   = prod + "/tenants/shop"
		orders = shop + "/namespaces/orders"
		other  = prod + "/tenants/shop/namespaces/ordersx" // a prefix of no binding's resource
	)
	b := func(role, member, resource string) *cpv1.RoleBinding {
		return &cpv1.RoleBinding{Role: role, Member: org + "/serviceAccounts/" + member, Resource: resource}
	}
	g := grants{bindings: []*cpv1.RoleBinding{
		b("roles/pulsar.producer", "writer", orders),
		b("roles/pulsar.consumer", "writer", orders),
		b("roles/pulsar.consumer", "reader", prod), // the whole cluster
		b("roles/viewer", "looker", org),           // no data-plane permission
		b("roles/cluster.admin", "ops", shop),
		b("roles/org.admin", "boss", org),
		b("roles/cluster.admin", "elsewhere", org+"/clusters/dev"),
	}}
	want := map[string][]string{
		"organizations:acme:serviceAccounts:writer": {"consume", "produce"},
		"organizations:acme:serviceAccounts:reader": {"consume"},
	}
	if got := g.namespace(orders); !reflect.DeepEqual(got, want) {
		t.Errorf("namespace grants: %v, want %v", got, want)
	}
	if got := g.namespace(other); !reflect.DeepEqual(got, map[string][]string{"organizations:acme:serviceAccounts:reader": {"consume"}}) {
		t.Errorf("a namespace whose name extends orders': %v", got)
	}
	if got, want := g.tenantAdmins(shop), []string{"organizations:acme:serviceAccounts:boss", "organizations:acme:serviceAccounts:ops"}; !reflect.DeepEqual(got, want) {
		t.Errorf("tenant admins: %v, want %v", got, want)
	}
	if !managedRole("organizations:acme:serviceAccounts:x") || managedRole("admin") {
		t.Error("managedRole")
	}
}

// TestGrantsCurrent: a resource's grants are trusted only while its wanted
// grants, its spec as applied (by identity: a re-created namespace is
// another one) and its cluster's admin URL are those they were made to
// match, and for at most grantResync.
func TestGrantsCurrent(t *testing.T) {
	t0 := time.Now()
	spec := &cpv1.Namespace{}
	a := &Agent{grantsDone: map[string]grantMark{"ns": {want: "w", applied: spec, adminURL: "u", at: t0}}}
	for _, c := range []struct {
		name, want string
		applied    *cpv1.Namespace
		url        string
		at         time.Time
		current    bool
	}{
		{"unchanged", "w", spec, "u", t0.Add(grantResync - time.Second), true},
		{"too old", "w", spec, "u", t0.Add(grantResync), false},
		{"bindings changed", "w2", spec, "u", t0, false},
		{"re-applied", "w", &cpv1.Namespace{}, "u", t0, false},
		{"another admin URL", "w", spec, "u2", t0, false},
	} {
		if got := a.grantsCurrent("ns", c.want, c.applied, c.url, c.at); got != c.current {
			t.Errorf("%s: current %v, want %v", c.name, got, c.current)
		}
	}
	if a.grantsCurrent("other", "w", spec, "u", t0) {
		t.Error("a resource never synced is current")
	}
}
