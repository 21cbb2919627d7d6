package apiserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"math/big"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/billing"
	"github.com/magnetar-dev/magnetar/controlplane/store"
)

// Billing resources. Usage lives in the store's usage tables
// (store.UsageStore); finalized invoices, credit notes and price books are
// ordinary objects. A draft invoice is computed on every read; an invoice
// whose period has closed is finalized (stored) by the first read after
// the close, and is served from the store from then on.

var (
	kindUsageRecord = &kind{collection: "usageRecords", field: "usage_record", parent: "organizations",
		newMsg: func() proto.Message { return &cpv1.UsageRecord{} }}
	kindInvoice = &kind{collection: "invoices", field: "invoice", parent: "organizations", ids: periodPattern,
		newMsg: func() proto.Message { return &cpv1.Invoice{} }}
	kindCreditNote = &kind{collection: "creditNotes", field: "credit_note", parent: "invoices",
		newMsg: func() proto.Message { return &cpv1.CreditNote{} }}
	kindPriceBook = &kind{collection: "priceBooks", field: "price_book",
		newMsg: func() proto.Message { return &cpv1.PriceBook{} }}
)

var periodPattern = regexp.MustCompile(`^[0-9]{4}-(0[1-9]|1[0-2])$`)

// maxIngestBatch bounds the records of one IngestUsageRecords call.
const maxIngestBatch = 1000

type billingSvc struct {
	cpv1.UnimplementedBillingServer
	s *Server
}

type priceBooks struct {
	cpv1.UnimplementedPriceBooksServer
	s *Server
}

func (s *Server) usageStore() (store.UsageStore, error) {
	us, ok := s.store.(store.UsageStore)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "billing: this store keeps no usage")
	}
	return us, nil
}

func (s *Server) now() time.Time { return s.cfg.Now().UTC() }

// ---- Usage ----

// usageKey checks a record's fields and returns its billing key.
func usageKey(i int, r *cpv1.UsageRecord) (billing.Key, error) {
	f := func(name string) string { return "records[" + itoa(i) + "]." + name }
	org, err := kindOrganization.parseName(f("organization"), r.GetOrganization())
	if err != nil {
		return billing.Key{}, err
	}
	cl, err := kindCluster.parseName(f("cluster"), r.GetCluster())
	if err != nil {
		return billing.Key{}, err
	}
	if cl.org != org.name {
		return billing.Key{}, invalid(f("cluster"), "%q is not a cluster of %s", r.GetCluster(), org.name)
	}
	if r.GetHour() == nil {
		return billing.Key{}, invalid(f("hour"), "required")
	}
	k := billing.Key{Organization: org.name, Cluster: cl.name, Meter: billing.Meter(r.GetMeter()), Hour: r.GetHour().AsTime()}
	if err := k.Validate(); err != nil {
		return billing.Key{}, invalid(f("meter")+"/"+f("hour"), "%s", strings.TrimPrefix(err.Error(), "billing: "))
	}
	if r.GetIdempotencyKey() != k.IdempotencyKey() {
		return billing.Key{}, invalid(f("idempotency_key"), "%q is not the key of this organization, cluster, meter and hour (want %s)",
			r.GetIdempotencyKey(), k.IdempotencyKey())
	}
	return k, nil
}

func itoa(i int) string { return strconv.Itoa(i) }

