package up

import (
	"context"
	"io"
	"log/slog"
	"os"
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

// startEnv starts an Env with one region on a fresh data directory (or
// dir) and stops it when the test ends.
func startEnv(t *testing.T, dir string) *Env {
	t.Helper()
	env, err := Start(t.Context(), Config{DataDir: dir, Listen: "127.0.0.1:0", Regions: []string{"local-a"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := env.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return env
}

// operator returns a connection to env's control plane and a context
// carrying its operator key.
func operator(t *testing.T, env *Env) (*grpc.ClientConn, context.Context) {
	t.Helper()
	raw, err := os.ReadFile(env.KeyFile())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(env.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+strings.TrimSpace(string(raw)))
}

// A fresh `magnetar up` rates usage with the development price book; a
// book an operator creates takes over; a restart adds nothing.
func TestDevelopmentPriceBook(t *testing.T) {
	dir := t.TempDir()
	env := startEnv(t, dir)
	conn, ctx := operator(t, env)
	orgs, bill, books := cpv1.NewOrganizationsClient(conn), cpv1.NewBillingClient(conn), cpv1.NewPriceBooksClient(conn)
	if _, err := orgs.CreateOrganization(ctx, &cpv1.CreateOrganizationRequest{OrganizationId: "acme", Organization: &cpv1.Organization{}}); err != nil {
		t.Fatal(err)
	}
	org, cluster := "organizations/acme", "organizations/acme/clusters/dev"
	hour := time.Now().UTC().Truncate(time.Hour)
	k := billing.Key{Organization: org, Cluster: cluster, Meter: billing.BrokerHours, Hour: hour}
	if _, err := bill.IngestUsageRecords(ctx, &cpv1.IngestUsageRecordsRequest{Region: "regions/local-a", Records: []*cpv1.UsageRecord{{
		Organization: org, Cluster: cluster, Meter: string(billing.BrokerHours), Hour: timestamppb.New(hour),
		Quantity: 2, Revision: 1, IdempotencyKey: k.IdempotencyKey()}}}); err != nil {
		t.Fatal(err)
	}
	invoice := func() *cpv1.Invoice {
		t.Helper()
		inv, err := bill.GetInvoice(ctx, &cpv1.GetInvoiceRequest{Name: org + "/invoices/" + billing.PeriodOf(hour).String()})
		if err != nil {
			t.Fatalf("GetInvoice: %v", err)
		}
		return inv
	}
	if inv := invoice(); inv.GetCurrency() != "USD" || inv.GetTotal() != "0.24" {
		t.Fatalf("invoice with the development price book: %s %s, want 0.24 USD", inv.GetTotal(), inv.GetCurrency())
	}

	start := billing.PeriodOf(hour).Start()
	if _, err := books.CreatePriceBook(ctx, &cpv1.CreatePriceBookRequest{PriceBookId: "standard", PriceBook: &cpv1.PriceBook{
		Currency: "EUR", EffectiveTime: timestamppb.New(start),
		Prices: []*cpv1.Price{{Meter: string(billing.BrokerHours), Unit: "broker-hour", Tiers: []*cpv1.PriceTier{{UnitPrice: "1.00"}}}}}}); err != nil {
		t.Fatal(err)
	}
	if inv := invoice(); inv.GetCurrency() != "EUR" || inv.GetTotal() != "2.00" {
		t.Fatalf("invoice with an operator's price book: %s %s, want 2.00 EUR", inv.GetTotal(), inv.GetCurrency())
	}

	ctx2, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := env.Shutdown(ctx2); err != nil {
		t.Fatal(err)
	}
	env = startEnv(t, dir)
	conn, ctx = operator(t, env)
	list, err := cpv1.NewPriceBooksClient(conn).ListPriceBooks(ctx, &cpv1.ListPriceBooksRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, b := range list.GetPriceBooks() {
		ids = append(ids, b.GetName())
	}
	if strings.Join(ids, ",") != "priceBooks/development,priceBooks/standard" {
		t.Fatalf("price books after a restart: %v", ids)
	}
}
