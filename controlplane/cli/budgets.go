package cli

import (
	"context"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

var kindBudget = kind{[]string{"organizations", "budgets"}, []string{"ORG", "BUDGET"}}

func (s *session) budgets() cpv1.BudgetsClient { return cpv1.NewBudgetsClient(s.conn) }

func budgetTable(bs ...*cpv1.Budget) *table {
	t := &table{header: []string{"BUDGET", "AMOUNT", "THRESHOLDS", "ENFORCE", "PERIOD", "SPENT", "STATE", "ALERTED"}}
	pct := func(ts []int32) string {
		var out []string
		for _, v := range ts {
			out = append(out, num(v)+"%")
		}
		return strings.Join(out, ",")
	}
	for _, b := range bs {
		st := b.GetStatus()
		enforce := "false"
		if b.GetEnforce() {
			enforce = "true"
		}
		t.add(shortName(b.GetName()), b.GetAmount(), pct(b.GetAlertThresholds()), enforce, st.GetPeriod(),
			st.GetSpent()+" "+st.GetCurrency(), enumName(st.GetState(), int32(st.GetState())), pct(st.GetAlertedThresholds()))
	}
	return t
}

func newBudgetCommand() *cobra.Command {
	cmd, g := newGroup("budget", "Manage monthly budgets: alerts at thresholds of the month's invoice, optionally refusing new clusters past the amount")
	var amount string
	var thresholds []int32
	var enforce bool
	create := &cobra.Command{
		Use:   "create ORG BUDGET --amount X [--thresholds 50,80,100] [--enforce]",
		Short: "Create a monthly budget",
		Args:  nameArgs(kindBudget),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			parent, id, err := kindBudget.resolveChild(args)
			if err != nil {
				return err
			}
			b, err := s.budgets().CreateBudget(ctx, &cpv1.CreateBudgetRequest{Parent: parent, BudgetId: id,
				Budget: &cpv1.Budget{Amount: amount, AlertThresholds: thresholds, Enforce: enforce}})
			if err != nil {
				return err
			}
			return s.print(b, budgetTable(b))
		}),
	}
	cf := create.Flags()
	cf.StringVar(&amount, "amount", "", "monthly amount in the invoices' currency (required)")
	cf.Int32SliceVar(&thresholds, "thresholds", []int32{50, 80, 100}, "percentages of the amount that raise an alert")
	cf.BoolVar(&enforce, "enforce", false, "refuse new clusters once the month's invoice reaches the amount")
	get := &cobra.Command{
		Use:   "get ORG/BUDGET",
		Short: "Show a budget and where the month stands",
		Args:  nameArgs(kindBudget),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := kindBudget.resolve(args)
			if err != nil {
				return err
			}
			b, err := s.budgets().GetBudget(ctx, &cpv1.GetBudgetRequest{Name: name})
			if err != nil {
				return err
			}
			return s.print(b, budgetTable(b))
		}),
	}
	list := &cobra.Command{
		Use:   "list ORG",
		Short: "List an organization's budgets",
		Args:  nameArgs(kindOrg),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			org, err := kindOrg.resolve(args)
			if err != nil {
				return err
			}
			all, err := listAll(ctx, func(ctx context.Context, tok string) ([]*cpv1.Budget, string, error) {
				r, err := s.budgets().ListBudgets(ctx, &cpv1.ListBudgetsRequest{Parent: org, PageToken: tok})
				return r.GetBudgets(), r.GetNextPageToken(), err
			})
			if err != nil {
				return err
			}
			return s.print(&cpv1.ListBudgetsResponse{Budgets: all}, budgetTable(all...))
		}),
	}
	var updAmount string
	var updThresholds []int32
	var updEnforce bool
	update := &cobra.Command{
		Use:   "update ORG/BUDGET [--amount X] [--thresholds ...] [--enforce=BOOL]",
		Short: "Change a budget",
		Args:  nameArgs(kindBudget),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := kindBudget.resolve(args)
			if err != nil {
				return err
			}
			b := &cpv1.Budget{Name: name}
			var paths []string
			f := s.cmd.Flags()
			if f.Changed("amount") {
				b.Amount, paths = updAmount, append(paths, "amount")
			}
			if f.Changed("thresholds") {
				b.AlertThresholds, paths = updThresholds, append(paths, "alert_thresholds")
			}
			if f.Changed("enforce") {
				b.Enforce, paths = updEnforce, append(paths, "enforce")
			}
			if len(paths) == 0 {
				return usageError(s.cmd, "nothing to change: give --amount, --thresholds or --enforce")
			}
			out, err := s.budgets().UpdateBudget(ctx, &cpv1.UpdateBudgetRequest{Budget: b, UpdateMask: &fieldmaskpb.FieldMask{Paths: paths}})
			if err != nil {
				return err
			}
			return s.print(out, budgetTable(out))
		}),
	}
	uf := update.Flags()
	uf.StringVar(&updAmount, "amount", "", "monthly amount")
	uf.Int32SliceVar(&updThresholds, "thresholds", nil, "percentages of the amount that raise an alert")
	uf.BoolVar(&updEnforce, "enforce", false, "refuse new clusters once the amount is reached")
	del := &cobra.Command{
		Use:   "delete ORG/BUDGET",
		Short: "Delete a budget",
		Args:  nameArgs(kindBudget),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := kindBudget.resolve(args)
			if err != nil {
				return err
			}
			if _, err := s.budgets().DeleteBudget(ctx, &cpv1.DeleteBudgetRequest{Name: name}); err != nil {
				return err
			}
			return s.done(&emptypb.Empty{}, "deleted %s", name)
		}),
	}
	cmd.AddCommand(create, get, list, update, del)
	return cmd
}