func (b billingSvc) IngestUsageRecords(ctx context.Context, req *cpv1.IngestUsageRecordsRequest) (*cpv1.IngestUsageRecordsResponse, error) {
	s := b.s
	if err := s.authorize(ctx, target{kind: kindUsageRecord, verb: "create"}); err != nil {
		return nil, err
	}
	us, err := s.usageStore()
	if err != nil {
		return nil, err
	}
	region := req.GetRegion()
	if !strings.HasPrefix(region, "regions/") {
		region = "regions/" + region
	}
	if _, err := kindRegion.parseName("region", region); err != nil {
		return nil, err
	}
	if n := len(req.GetRecords()); n == 0 || n > maxIngestBatch {
		return nil, invalid("records", "between 1 and %d records per call, got %d", maxIngestBatch, n)
	}
	recs := make([]store.UsageRecord, len(req.GetRecords()))
	for i, r := range req.GetRecords() {
		k, err := usageKey(i, r)
		if err != nil {
			return nil, err
		}
		if r.GetRegion() != "" && r.GetRegion() != region {
			return nil, invalid("records["+itoa(i)+"].region", "%q is not the request's region %s", r.GetRegion(), region)
		}
		if r.GetQuantity() < 0 || r.GetRevision() < 1 {
			return nil, invalid("records["+itoa(i)+"]", "quantity must be >= 0 and revision >= 1")
		}
		recs[i] = store.UsageRecord{Key: r.GetIdempotencyKey(), Org: k.Organization, Cluster: k.Cluster, Region: region,
			Meter: string(k.Meter), Hour: k.Hour, Total: r.GetQuantity(), Revision: r.GetRevision()}
	}
	now := s.now()
	decide := func(r store.UsageRecord, h store.UsageHead) (store.UsageChange, error) {
		d, err := billing.Ingest(billing.Head{Exists: h.Exists, Total: h.Total, Revision: h.Revision},
			billing.Received{Key: billing.Key{Organization: r.Org, Cluster: r.Cluster, Meter: billing.Meter(r.Meter), Hour: r.Hour},
				Quantity: r.Total, Revision: r.Revision}, now, s.cfg.BillingGrace)
		if err != nil {
			return store.UsageChange{}, status.Error(codes.InvalidArgument, strings.TrimPrefix(err.Error(), "billing: "))
		}
		if d.Action == billing.Duplicate {
			return store.UsageChange{}, nil
		}
		return store.UsageChange{Apply: true, Delta: d.Delta, Period: d.BillOn.String(), Adjustment: d.Action == billing.Adjust}, nil
	}
	changes, err := us.IngestUsage(ctx, recs, decide)
	if err != nil {
		return nil, s.toStatus(err, "")
	}
	out := &cpv1.IngestUsageRecordsResponse{}
	for i, ch := range changes {
		res := &cpv1.IngestUsageRecordsResponse_Result{IdempotencyKey: recs[i].Key, Revision: recs[i].Revision,
			Outcome: cpv1.IngestUsageRecordsResponse_Result_ACCEPTED}
		switch {
		case !ch.Apply:
			res.Outcome = cpv1.IngestUsageRecordsResponse_Result_DUPLICATE
		case ch.Adjustment:
			res.Outcome = cpv1.IngestUsageRecordsResponse_Result_ADJUSTED
		}
		out.Results = append(out.Results, res)
	}
	s.metrics.usageIngested(ctx, changes)
	s.evaluateAfterIngest(ctx, recs)
	return out, nil
}

func (b billingSvc) ListUsageRecords(ctx context.Context, req *cpv1.ListUsageRecordsRequest) (*cpv1.ListUsageRecordsResponse, error) {
	s := b.s
	org, err := s.authorizeOrgList(ctx, kindUsageRecord, req.GetParent(), req.GetPageSize())
	if err != nil {
		return nil, err
	}
	us, err := s.usageStore()
	if err != nil {
		return nil, err
	}
	q := store.UsageQuery{Org: org.name, Meter: req.GetMeter(), PageSize: int(req.GetPageSize()), PageToken: req.GetPageToken()}
	if c := req.GetCluster(); c != "" {
		cl, err := kindCluster.parseName("cluster", c)
		if err != nil {
			return nil, err
		}
		if cl.org != org.name {
			return nil, invalid("cluster", "%q is not a cluster of %s", c, org.name)
		}
		q.Cluster = cl.name
	}
	if m := req.GetMeter(); m != "" {
		if _, err := billing.Meter(m).Info(); err != nil {
			return nil, invalid("meter", "unknown meter %q", m)
		}
	}
	if t := req.GetStartTime(); t != nil {
		q.Start = t.AsTime()
	}
	if t := req.GetEndTime(); t != nil {
		q.End = t.AsTime()
	}
	agg := req.GetAggregation()
	if agg == cpv1.ListUsageRecordsRequest_AGGREGATION_UNSPECIFIED || agg == cpv1.ListUsageRecordsRequest_NONE {
		entries, next, err := us.ListUsage(ctx, q)
		if err != nil {
			return nil, s.toStatus(err, "")
		}
		out := &cpv1.ListUsageRecordsResponse{NextPageToken: next}
		for _, e := range entries {
			out.Records = append(out.Records, usageEntryProto(e))
		}
		return out, nil
	}
	if req.GetPageToken() != "" {
		return nil, invalid("page_token", "aggregated lists have one page")
	}
	sums, err := us.SumUsage(ctx, q)
	if err != nil {
		return nil, s.toStatus(err, "")
	}
	return &cpv1.ListUsageRecordsResponse{Buckets: aggregate(sums, agg, q.Start)}, nil
}

