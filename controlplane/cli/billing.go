package cli

import (
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

var (
	kindInvoice   = kind{[]string{"organizations", "invoices"}, []string{"ORG", "PERIOD"}}
	kindPriceBook = kind{[]string{"priceBooks"}, []string{"PRICEBOOK"}}
)

func (s *session) billing() cpv1.BillingClient       { return cpv1.NewBillingClient(s.conn) }
func (s *session) priceBooks() cpv1.PriceBooksClient { return cpv1.NewPriceBooksClient(s.conn) }

// parseTime reads an RFC 3339 time or a date (YYYY-MM-DD, UTC).
func parseTime(flag, v string) (*timestamppb.Timestamp, error) {
	if v == "" {
		return nil, nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02T15", "2006-01-02", "2006-01"} {
		if t, err := time.Parse(layout, v); err == nil {
			return timestamppb.New(t), nil
		}
	}
	return nil, fmt.Errorf("--%s %q: want RFC 3339 (2026-12-03T10:00:00Z), YYYY-MM-DDTHH, YYYY-MM-DD or YYYY-MM", flag, v)
}

var aggregations = map[string]cpv1.ListUsageRecordsRequest_Aggregation{
	"none": cpv1.ListUsageRecordsRequest_NONE, "hour": cpv1.ListUsageRecordsRequest_HOUR, "day": cpv1.ListUsageRecordsRequest_DAY,
	"month": cpv1.ListUsageRecordsRequest_MONTH, "meter": cpv1.ListUsageRecordsRequest_METER,
}

func newUsageCommand() *cobra.Command {
	cmd, g := newGroup("usage", "Read an organization's metered usage: hourly records per cluster and meter")
	var cluster, meter, from, to, by string
	var asCSV bool
	list := &cobra.Command{
		Use:   "list ORG [--by none|hour|day|month|meter] [--cluster CLUSTER] [--meter METER] [--from T] [--to T] [--csv]",
		Short: "List usage records, or their sums per meter and hour, day or month",
		Args:  nameArgs(kindOrg),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			org, err := kindOrg.resolve(args)
			if err != nil {
				return err
			}
			agg, ok := aggregations[by]
			if !ok {
				return usageError(s.cmd, fmt.Sprintf("--by must be none, hour, day, month or meter, not %q", by))
			}
			req := &cpv1.ListUsageRecordsRequest{Parent: org, Meter: meter, Aggregation: agg}
			if cluster != "" {
				parts := []string{cluster}
				if !strings.Contains(cluster, "/") {
					parts = []string{strings.TrimPrefix(org, "organizations/"), cluster}
				}
				if req.Cluster, err = kindCluster.resolve(parts); err != nil {
					return err
				}
			}
			if req.StartTime, err = parseTime("from", from); err != nil {
				return usageError(s.cmd, err.Error())
			}
			if req.EndTime, err = parseTime("to", to); err != nil {
				return usageError(s.cmd, err.Error())
			}
			if agg != cpv1.ListUsageRecordsRequest_NONE {
				resp, err := s.billing().ListUsageRecords(ctx, req)
				if err != nil {
					return err
				}
				t := &table{header: []string{"METER", "START", "QUANTITY", "RECORDS"}}
				for _, b := range resp.GetBuckets() {
					t.add(b.GetMeter(), ts(b.GetStartTime()), num(b.GetQuantity()), num(b.GetRecords()))
				}
				if asCSV {
					return writeCSV(s, t)
				}
				return s.print(resp, t)
			}
			all, err := listAll(ctx, func(ctx context.Context, tok string) ([]*cpv1.UsageRecord, string, error) {
				r := proto2(req)
				r.PageToken, r.PageSize = tok, 1000
				resp, err := s.billing().ListUsageRecords(ctx, r)
				return resp.GetRecords(), resp.GetNextPageToken(), err
			})
			if err != nil {
				return err
			}
			t := &table{header: []string{"HOUR", "CLUSTER", "METER", "QUANTITY", "KIND", "PERIOD", "REVISION"}}
			for _, r := range all {
				t.add(ts(r.GetHour()), shortName(r.GetCluster()), r.GetMeter(), num(r.GetQuantity()), enumName(r.GetKind(), int32(r.GetKind())),
					r.GetBillingPeriod(), num(r.GetRevision()))
			}
			if asCSV {
				return writeCSV(s, t)
			}
			return s.print(&cpv1.ListUsageRecordsResponse{Records: all}, t)
		}),
	}
	f := list.Flags()
	f.StringVar(&by, "by", "none", "none (every record), hour, day, month or meter (sums)")
	f.StringVar(&cluster, "cluster", "", "only this cluster (CLUSTER or ORG/CLUSTER)")
	f.StringVar(&meter, "meter", "", "only this meter (bytes_in, messages_out, ...)")
	f.StringVar(&from, "from", "", "hours at or after this time (RFC 3339, YYYY-MM-DD or YYYY-MM; UTC)")
	f.StringVar(&to, "to", "", "hours before this time")
	f.BoolVar(&asCSV, "csv", false, "print CSV instead of a table")
	cmd.AddCommand(list)
	return cmd
}

