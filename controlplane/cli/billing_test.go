package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/billing"
)

// TestBillingCommands: pricebook create/list, usage list (records, sums,
// CSV), invoice list/get/export, and the refusals a tenant gets.
func TestBillingCommands(t *testing.T) {
	cp := startControlPlane(t)
	key := cp.setupOrg(t)

	book := filepath.Join(t.TempDir(), "book.json")
	if err := os.WriteFile(book, []byte(`{"currency": "USD", "effectiveTime": "2026-01-01T00:00:00Z", "prices": [
		{"meter": "bytes_in", "unit": "GiB", "unitSize": "1073741824", "tiers": [{"unitPrice": "0.10"}]},
		{"meter": "messages_in", "unit": "million messages", "unitSize": "1000000", "tiers": [{"unitPrice": "0.50"}]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := cp.as(t, key, "pricebook", "create", "std", "--file", book); r.err == nil || !strings.Contains(r.err.Error(), "PERMISSION_DENIED") {
		t.Fatalf("a tenant created a price book: %v", r.err)
	}
	out := cp.ok(t, cp.opKey, "pricebook", "create", "std", "--file", book)
	contains(t, "pricebook create", out, "PRICEBOOK", "std", "USD", "2026-01-01T00:00:00Z", "bytes_in,messages_in")
	contains(t, "pricebook list", cp.ok(t, key, "pricebook", "list"), "std")

	// Usage as a region agent sends it (operator key).
	conn, err := grpc.NewClient(cp.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+cp.opKey)
	hour := billing.Hour(time.Now())
	var recs []*cpv1.UsageRecord
	for m, q := range map[billing.Meter]int64{billing.BytesIn: 3 << 30, billing.MessagesIn: 2_000_000} {
		k := billing.Key{Organization: "organizations/acme", Cluster: "organizations/acme/clusters/dev", Meter: m, Hour: hour}
		recs = append(recs, &cpv1.UsageRecord{Organization: k.Organization, Cluster: k.Cluster, Meter: string(m),
			Hour: timestamppb.New(hour), Quantity: q, Revision: 1, IdempotencyKey: k.IdempotencyKey()})
	}
	if _, err := cpv1.NewBillingClient(conn).IngestUsageRecords(ctx, &cpv1.IngestUsageRecordsRequest{Region: "local-a", Records: recs}); err != nil {
		t.Fatal(err)
	}

	out = cp.ok(t, key, "usage", "list", "acme")
	contains(t, "usage list", out, "HOUR", "CLUSTER", "acme/dev", "bytes_in", "3221225472", "messages_in", "2000000", "USAGE", billing.PeriodOf(hour).String())
	out = cp.ok(t, key, "usage", "list", "acme", "--by", "day", "--meter", "bytes_in", "--cluster", "dev")
	contains(t, "usage by day", out, "METER", "START", "bytes_in", hour.Truncate(24*time.Hour).Format(time.RFC3339), "3221225472")
	if strings.Contains(out, "messages_in") {
		t.Fatalf("--meter bytes_in shows messages_in:\n%s", out)
	}
	out = cp.ok(t, key, "usage", "list", "acme", "--by", "meter", "--csv")
	contains(t, "usage csv", out, "meter,start,quantity,records\n", "bytes_in,", ",3221225472,1\n")
	if r := cp.as(t, key, "usage", "list", "acme", "--by", "week"); r.err == nil {
		t.Fatal("--by week accepted")
	}

	period := billing.PeriodOf(time.Now()).String()
	contains(t, "invoice list", cp.ok(t, key, "invoice", "list", "acme"), "INVOICE", "acme/"+period, "DRAFT", "1.30", "USD")
	out = cp.ok(t, key, "invoice", "get", "acme/"+period)
	contains(t, "invoice get", out, "DRAFT", "bytes_in", "3", "GiB", "0.30", "messages_in", "million messages", "1.00", "total", "1.30 USD")
	out = cp.ok(t, key, "invoice", "export", "acme/"+period)
	contains(t, "invoice export", out, "organization,period,state,region,meter,tier,quantity,unit,unit_price,amount,currency\n",
		"organizations/acme,"+period+",DRAFT,regions/local-a,bytes_in,1,3,GiB,0.1,0.30,USD\n", ",total,,,,,1.30,USD\n")
	r := cp.as(t, cp.opKey, "invoice", "credit", "acme/"+period, "--amount", "1", "--reason", "outage")
	if r.err == nil || !strings.Contains(r.err.Error(), "FAILED_PRECONDITION") {
		t.Fatalf("credit on a draft: %v", r.err)
	}
	if r := cp.as(t, key, "invoice", "get", "other/"+period); r.err == nil || !strings.Contains(r.err.Error(), "NOT_FOUND") {
		t.Fatalf("another organization's invoice: %v", r.err)
	}
}

// TestBudgetCommands: budget create, get, update, list, delete.
func TestBudgetCommands(t *testing.T) {
	cp := startControlPlane(t)
	key := cp.setupOrg(t)
	out := cp.ok(t, key, "budget", "create", "acme", "monthly", "--amount", "250.00", "--thresholds", "50,90", "--enforce")
	contains(t, "budget create", out, "BUDGET", "acme/monthly", "250.00", "50%,90%", "true", "WITHIN", "0.00")
	if r := cp.as(t, key, "budget", "create", "acme", "bad", "--amount", "-5"); r.err == nil || !strings.Contains(r.err.Error(), "INVALID_ARGUMENT") {
		t.Fatalf("a negative budget: %v", r.err)
	}
	out = cp.ok(t, key, "budget", "update", "acme/monthly", "--enforce=false", "--amount", "300")
	contains(t, "budget update", out, "300", "false")
	contains(t, "budget list", cp.ok(t, key, "budget", "list", "acme"), "acme/monthly", billing.PeriodOf(time.Now()).String())
	contains(t, "budget delete", cp.ok(t, key, "budget", "delete", "acme/monthly"), "deleted organizations/acme/budgets/monthly")
	if r := cp.as(t, key, "budget", "get", "acme/monthly"); r.err == nil || !strings.Contains(r.err.Error(), "NOT_FOUND") {
		t.Fatalf("get after delete: %v", r.err)
	}
}