// authorizeOrgList checks a list call on k under the organization parent.
func (s *Server) authorizeOrgList(ctx context.Context, k *kind, parent string, pageSize int32) (resName, error) {
	org, err := kindOrganization.parseName("parent", parent)
	if err != nil {
		return org, err
	}
	if err := checkPageSize(pageSize); err != nil {
		return org, err
	}
	return org, s.authorize(ctx, target{kind: k, verb: "list", res: resName{parent: org.name, org: org.name}})
}

func usageEntryProto(e store.UsageEntry) *cpv1.UsageRecord {
	kind := cpv1.UsageRecord_USAGE
	if e.Adjustment {
		kind = cpv1.UsageRecord_ADJUSTMENT
	}
	return &cpv1.UsageRecord{Organization: e.Org, Cluster: e.Cluster, Region: e.Region, Meter: e.Meter,
		Hour: timestamppb.New(e.Hour), Quantity: e.Quantity, Revision: e.Revision, IdempotencyKey: e.Key,
		Kind: kind, BillingPeriod: e.Period, UpdateTime: timestamppb.New(e.UpdateTime)}
}

// aggregate folds hourly sums into buckets per meter and window.
func aggregate(sums []store.UsageSum, agg cpv1.ListUsageRecordsRequest_Aggregation, rangeStart time.Time) []*cpv1.UsageBucket {
	type bk struct {
		meter string
		start time.Time
	}
	window := func(h time.Time) time.Time {
		switch agg {
		case cpv1.ListUsageRecordsRequest_DAY:
			return h.Truncate(24 * time.Hour)
		case cpv1.ListUsageRecordsRequest_MONTH:
			return billing.PeriodOf(h).Start()
		case cpv1.ListUsageRecordsRequest_METER:
			return rangeStart
		}
		return h
	}
	buckets := map[bk]*cpv1.UsageBucket{}
	first := map[string]time.Time{}
	for _, u := range sums {
		k := bk{u.Meter, window(u.Hour)}
		if f, ok := first[u.Meter]; !ok || u.Hour.Before(f) {
			first[u.Meter] = u.Hour
		}
		b := buckets[k]
		if b == nil {
			b = &cpv1.UsageBucket{Meter: u.Meter}
			buckets[k] = b
		}
		b.Quantity += u.Quantity
		b.Records += u.Entries
	}
	keys := make([]bk, 0, len(buckets))
	for k := range buckets {
		keys = append(keys, k)
	}
	order := func(m string) int {
		i := slices.IndexFunc(billing.Meters, func(mi billing.MeterInfo) bool { return string(mi.Meter) == m })
		if i < 0 {
			return len(billing.Meters)
		}
		return i
	}
	sort.Slice(keys, func(i, j int) bool {
		if !keys[i].start.Equal(keys[j].start) {
			return keys[i].start.Before(keys[j].start)
		}
		return order(keys[i].meter) < order(keys[j].meter)
	})
	out := make([]*cpv1.UsageBucket, 0, len(keys))
	for _, k := range keys {
		b := buckets[k]
		start := k.start
		if agg == cpv1.ListUsageRecordsRequest_METER && start.IsZero() {
			start = first[k.meter]
		}
		b.StartTime = timestamppb.New(start)
		out = append(out, b)
	}
	return out
}