// proto2 copies a list request (each page is its own request).
func proto2(r *cpv1.ListUsageRecordsRequest) *cpv1.ListUsageRecordsRequest {
	return &cpv1.ListUsageRecordsRequest{Parent: r.Parent, Cluster: r.Cluster, Meter: r.Meter, StartTime: r.StartTime,
		EndTime: r.EndTime, Aggregation: r.Aggregation}
}

// writeCSV prints a table as CSV, header in lower case.
func writeCSV(s *session, t *table) error {
	w := csv.NewWriter(s.out)
	head := make([]string, len(t.header))
	for i, h := range t.header {
		head[i] = strings.ToLower(h)
	}
	if err := w.Write(head); err != nil {
		return err
	}
	if err := w.WriteAll(t.rows); err != nil {
		return err
	}
	return w.Error()
}

func invoiceTable(invs ...*cpv1.Invoice) *table {
	t := &table{header: []string{"INVOICE", "STATE", "TOTAL", "CREDITED", "CURRENCY", "FINALIZE TIME"}}
	for _, i := range invs {
		t.add(shortName(i.GetName()), enumName(i.GetState(), int32(i.GetState())), i.GetTotal(), i.GetCredited(), i.GetCurrency(), ts(i.GetFinalizeTime()))
	}
	return t
}

func invoiceLines(inv *cpv1.Invoice) *table {
	t := &table{header: []string{"REGION", "METER", "TIER", "QUANTITY", "UNIT", "UNIT PRICE", "AMOUNT"}}
	for _, l := range inv.GetLines() {
		tier := num(l.GetTier())
		if l.GetTier() == 0 {
			tier = "free"
		}
		t.add(shortName(l.GetRegion()), l.GetMeter(), tier, l.GetQuantity(), l.GetUnit(), l.GetUnitPrice(), l.GetAmount())
	}
	t.add("", "total", "", "", "", "", inv.GetTotal()+" "+inv.GetCurrency())
	return t
}

func newInvoiceCommand() *cobra.Command {
	cmd, g := newGroup("invoice", "Read an organization's monthly invoices; operators issue credit notes")
	list := &cobra.Command{
		Use:   "list ORG",
		Short: "List invoices, newest first (the current month is a draft)",
		Args:  nameArgs(kindOrg),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			org, err := kindOrg.resolve(args)
			if err != nil {
				return err
			}
			all, err := listAll(ctx, func(ctx context.Context, tok string) ([]*cpv1.Invoice, string, error) {
				r, err := s.billing().ListInvoices(ctx, &cpv1.ListInvoicesRequest{Parent: org, PageToken: tok})
				return r.GetInvoices(), r.GetNextPageToken(), err
			})
			if err != nil {
				return err
			}
			return s.print(&cpv1.ListInvoicesResponse{Invoices: all}, invoiceTable(all...))
		}),
	}
	get := &cobra.Command{
		Use:   "get ORG/PERIOD",
		Short: "Show an invoice and its line items (PERIOD is YYYY-MM)",
		Args:  nameArgs(kindInvoice),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := kindInvoice.resolve(args)
			if err != nil {
				return err
			}
			inv, err := s.billing().GetInvoice(ctx, &cpv1.GetInvoiceRequest{Name: name})
			if err != nil {
				return err
			}
			if s.g.output == "json" {
				return s.printJSON(inv)
			}
			if err := invoiceTable(inv).write(s.out); err != nil {
				return err
			}
			fmt.Fprintln(s.out)
			return invoiceLines(inv).write(s.out)
		}),
	}
	export := &cobra.Command{
		Use:   "export ORG/PERIOD",
		Short: "Print an invoice as CSV",
		Args:  nameArgs(kindInvoice),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := kindInvoice.resolve(args)
			if err != nil {
				return err
			}
			r, err := s.billing().ExportInvoice(ctx, &cpv1.ExportInvoiceRequest{Name: name})
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(s.out, r.GetCsv())
			return err
		}),
	}
	var amount, reason, id string
	credit := &cobra.Command{
		Use:   "credit ORG/PERIOD --amount X --reason TEXT [--id ID]",
		Short: "Issue a credit note against a finalized invoice (operators)",
		Args:  nameArgs(kindInvoice),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := kindInvoice.resolve(args)
			if err != nil {
				return err
			}
			if id == "" {
				id = randomID("cn-")
			}
			cn, err := s.billing().CreateCreditNote(ctx, &cpv1.CreateCreditNoteRequest{Parent: name, CreditNoteId: id,
				CreditNote: &cpv1.CreditNote{Amount: amount, Reason: reason}})
			if err != nil {
				return err
			}
			t := &table{header: []string{"CREDIT NOTE", "AMOUNT", "REASON", "CREATED"}}
			t.add(shortName(cn.GetName()), cn.GetAmount()+" "+cn.GetCurrency(), cn.GetReason(), ts(cn.GetCreateTime()))
			return s.print(cn, t)
		}),
	}
	cf := credit.Flags()
	cf.StringVar(&amount, "amount", "", "amount to credit, a decimal with at most two places (required)")
	cf.StringVar(&reason, "reason", "", "why (required)")
	cf.StringVar(&id, "id", "", "credit note id (default: random)")
	cmd.AddCommand(list, get, export, credit)
	return cmd
}

