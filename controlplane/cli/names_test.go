package cli

import (
	"testing"

	"google.golang.org/grpc/codes"
)

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		k    kind
		args []string
		want string // "" means an error
	}{
		{kindOrg, []string{"acme"}, "organizations/acme"},
		{kindOrg, []string{"organizations/acme"}, "organizations/acme"},
		{kindOrg, []string{"acme/dev"}, ""},
		{kindCluster, []string{"acme", "dev"}, "organizations/acme/clusters/dev"},
		{kindCluster, []string{"acme/dev"}, "organizations/acme/clusters/dev"},
		{kindCluster, []string{"organizations/acme/clusters/dev"}, "organizations/acme/clusters/dev"},
		{kindCluster, []string{"organizations/acme/tenants/dev"}, ""},
		{kindCluster, []string{"acme"}, ""},
		{kindCluster, []string{"acme//"}, ""},
		{kindTopic, []string{"a/b/c/d/e"}, "organizations/a/clusters/b/tenants/c/namespaces/d/topics/e"},
		{kindNamespace, []string{"a/b", "c/d"}, "organizations/a/clusters/b/tenants/c/namespaces/d"},
		{kindRegion, []string{"regions/local-a"}, "regions/local-a"},
		{kindOperation, []string{"op-1"}, "operations/op-1"},
		{kindAPIKey, []string{"acme", "ci", "k1"}, "organizations/acme/serviceAccounts/ci/apiKeys/k1"},
	} {
		got, err := tc.k.resolve(tc.args)
		if tc.want == "" {
			if err == nil {
				t.Errorf("%s %q: want an error, got %q", tc.k.short(), tc.args, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s %q: got %q, %v; want %q", tc.k.short(), tc.args, got, err, tc.want)
		}
	}
}

func TestResolveChild(t *testing.T) {
	for _, tc := range []struct {
		k                  kind
		args               []string
		wantParent, wantID string
	}{
		{kindOrg, []string{"acme"}, "", "acme"},
		{kindCluster, []string{"acme", "dev"}, "organizations/acme", "dev"},
		{kindTopic, []string{"a/b/c/d/e"}, "organizations/a/clusters/b/tenants/c/namespaces/d", "e"},
	} {
		p, id, err := tc.k.resolveChild(tc.args)
		if err != nil || p != tc.wantParent || id != tc.wantID {
			t.Errorf("%q: got %q %q %v", tc.args, p, id, err)
		}
	}
}

func TestShortNameAndCodes(t *testing.T) {
	for in, want := range map[string]string{
		"organizations/acme/clusters/dev": "acme/dev",
		"regions/local-a":                 "local-a",
		"operations/x":                    "x",
		"odd":                             "odd",
	} {
		if got := shortName(in); got != want {
			t.Errorf("shortName(%q) = %q, want %q", in, got, want)
		}
	}
	for c, want := range map[codes.Code]string{
		codes.OK: "OK", codes.PermissionDenied: "PERMISSION_DENIED", codes.Unauthenticated: "UNAUTHENTICATED",
		codes.FailedPrecondition: "FAILED_PRECONDITION", codes.DeadlineExceeded: "DEADLINE_EXCEEDED",
	} {
		if got := codeName(c); got != want {
			t.Errorf("codeName(%v) = %q, want %q", c, got, want)
		}
	}
}