// ---- Invoices ----

// priceBookList loads every price book.
func (s *Server) priceBookList(ctx context.Context) ([]billing.PriceBook, error) {
	var out []billing.PriceBook
	err := eachObject(ctx, s.store, kindPriceBook, "", func(m proto.Message) error {
		pb, err := priceBookFromProto(m.(*cpv1.PriceBook))
		out = append(out, pb)
		return err
	})
	return out, err
}

// eachObject decodes every object of k under parent, page by page.
func eachObject(ctx context.Context, r store.Reader, k *kind, parent string, fn func(proto.Message) error) error {
	tok := ""
	for {
		objs, next, err := r.List(ctx, store.ListQuery{Kind: k.collection, Parent: parent, PageSize: 1000, PageToken: tok})
		if err != nil {
			return err
		}
		for _, o := range objs {
			m, _, err := decode(k, o)
			if err != nil {
				return err
			}
			if err := fn(m); err != nil {
				return err
			}
		}
		if next == "" {
			return nil
		}
		tok = next
	}
}

func priceBookFromProto(m *cpv1.PriceBook) (billing.PriceBook, error) {
	pb := billing.PriceBook{ID: strings.TrimPrefix(m.GetName(), "priceBooks/"), Region: m.GetRegion(), Currency: m.GetCurrency()}
	if m.GetEffectiveTime() != nil {
		pb.EffectiveFrom = m.GetEffectiveTime().AsTime()
	}
	for _, p := range m.GetPrices() {
		bp := billing.Price{Meter: billing.Meter(p.GetMeter()), Unit: p.GetUnit(), UnitSize: p.GetUnitSize(), FreeUnits: p.GetFreeUnits()}
		for _, t := range p.GetTiers() {
			bp.Tiers = append(bp.Tiers, billing.Tier{UpTo: t.GetUpTo(), UnitPrice: t.GetUnitPrice()})
		}
		pb.Prices = append(pb.Prices, bp)
	}
	return pb, nil
}

// invoice returns org's invoice of period: the stored one when finalized,
// else computed, and finalized and stored first when the period has
// closed.
func (s *Server) invoice(ctx context.Context, org string, period billing.Period) (*cpv1.Invoice, error) {
	name := org + "/invoices/" + period.String()
	obj, err := s.store.Get(ctx, kindInvoice.collection, name)
	if err == nil {
		m, _, err := decode(kindInvoice, obj)
		if err != nil {
			return nil, s.toStatus(err, name)
		}
		inv := m.(*cpv1.Invoice)
		return inv, s.credited(ctx, inv)
	}
	if !errors.Is(err, store.ErrNotFound) {
		return nil, s.toStatus(err, name)
	}
	us, err := s.usageStore()
	if err != nil {
		return nil, err
	}
	sums, err := us.SumUsage(ctx, store.UsageQuery{Org: org, Period: period.String()})
	if err != nil {
		return nil, s.toStatus(err, "")
	}
	usage := make([]billing.Usage, 0, len(sums))
	for _, u := range sums {
		usage = append(usage, billing.Usage{Region: u.Region, Meter: billing.Meter(u.Meter), Quantity: u.Quantity})
	}
	books, err := s.priceBookList(ctx)
	if err != nil {
		return nil, s.toStatus(err, "")
	}
	inv, err := billing.BuildInvoice(org, period, usage, books)
	if err != nil {
		if errors.Is(err, billing.ErrNoPriceBook) || errors.Is(err, billing.ErrCurrencies) || errors.Is(err, billing.ErrBadPriceBook) {
			return nil, status.Error(codes.FailedPrecondition, strings.TrimPrefix(err.Error(), "billing: "))
		}
		return nil, s.toStatus(err, name)
	}
	now := s.now()
	if !period.Closed(now, s.cfg.BillingGrace) {
		out := invoiceProto(name, inv)
		out.FinalizeTime = timestamppb.New(period.ClosesAt(s.cfg.BillingGrace))
		out.Credited = "0.00"
		return out, nil
	}
	fin, err := inv.Finalize(now, s.cfg.BillingGrace)
	if err != nil {
		return nil, s.toStatus(err, name)
	}
	out := invoiceProto(name, fin)
	data, err := encode(out, "")
	if err != nil {
		return nil, s.toStatus(err, name)
	}
	stored, err := s.store.Create(ctx, store.Object{Kind: kindInvoice.collection, Name: name, Parent: org, Org: org, Data: data}, "")
	if errors.Is(err, store.ErrAlreadyExists) {
		stored, err = s.store.Get(ctx, kindInvoice.collection, name) // finalized concurrently
	}
	if err != nil {
		return nil, s.toStatus(err, name)
	}
	m, _, err := decode(kindInvoice, stored)
	if err != nil {
		return nil, s.toStatus(err, name)
	}
	s.log.Info("apiserver: invoice finalized", "invoice", name, "total", out.GetTotal())
	res := m.(*cpv1.Invoice)
	return res, s.credited(ctx, res)
}