func priceBookTable(pbs ...*cpv1.PriceBook) *table {
	t := &table{header: []string{"PRICEBOOK", "REGION", "CURRENCY", "EFFECTIVE", "METERS"}}
	for _, p := range pbs {
		var meters []string
		for _, pr := range p.GetPrices() {
			meters = append(meters, pr.GetMeter())
		}
		t.add(shortName(p.GetName()), shortName(p.GetRegion()), p.GetCurrency(), ts(p.GetEffectiveTime()), strings.Join(meters, ","))
	}
	return t
}

func newPriceBookCommand() *cobra.Command {
	cmd, g := newGroup("pricebook", "Manage price books: versioned prices per region and meter (operators create them)")
	var file string
	create := &cobra.Command{
		Use:   "create PRICEBOOK --file BOOK.json",
		Short: "Create a price book version from a JSON PriceBook (see docs/billing.md)",
		Args:  nameArgs(kindPriceBook),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			_, id, err := kindPriceBook.resolveChild(args)
			if err != nil {
				return err
			}
			raw, err := os.ReadFile(file)
			if err != nil {
				return fmt.Errorf("--file: %w", err)
			}
			pb := &cpv1.PriceBook{}
			if err := protojson.Unmarshal(raw, pb); err != nil {
				return fmt.Errorf("--file %s: %w", file, err)
			}
			out, err := s.priceBooks().CreatePriceBook(ctx, &cpv1.CreatePriceBookRequest{PriceBookId: id, PriceBook: pb})
			if err != nil {
				return err
			}
			return s.print(out, priceBookTable(out))
		}),
	}
	create.Flags().StringVar(&file, "file", "", "JSON of the PriceBook message (required)")
	get := &cobra.Command{
		Use:   "get PRICEBOOK",
		Short: "Show a price book",
		Args:  nameArgs(kindPriceBook),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := kindPriceBook.resolve(args)
			if err != nil {
				return err
			}
			pb, err := s.priceBooks().GetPriceBook(ctx, &cpv1.GetPriceBookRequest{Name: name})
			if err != nil {
				return err
			}
			return s.print(pb, priceBookTable(pb))
		}),
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List price books",
		Args:  cobra.NoArgs,
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			all, err := listAll(ctx, func(ctx context.Context, tok string) ([]*cpv1.PriceBook, string, error) {
				r, err := s.priceBooks().ListPriceBooks(ctx, &cpv1.ListPriceBooksRequest{PageToken: tok})
				return r.GetPriceBooks(), r.GetNextPageToken(), err
			})
			if err != nil {
				return err
			}
			return s.print(&cpv1.ListPriceBooksResponse{PriceBooks: all}, priceBookTable(all...))
		}),
	}
	cmd.AddCommand(create, get, list)
	return cmd
}
