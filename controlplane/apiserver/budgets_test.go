package apiserver

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/billing"
)

// TestBudgets: a budget's status follows the month's invoice as usage
// arrives, each threshold raises one audit event per month, an enforcing
// budget at its amount refuses new clusters, and a new month starts over.
func TestBudgets(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 10, 12, 0, 0, 0, time.UTC)}
	h := startHarnessWith(t, openStore(t, "sqlite://"+filepath.Join(t.TempDir(), "cp.db")), filepath.Join(t.TempDir(), "bootstrap.key"),
		func(c *Config) { c.Now = clk.now })
	ts := h.setup("acme", "other")
	acme, other := ts[0], ts[1]
	op := h.authCtx(h.opKey)
	bill, bud := cpv1.NewBillingClient(h.conn), cpv1.NewBudgetsClient(h.conn)
	must[*cpv1.PriceBook](t)(cpv1.NewPriceBooksClient(h.conn).CreatePriceBook(op, &cpv1.CreatePriceBookRequest{PriceBookId: "std",
		PriceBook: &cpv1.PriceBook{Currency: "USD", EffectiveTime: timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
			Prices: []*cpv1.Price{{Meter: "messages_in", Unit: "million messages", UnitSize: 1_000_000, Tiers: []*cpv1.PriceTier{{UnitPrice: "1.00"}}}}}}))
	cluster := acme.org + "/clusters/prod"
	hour := time.Date(2026, 12, 10, 11, 0, 0, 0, time.UTC)
	ingest := func(q, rev int64) {
		t.Helper()
		must[*cpv1.IngestUsageRecordsResponse](t)(bill.IngestUsageRecords(op, &cpv1.IngestUsageRecordsRequest{Region: "us-east",
			Records: []*cpv1.UsageRecord{usageRecord(acme.org, cluster, billing.MessagesIn, hour, q, rev)}}))
	}
	alerts := func() []float64 {
		t.Helper()
		evs := must[*cpv1.ListAuditEventsResponse](t)(h.audit.ListAuditEvents(h.authCtx(acme.key), &cpv1.ListAuditEventsRequest{Parent: acme.org, PageSize: 1000}))
		var out []float64
		for _, e := range evs.AuditEvents {
			if e.Method == "BudgetAlert" {
				out = append(out, e.Detail.GetFields()["threshold_percent"].GetNumberValue())
			}
		}
		return out
	}
	tenant := h.authCtx(acme.key)
	createCluster := func(id string) error {
		_, err := h.clusters.CreateCluster(tenant, &cpv1.CreateClusterRequest{Parent: acme.org, ClusterId: id,
			Cluster: &cpv1.Cluster{Region: "regions/us-east", Size: &cpv1.ClusterSize{Brokers: 1, Bookies: 1}}})
		return err
	}

	_, err := bud.CreateBudget(tenant, &cpv1.CreateBudgetRequest{Parent: acme.org, BudgetId: "monthly", Budget: &cpv1.Budget{Amount: "10.001"}})
	wantCode(t, err, codes.InvalidArgument, "decimal places")
	b := must[*cpv1.Budget](t)(bud.CreateBudget(tenant, &cpv1.CreateBudgetRequest{Parent: acme.org, BudgetId: "monthly",
		Budget: &cpv1.Budget{Amount: "10.00", AlertThresholds: []int32{100, 50}, Enforce: true}}))
	if b.Status.GetState() != cpv1.BudgetStatus_WITHIN || b.Status.GetSpent() != "0.00" || b.Status.GetPeriod() != "2026-12" {
		t.Fatalf("new budget %v", b)
	}

	ingest(6_000_000, 1) // 6.00 of 10.00: the 50% alert
	b = must[*cpv1.Budget](t)(bud.GetBudget(tenant, &cpv1.GetBudgetRequest{Name: b.Name}))
	if b.Status.GetState() != cpv1.BudgetStatus_ALERTING || b.Status.GetSpent() != "6.00" || b.Status.GetCurrency() != "USD" ||
		!slices.Equal(b.Status.GetAlertedThresholds(), []int32{50}) {
		t.Fatalf("at 6.00: %v", b.Status)
	}
	ingest(7_000_000, 2) // still above 50%: no second alert
	if got := alerts(); !slices.Equal(got, []float64{50}) {
		t.Fatalf("alerts %v, want [50]", got)
	}
	if err := createCluster("c1"); err != nil {
		t.Fatalf("a cluster under budget: %v", err)
	}

	ingest(12_000_000, 3) // 12.00: exceeded
	if got := alerts(); !slices.Equal(got, []float64{50, 100}) {
		t.Fatalf("alerts %v, want [50 100]", got)
	}
	wantCode(t, createCluster("c2"), codes.FailedPrecondition, "budget: organizations/acme/budgets/monthly: spent 12.00 of 10.00 USD in 2026-12")
	l := must[*cpv1.ListBudgetsResponse](t)(bud.ListBudgets(tenant, &cpv1.ListBudgetsRequest{Parent: acme.org}))
	if len(l.Budgets) != 1 || l.Budgets[0].Status.GetState() != cpv1.BudgetStatus_EXCEEDED {
		t.Fatalf("list %v", l)
	}
	_, err = bud.GetBudget(h.authCtx(other.key), &cpv1.GetBudgetRequest{Name: b.Name})
	wantCode(t, err, codes.NotFound, "")

	// Not enforcing any more: clusters are allowed again, still EXCEEDED.
	b = must[*cpv1.Budget](t)(bud.UpdateBudget(tenant, &cpv1.UpdateBudgetRequest{Budget: &cpv1.Budget{Name: b.Name, Enforce: false},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"enforce"}}}))
	if b.Status.GetState() != cpv1.BudgetStatus_EXCEEDED || b.Enforce {
		t.Fatalf("after update %v", b)
	}
	if err := createCluster("c2"); err != nil {
		t.Fatalf("with enforce off: %v", err)
	}

	// A new month starts from nothing.
	clk.set(time.Date(2027, 1, 5, 0, 0, 0, 0, time.UTC))
	b = must[*cpv1.Budget](t)(bud.GetBudget(tenant, &cpv1.GetBudgetRequest{Name: b.Name}))
	if b.Status.GetPeriod() != "2027-01" || b.Status.GetState() != cpv1.BudgetStatus_WITHIN || len(b.Status.GetAlertedThresholds()) != 0 {
		t.Fatalf("January %v", b.Status)
	}
	must[*cpv1.Budget](t)(bud.GetBudget(tenant, &cpv1.GetBudgetRequest{Name: b.Name}))
	if got := alerts(); len(got) != 2 {
		t.Fatalf("alerts after the month changed %v", got)
	}
}