// credited sets inv.Credited from its credit notes.
func (s *Server) credited(ctx context.Context, inv *cpv1.Invoice) error {
	notes, err := s.creditNotes(ctx, s.store, inv.GetName())
	if err != nil {
		return s.toStatus(err, inv.GetName())
	}
	sum, err := creditSum(notes)
	if err != nil {
		return s.toStatus(err, inv.GetName())
	}
	inv.Credited = billing.FormatDecimal(sum, billing.MinorUnitDigits)
	return nil
}

// creditSum adds the notes' amounts.
func creditSum(notes []*cpv1.CreditNote) (*big.Rat, error) {
	sum := new(big.Rat)
	for _, n := range notes {
		a, err := billing.ParseDecimal(n.GetAmount())
		if err != nil {
			return nil, err
		}
		sum.Add(sum, a)
	}
	return sum, nil
}

func (s *Server) creditNotes(ctx context.Context, r store.Reader, invoice string) ([]*cpv1.CreditNote, error) {
	var out []*cpv1.CreditNote
	err := eachObject(ctx, r, kindCreditNote, invoice, func(m proto.Message) error {
		out = append(out, m.(*cpv1.CreditNote))
		return nil
	})
	return out, err
}

func invoiceProto(name string, inv billing.Invoice) *cpv1.Invoice {
	state := cpv1.Invoice_DRAFT
	if inv.State == billing.Finalized {
		state = cpv1.Invoice_FINALIZED
	}
	c := inv.CSV()
	out := &cpv1.Invoice{Name: name, Period: c.Period, State: state, Currency: c.Currency, Total: c.Total, Unpriced: inv.Unpriced}
	for i, l := range c.Lines {
		out.Lines = append(out.Lines, &cpv1.InvoiceLine{Region: l.Region, Meter: l.Meter, Tier: int32(inv.Lines[i].Tier + 1),
			Description: inv.Lines[i].Description(), Quantity: l.Quantity, Unit: l.Unit, UnitPrice: l.UnitPrice, Amount: l.Amount})
	}
	if !inv.FinalizedAt.IsZero() {
		out.FinalizeTime = timestamppb.New(inv.FinalizedAt)
	}
	return out
}

// parseInvoiceName checks an invoice name and returns it with its period.
func parseInvoiceName(field, name string) (resName, billing.Period, error) {
	r, err := kindInvoice.parseName(field, name)
	if err != nil {
		return r, billing.Period{}, err
	}
	if !periodPattern.MatchString(r.id) {
		return r, billing.Period{}, invalid(field, "%q: the invoice id is its month, YYYY-MM", name)
	}
	p, err := billing.ParsePeriod(r.id)
	if err != nil {
		return r, billing.Period{}, invalid(field, "%q: the invoice id is its month, YYYY-MM", name)
	}
	return r, p, nil
}

func (b billingSvc) GetInvoice(ctx context.Context, req *cpv1.GetInvoiceRequest) (*cpv1.Invoice, error) {
	r, p, err := parseInvoiceName("name", req.GetName())
	if err != nil {
		return nil, err
	}
	if err := b.s.authorize(ctx, target{kind: kindInvoice, verb: "get", res: r}); err != nil {
		return nil, err
	}
	return b.s.invoice(ctx, r.org, p)
}

