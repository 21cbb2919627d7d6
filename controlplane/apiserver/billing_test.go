package apiserver

import (
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/billing"
	"github.com/magnetar-dev/magnetar/controlplane/store/pgtest"
)

// clock is a settable clock for billing.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

const gib = 1 << 30

func usageRecord(org, cluster string, m billing.Meter, hour time.Time, q, rev int64) *cpv1.UsageRecord {
	k := billing.Key{Organization: org, Cluster: cluster, Meter: m, Hour: hour}
	return &cpv1.UsageRecord{Organization: org, Cluster: cluster, Meter: string(m), Hour: timestamppb.New(hour),
		Quantity: q, Revision: rev, IdempotencyKey: k.IdempotencyKey()}
}

func TestBillingSQLite(t *testing.T) {
	testBilling(t, "sqlite://"+filepath.Join(t.TempDir(), "cp.db"))
}

func TestBillingPostgres(t *testing.T) { testBilling(t, pgtest.DSN(t)) }

// testBilling walks usage through ingestion (idempotent), listing with
// aggregation, a draft invoice, its finalization after the grace period,
// late usage as an adjustment on the next month, credit notes and CSV, and
// checks that each organization sees only its own.
func testBilling(t *testing.T, dsn string) {
	clk := &clock{t: time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)}
	h := startHarnessWith(t, openStore(t, dsn), filepath.Join(t.TempDir(), "bootstrap.key"), func(c *Config) { c.Now = clk.now })
	ts := h.setup("acme", "other")
	acme, other := ts[0], ts[1]
	op := h.authCtx(h.opKey)
	bill := cpv1.NewBillingClient(h.conn)
	books := cpv1.NewPriceBooksClient(h.conn)

	// Price books: operators only; every principal may read them.
	book := &cpv1.PriceBook{Currency: "USD", EffectiveTime: timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		Prices: []*cpv1.Price{
			{Meter: "bytes_in", Unit: "GiB", UnitSize: gib, FreeUnits: "1", Tiers: []*cpv1.PriceTier{{UpTo: "10", UnitPrice: "0.10"}, {UnitPrice: "0.05"}}},
			{Meter: "messages_in", Unit: "million messages", UnitSize: 1_000_000, Tiers: []*cpv1.PriceTier{{UnitPrice: "0.40"}}},
		}}
	_, err := books.CreatePriceBook(h.authCtx(acme.key), &cpv1.CreatePriceBookRequest{PriceBookId: "std", PriceBook: book})
	wantCode(t, err, codes.PermissionDenied, "reserved to operators")
	_, err = books.CreatePriceBook(op, &cpv1.CreatePriceBookRequest{PriceBookId: "bad", PriceBook: &cpv1.PriceBook{Currency: "USD",
		EffectiveTime: book.EffectiveTime, Prices: []*cpv1.Price{{Meter: "bytes_in", Tiers: []*cpv1.PriceTier{{UpTo: "5", UnitPrice: "1"}}}}}})
	wantCode(t, err, codes.InvalidArgument, "last tier")
	must[*cpv1.PriceBook](t)(books.CreatePriceBook(op, &cpv1.CreatePriceBookRequest{PriceBookId: "std", PriceBook: book}))
	if l := must[*cpv1.ListPriceBooksResponse](t)(books.ListPriceBooks(h.authCtx(other.key), &cpv1.ListPriceBooksRequest{})); len(l.PriceBooks) != 1 {
		t.Fatalf("price books %v", l)
	}

	cluster := acme.org + "/clusters/prod"
	hour := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	ingest := func(recs ...*cpv1.UsageRecord) []cpv1.IngestUsageRecordsResponse_Result_Outcome {
		t.Helper()
		resp := must[*cpv1.IngestUsageRecordsResponse](t)(bill.IngestUsageRecords(op, &cpv1.IngestUsageRecordsRequest{Region: "regions/us-east", Records: recs}))
		var out []cpv1.IngestUsageRecordsResponse_Result_Outcome
		for _, r := range resp.Results {
			out = append(out, r.Outcome)
		}
		return out
	}
	A, D, ADJ := cpv1.IngestUsageRecordsResponse_Result_ACCEPTED, cpv1.IngestUsageRecordsResponse_Result_DUPLICATE, cpv1.IngestUsageRecordsResponse_Result_ADJUSTED
	eq := func(got []cpv1.IngestUsageRecordsResponse_Result_Outcome, want ...cpv1.IngestUsageRecordsResponse_Result_Outcome) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("outcomes %v, want %v", got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("outcomes %v, want %v", got, want)
			}
		}
	}
	eq(ingest(usageRecord(acme.org, cluster, billing.BytesIn, hour, 3*gib, 1), usageRecord(acme.org, cluster, billing.MessagesIn, hour, 500_000, 1)), A, A)
	eq(ingest(usageRecord(acme.org, cluster, billing.BytesIn, hour, 3*gib, 1)), D)
	eq(ingest(usageRecord(acme.org, cluster, billing.BytesIn, hour, 6*gib, 2), usageRecord(acme.org, cluster, billing.BytesIn, hour.Add(time.Hour), 5*gib, 1)), A, A)
	eq(ingest(usageRecord(acme.org, cluster, billing.BytesIn, hour, 4*gib, 1)), D) // an old revision, late

	// Refusals: tenants may not ingest; keys must match; other's clusters.
	_, err = bill.IngestUsageRecords(h.authCtx(acme.key), &cpv1.IngestUsageRecordsRequest{Region: "us-east",
		Records: []*cpv1.UsageRecord{usageRecord(acme.org, cluster, billing.BytesIn, hour, 1, 9)}})
	wantCode(t, err, codes.PermissionDenied, "")
	bad := usageRecord(acme.org, cluster, billing.BytesIn, hour, 1, 9)
	bad.IdempotencyKey = "abc"
	_, err = bill.IngestUsageRecords(op, &cpv1.IngestUsageRecordsRequest{Region: "us-east", Records: []*cpv1.UsageRecord{bad}})
	wantCode(t, err, codes.InvalidArgument, "idempotency_key")
	_, err = bill.IngestUsageRecords(op, &cpv1.IngestUsageRecordsRequest{Region: "us-east",
		Records: []*cpv1.UsageRecord{usageRecord(acme.org, other.org+"/clusters/x", billing.BytesIn, hour, 1, 1)}})
	wantCode(t, err, codes.InvalidArgument, "not a cluster of")
	_, err = bill.IngestUsageRecords(op, &cpv1.IngestUsageRecordsRequest{Region: "us-east",
		Records: []*cpv1.UsageRecord{usageRecord(acme.org, cluster, "bogus", hour, 1, 1)}})
	wantCode(t, err, codes.InvalidArgument, "unknown meter")
	_, err = bill.IngestUsageRecords(op, &cpv1.IngestUsageRecordsRequest{Region: "us-east",
		Records: []*cpv1.UsageRecord{usageRecord(acme.org, cluster, billing.BytesIn, hour.Add(30*24*time.Hour), 1, 1)}})
	wantCode(t, err, codes.InvalidArgument, "future")

	// Listing: records, then sums by day and by meter.
	recs := must[*cpv1.ListUsageRecordsResponse](t)(bill.ListUsageRecords(h.authCtx(acme.key), &cpv1.ListUsageRecordsRequest{Parent: acme.org}))
	if len(recs.Records) != 3 || recs.Records[0].Quantity != 6*gib || recs.Records[0].Revision != 2 || recs.Records[0].Region != "regions/us-east" ||
		recs.Records[0].Kind != cpv1.UsageRecord_USAGE || recs.Records[0].BillingPeriod != "2026-11" {
		t.Fatalf("records %v", recs.Records)
	}
	days := must[*cpv1.ListUsageRecordsResponse](t)(bill.ListUsageRecords(h.authCtx(acme.key), &cpv1.ListUsageRecordsRequest{Parent: acme.org,
		Aggregation: cpv1.ListUsageRecordsRequest_DAY, Meter: "bytes_in"}))
	if len(days.Buckets) != 1 || days.Buckets[0].Quantity != 11*gib || days.Buckets[0].Records != 2 ||
		!days.Buckets[0].StartTime.AsTime().Equal(time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("daily buckets %v", days.Buckets)
	}
	hours := must[*cpv1.ListUsageRecordsResponse](t)(bill.ListUsageRecords(h.authCtx(acme.key), &cpv1.ListUsageRecordsRequest{Parent: acme.org,
		Aggregation: cpv1.ListUsageRecordsRequest_HOUR, StartTime: timestamppb.New(hour.Add(time.Hour))}))
	if len(hours.Buckets) != 1 || hours.Buckets[0].Quantity != 5*gib {
		t.Fatalf("hourly buckets from 11:00 %v", hours.Buckets)
	}
	_, err = bill.ListUsageRecords(h.authCtx(other.key), &cpv1.ListUsageRecordsRequest{Parent: acme.org})
	wantCode(t, err, codes.NotFound, "")
	if l := must[*cpv1.ListUsageRecordsResponse](t)(bill.ListUsageRecords(h.authCtx(other.key), &cpv1.ListUsageRecordsRequest{Parent: other.org})); len(l.Records) != 0 {
		t.Fatalf("other sees %v", l.Records)
	}

	// A draft: 11 GiB in (1 free, 10 at 0.10) and 0.5 M messages at 0.40.
	nov := acme.org + "/invoices/2026-11"
	inv := must[*cpv1.Invoice](t)(bill.GetInvoice(h.authCtx(acme.key), &cpv1.GetInvoiceRequest{Name: nov}))
	if inv.State != cpv1.Invoice_DRAFT || inv.Total != "1.20" || len(inv.Lines) != 3 || inv.Currency != "USD" ||
		!inv.FinalizeTime.AsTime().Equal(time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("draft %v", inv)
	}
	_, err = bill.GetInvoice(h.authCtx(other.key), &cpv1.GetInvoiceRequest{Name: nov})
	wantCode(t, err, codes.NotFound, "")
	_, err = bill.GetInvoice(h.authCtx(acme.key), &cpv1.GetInvoiceRequest{Name: acme.org + "/invoices/2026-13"})
	wantCode(t, err, codes.InvalidArgument, "")
	_, err = bill.CreateCreditNote(op, &cpv1.CreateCreditNoteRequest{Parent: nov, CreditNoteId: "early", CreditNote: &cpv1.CreditNote{Reason: "x", Amount: "0.10"}})
	wantCode(t, err, codes.FailedPrecondition, "draft")

	// Still a draft in the grace period: a new total updates November.
	clk.set(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	eq(ingest(usageRecord(acme.org, cluster, billing.MessagesIn, hour, 1_000_000, 2)), A)
	if inv := must[*cpv1.Invoice](t)(bill.GetInvoice(h.authCtx(acme.key), &cpv1.GetInvoiceRequest{Name: nov})); inv.Total != "1.40" || inv.State != cpv1.Invoice_DRAFT {
		t.Fatalf("draft in grace %v", inv)
	}

	// After the grace period: finalized on read, then never changes; late
	// usage for November is an adjustment billed on December.
	clk.set(time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC))
	fin := must[*cpv1.Invoice](t)(bill.GetInvoice(h.authCtx(acme.key), &cpv1.GetInvoiceRequest{Name: nov}))
	if fin.State != cpv1.Invoice_FINALIZED || fin.Total != "1.40" || fin.Credited != "0.00" {
		t.Fatalf("finalized %v", fin)
	}
	eq(ingest(usageRecord(acme.org, cluster, billing.MessagesIn, hour, 3_000_000, 3), usageRecord(acme.org, cluster, billing.MessagesIn, hour, 3_000_000, 3)), ADJ, D)
	if again := must[*cpv1.Invoice](t)(bill.GetInvoice(h.authCtx(acme.key), &cpv1.GetInvoiceRequest{Name: nov})); again.Total != "1.40" {
		t.Fatalf("a finalized invoice changed: %v", again)
	}
	dec := must[*cpv1.Invoice](t)(bill.GetInvoice(h.authCtx(acme.key), &cpv1.GetInvoiceRequest{Name: acme.org + "/invoices/2026-12"}))
	if dec.State != cpv1.Invoice_DRAFT || dec.Total != "0.80" {
		t.Fatalf("December with the adjustment %v", dec)
	}
	adj := must[*cpv1.ListUsageRecordsResponse](t)(bill.ListUsageRecords(h.authCtx(acme.key), &cpv1.ListUsageRecordsRequest{Parent: acme.org, Meter: "messages_in"}))
	if len(adj.Records) != 2 || adj.Records[1].Kind != cpv1.UsageRecord_ADJUSTMENT || adj.Records[1].Quantity != 2_000_000 || adj.Records[1].BillingPeriod != "2026-12" {
		t.Fatalf("adjustment records %v", adj.Records)
	}
	list := must[*cpv1.ListInvoicesResponse](t)(bill.ListInvoices(h.authCtx(acme.key), &cpv1.ListInvoicesRequest{Parent: acme.org}))
	if len(list.Invoices) != 2 || list.Invoices[0].Period != "2026-12" || list.Invoices[1].Period != "2026-11" {
		t.Fatalf("invoices %v", list.Invoices)
	}
	page := must[*cpv1.ListInvoicesResponse](t)(bill.ListInvoices(h.authCtx(acme.key), &cpv1.ListInvoicesRequest{Parent: acme.org, PageSize: 1}))
	page2 := must[*cpv1.ListInvoicesResponse](t)(bill.ListInvoices(h.authCtx(acme.key), &cpv1.ListInvoicesRequest{Parent: acme.org, PageSize: 1, PageToken: page.NextPageToken}))
	if len(page.Invoices) != 1 || page.NextPageToken == "" || len(page2.Invoices) != 1 || page2.Invoices[0].Period != "2026-11" || page2.NextPageToken != "" {
		t.Fatalf("pages %v / %v", page, page2)
	}

	// Credit notes: operators only, on a finalized invoice, at most its total.
	_, err = bill.CreateCreditNote(h.authCtx(acme.key), &cpv1.CreateCreditNoteRequest{Parent: nov, CreditNoteId: "c1", CreditNote: &cpv1.CreditNote{Reason: "outage", Amount: "1.00"}})
	wantCode(t, err, codes.PermissionDenied, "")
	cn := must[*cpv1.CreditNote](t)(bill.CreateCreditNote(op, &cpv1.CreateCreditNoteRequest{Parent: nov, CreditNoteId: "c1",
		CreditNote: &cpv1.CreditNote{Reason: "outage", Amount: "1.00"}}))
	if cn.Name != nov+"/creditNotes/c1" || cn.Currency != "USD" || cn.CreateTime == nil {
		t.Fatalf("credit note %v", cn)
	}
	_, err = bill.CreateCreditNote(op, &cpv1.CreateCreditNoteRequest{Parent: nov, CreditNoteId: "c2", CreditNote: &cpv1.CreditNote{Reason: "again", Amount: "0.41"}})
	wantCode(t, err, codes.FailedPrecondition, "more than")
	_, err = bill.CreateCreditNote(op, &cpv1.CreateCreditNoteRequest{Parent: nov, CreditNoteId: "c3", CreditNote: &cpv1.CreditNote{Reason: "x", Amount: "0.001"}})
	wantCode(t, err, codes.InvalidArgument, "decimal places")
	must[*cpv1.CreditNote](t)(bill.CreateCreditNote(op, &cpv1.CreateCreditNoteRequest{Parent: nov, CreditNoteId: "c2", CreditNote: &cpv1.CreditNote{Reason: "again", Amount: "0.40"}}))
	if fin := must[*cpv1.Invoice](t)(bill.GetInvoice(h.authCtx(acme.key), &cpv1.GetInvoiceRequest{Name: nov})); fin.Credited != "1.40" || fin.Total != "1.40" {
		t.Fatalf("credited %v", fin)
	}
	if l := must[*cpv1.ListCreditNotesResponse](t)(bill.ListCreditNotes(h.authCtx(acme.key), &cpv1.ListCreditNotesRequest{Parent: nov})); len(l.CreditNotes) != 2 {
		t.Fatalf("credit notes %v", l)
	}

	// CSV over REST.
	code, out := h.rest(acme.key, "GET", "/v1/"+nov+":export", nil)
	csv, _ := out["csv"].(string)
	if code != 200 || !strings.HasPrefix(csv, "organization,period,state,region,meter,tier,quantity,unit,unit_price,amount,currency\n") ||
		!strings.Contains(csv, "organizations/acme,2026-11,FINALIZED,regions/us-east,bytes_in,1,10,GiB,0.1,1.00,USD\n") ||
		!strings.HasSuffix(csv, "organizations/acme,2026-11,FINALIZED,,total,,,,,1.40,USD\n") {
		t.Fatalf("export: %d %q", code, csv)
	}
	if code, _ := h.rest(other.key, "GET", "/v1/"+nov+":export", nil); code != 404 {
		t.Fatalf("other's export: %d", code)
	}
}
