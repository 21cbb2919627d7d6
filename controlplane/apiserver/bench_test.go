package apiserver

import (
	"fmt"
	"testing"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

// BenchmarkGRPC measures whole API calls through gRPC on loopback:
// authentication, the policy decision, the SQLite store (in memory) and
// the audit write for creates. Its latest figures are in docs/benchmarks.md,
// "Control-plane API: BenchmarkGRPC".
func BenchmarkGRPC(b *testing.B) {
	h := newHarness(b, "sqlite::memory:")
	a := h.setup("alpha")[0]
	ac := h.authCtx(a.key)
	for i := 0; i < 20; i++ {
		if _, err := h.sas.CreateServiceAccount(ac, &cpv1.CreateServiceAccountRequest{Parent: a.org, ServiceAccountId: fmt.Sprintf("seed-%d", i)}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("Get", func(b *testing.B) {
		req := &cpv1.GetServiceAccountRequest{Name: a.sa}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := h.sas.GetServiceAccount(ac, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("List20", func(b *testing.B) {
		req := &cpv1.ListServiceAccountsRequest{Parent: a.org, PageSize: 20}
		b.ReportAllocs()
		for b.Loop() {
			resp, err := h.sas.ListServiceAccounts(ac, req)
			if err != nil || len(resp.ServiceAccounts) != 20 {
				b.Fatal(err, len(resp.GetServiceAccounts()))
			}
		}
	})
	b.Run("Create", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			if _, err := h.sas.CreateServiceAccount(ac, &cpv1.CreateServiceAccountRequest{Parent: a.org, ServiceAccountId: fmt.Sprintf("b%d", i)}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