func (b billingSvc) ExportInvoice(ctx context.Context, req *cpv1.ExportInvoiceRequest) (*cpv1.ExportInvoiceResponse, error) {
	r, p, err := parseInvoiceName("name", req.GetName())
	if err != nil {
		return nil, err
	}
	if err := b.s.authorize(ctx, target{kind: kindInvoice, verb: "export", res: r}); err != nil {
		return nil, err
	}
	inv, err := b.s.invoice(ctx, r.org, p)
	if err != nil {
		return nil, err
	}
	c := billing.InvoiceCSV{Organization: r.org, Period: inv.GetPeriod(), State: inv.GetState().String(), Currency: inv.GetCurrency(), Total: inv.GetTotal()}
	for _, l := range inv.GetLines() {
		c.Lines = append(c.Lines, billing.CSVLine{Region: l.GetRegion(), Meter: l.GetMeter(), Tier: billing.TierLabel(int(l.GetTier()) - 1),
			Quantity: l.GetQuantity(), Unit: l.GetUnit(), UnitPrice: l.GetUnitPrice(), Amount: l.GetAmount()})
	}
	var buf bytes.Buffer
	if err := c.WriteCSV(&buf); err != nil {
		return nil, b.s.toStatus(err, r.name)
	}
	return &cpv1.ExportInvoiceResponse{ContentType: "text/csv", Csv: buf.String()}, nil
}

func (b billingSvc) ListInvoices(ctx context.Context, req *cpv1.ListInvoicesRequest) (*cpv1.ListInvoicesResponse, error) {
	s := b.s
	org, err := s.authorizeOrgList(ctx, kindInvoice, req.GetParent(), req.GetPageSize())
	if err != nil {
		return nil, err
	}
	if _, err := s.store.Get(ctx, kindOrganization.collection, org.name); err != nil {
		return nil, s.toStatus(err, org.name)
	}
	us, err := s.usageStore()
	if err != nil {
		return nil, err
	}
	periods, err := us.UsagePeriods(ctx, org.name)
	if err != nil {
		return nil, s.toStatus(err, "")
	}
	// The current month always has an invoice (a draft, maybe empty).
	if cur := billing.PeriodOf(s.now()).String(); !slices.Contains(periods, cur) {
		periods = append(periods, cur)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(periods)))
	after := ""
	if tok := req.GetPageToken(); tok != "" {
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || !periodPattern.Match(raw) {
			return nil, invalid("page_token", "invalid")
		}
		after = string(raw)
	}
	size := int(req.GetPageSize())
	if size == 0 {
		size = 12
	}
	out := &cpv1.ListInvoicesResponse{}
	for _, ps := range periods {
		if after != "" && ps >= after {
			continue
		}
		if len(out.Invoices) == size {
			out.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(out.Invoices[size-1].GetPeriod()))
			break
		}
		p, err := billing.ParsePeriod(ps)
		if err != nil {
			return nil, s.toStatus(err, "")
		}
		inv, err := s.invoice(ctx, org.name, p)
		if err != nil {
			return nil, err
		}
		out.Invoices = append(out.Invoices, inv)
	}
	return out, nil
}

func (b billingSvc) CreateCreditNote(ctx context.Context, req *cpv1.CreateCreditNoteRequest) (*cpv1.CreditNote, error) {
	s := b.s
	r, p, err := parseInvoiceName("parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	cn := req.GetCreditNote()
	if cn == nil {
		cn = &cpv1.CreditNote{}
	}
	// Authorize before reading the invoice (which may finalize it).
	if err := s.authorize(ctx, target{kind: kindCreditNote, verb: "create", res: kindCreditNote.childName(r, req.GetCreditNoteId())}); err != nil {
		return nil, err
	}
	inv, err := s.invoice(ctx, r.org, p)
	if err != nil {
		return nil, err
	}
	if inv.GetState() != cpv1.Invoice_FINALIZED {
		return nil, status.Errorf(codes.FailedPrecondition, "%s is a draft until %s; a draft changes with its usage instead of taking credit notes",
			r.name, inv.GetFinalizeTime().AsTime().Format(time.RFC3339))
	}
	total, err := billing.ParseDecimal(inv.GetTotal())
	if err != nil {
		return nil, s.toStatus(err, r.name)
	}
	check := billing.Invoice{Period: p, State: billing.Finalized, Total: total}
	if _, err := billing.NewCreditNote(check, req.GetCreditNoteId(), cn.GetReason(), cn.GetAmount(), nil, s.now()); err != nil {
		return nil, status.Error(codes.InvalidArgument, strings.TrimPrefix(err.Error(), "billing: "))
	}
	msg := &cpv1.CreditNote{Reason: cn.GetReason(), Amount: cn.GetAmount(), Currency: inv.GetCurrency()}
	obj, err := s.create(ctx, createReq{k: kindCreditNote, parent: r.name, id: req.GetCreditNoteId(), msg: msg,
		extra: func(w store.Writer, _ store.Object) error {
			// Every credit note of the invoice, this one included, in
			// the create's transaction: together at most the total.
			notes, err := s.creditNotes(ctx, w, r.name)
			if err != nil {
				return err
			}
			sum, err := creditSum(notes)
			if err != nil {
				return err
			}
			if sum.Cmp(total) > 0 {
				return status.Errorf(codes.FailedPrecondition, "credit notes of %s would total %s, more than the invoice's %s",
					r.name, billing.FormatDecimal(sum, billing.MinorUnitDigits), inv.GetTotal())
			}
			return nil
		}})
	return decodeAs[*cpv1.CreditNote](s, kindCreditNote, obj, err)
}

func (b billingSvc) ListCreditNotes(ctx context.Context, req *cpv1.ListCreditNotesRequest) (*cpv1.ListCreditNotesResponse, error) {
	ms, next, err := b.s.list(ctx, kindCreditNote, req.GetParent(), req.GetPageSize(), req.GetPageToken())
	return &cpv1.ListCreditNotesResponse{CreditNotes: asAll[*cpv1.CreditNote](ms), NextPageToken: next}, err
}

// ---- Price books ----

func (p priceBooks) CreatePriceBook(ctx context.Context, req *cpv1.CreatePriceBookRequest) (*cpv1.PriceBook, error) {
	pb := req.GetPriceBook()
	if pb == nil {
		pb = &cpv1.PriceBook{}
	}
	obj, err := p.s.create(ctx, createReq{k: kindPriceBook, id: req.GetPriceBookId(), msg: pb,
		validate: func(name resName) error {
			if pb.GetEffectiveTime() == nil {
				return invalid("price_book.effective_time", "required")
			}
			if r := pb.GetRegion(); r != "" {
				if _, err := kindRegion.parseName("price_book.region", r); err != nil {
					return err
				}
			}
			c := proto.Clone(pb).(*cpv1.PriceBook)
			c.Name = name.name
			b, err := priceBookFromProto(c)
			if err != nil {
				return err
			}
			if err := b.Validate(); err != nil {
				return invalid("price_book", "%s", strings.TrimPrefix(err.Error(), "billing: "))
			}
			return nil
		}})
	return decodeAs[*cpv1.PriceBook](p.s, kindPriceBook, obj, err)
}

func (p priceBooks) GetPriceBook(ctx context.Context, req *cpv1.GetPriceBookRequest) (*cpv1.PriceBook, error) {
	m, err := p.s.get(ctx, kindPriceBook, req.GetName())
	return as[*cpv1.PriceBook](m), err
}

func (p priceBooks) ListPriceBooks(ctx context.Context, req *cpv1.ListPriceBooksRequest) (*cpv1.ListPriceBooksResponse, error) {
	ms, next, err := p.s.list(ctx, kindPriceBook, "", req.GetPageSize(), req.GetPageToken())
	return &cpv1.ListPriceBooksResponse{PriceBooks: asAll[*cpv1.PriceBook](ms), NextPageToken: next}, err
}
