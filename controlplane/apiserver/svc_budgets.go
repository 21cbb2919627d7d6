package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/billing"
	"github.com/magnetar-dev/magnetar/controlplane/store"
	"github.com/magnetar-dev/magnetar/policy"
)

// Budgets are evaluated against the current month's invoice (a draft)
// after every ingestion of the organization's usage and on every read. A
// threshold reached for the first time in a month appends an audit event
// (method "BudgetAlert") and is recorded in the budget's status; an
// enforcing budget at or above its amount makes admission refuse new
// clusters (policy/rego/admission.rego, input.org.budget_exceeded).

var kindBudget = &kind{collection: "budgets", field: "budget", parent: "organizations",
	newMsg:     func() proto.Message { return &cpv1.Budget{} },
	updatable:  []string{"display_name", "amount", "alert_thresholds", "enforce"},
	outputOnly: []string{"status"}}

type budgets struct {
	cpv1.UnimplementedBudgetsServer
	s *Server
}

func checkBudget(b *cpv1.Budget) error {
	if _, err := billing.ParseBudget(b.GetAmount(), b.GetAlertThresholds()); err != nil {
		return invalid("budget", "%s", strings.TrimPrefix(err.Error(), "billing: "))
	}
	return nil
}

func (b budgets) CreateBudget(ctx context.Context, req *cpv1.CreateBudgetRequest) (*cpv1.Budget, error) {
	msg := req.GetBudget()
	if msg == nil {
		msg = &cpv1.Budget{}
	}
	msg.Status = nil
	obj, err := b.s.create(ctx, createReq{k: kindBudget, parent: req.GetParent(), id: req.GetBudgetId(), msg: msg,
		requestID: req.GetRequestId(), validate: func(resName) error { return checkBudget(msg) }})
	if err != nil {
		return nil, err
	}
	return b.s.evaluatedBudget(ctx, obj.Org, obj.Name)
}

func (b budgets) GetBudget(ctx context.Context, req *cpv1.GetBudgetRequest) (*cpv1.Budget, error) {
	m, err := b.s.get(ctx, kindBudget, req.GetName())
	if err != nil {
		return nil, err
	}
	r, _ := kindBudget.parseName("name", req.GetName())
	return b.s.evaluatedBudget(ctx, r.org, m.(*cpv1.Budget).GetName())
}

func (b budgets) ListBudgets(ctx context.Context, req *cpv1.ListBudgetsRequest) (*cpv1.ListBudgetsResponse, error) {
	ms, next, err := b.s.list(ctx, kindBudget, req.GetParent(), req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	evaluated, err := b.s.evaluateBudgets(ctx, req.GetParent())
	if err != nil {
		return nil, err
	}
	out := &cpv1.ListBudgetsResponse{NextPageToken: next}
	for _, m := range ms {
		name := m.(*cpv1.Budget).GetName()
		i := slices.IndexFunc(evaluated, func(e *cpv1.Budget) bool { return e.GetName() == name })
		if i >= 0 {
			out.Budgets = append(out.Budgets, evaluated[i])
		}
	}
	return out, nil
}

func (b budgets) UpdateBudget(ctx context.Context, req *cpv1.UpdateBudgetRequest) (*cpv1.Budget, error) {
	m, err := b.s.update(ctx, kindBudget, nilIfNil(req.GetBudget()), req.GetUpdateMask(), nil,
		func(_ store.Writer, _, merged proto.Message) error { return checkBudget(merged.(*cpv1.Budget)) })
	if err != nil {
		return nil, err
	}
	r, _ := kindBudget.parseName("name", m.(*cpv1.Budget).GetName())
	return b.s.evaluatedBudget(ctx, r.org, r.name)
}

func (b budgets) DeleteBudget(ctx context.Context, req *cpv1.DeleteBudgetRequest) (*emptypb.Empty, error) {
	return empty(b.s.remove(ctx, kindBudget, req.GetName(), req.GetEtag(), nil))
}

// evaluatedBudget evaluates org's budgets and returns the one named.
func (s *Server) evaluatedBudget(ctx context.Context, org, name string) (*cpv1.Budget, error) {
	all, err := s.evaluateBudgets(ctx, org)
	if err != nil {
		return nil, err
	}
	for _, b := range all {
		if b.GetName() == name {
			return b, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "%s: not found", name)
}

// monthSpent is org's current invoice total and currency; zero when no
// price book prices its usage yet.
func (s *Server) monthSpent(ctx context.Context, org string) (billing.Period, *big.Rat, string, error) {
	p := billing.PeriodOf(s.now())
	inv, err := s.invoice(ctx, org, p)
	if status.Code(err) == codes.FailedPrecondition {
		return p, new(big.Rat), "", nil
	}
	if err != nil {
		return p, nil, "", err
	}
	total, err := billing.ParseDecimal(inv.GetTotal())
	if err != nil {
		return p, nil, "", s.toStatus(err, inv.GetName())
	}
	return p, total, inv.GetCurrency(), nil
}

// evaluateBudgets evaluates every budget of org against the month's
// invoice so far, stores statuses that changed, audits new alerts, and
// returns the budgets as evaluated.
func (s *Server) evaluateBudgets(ctx context.Context, org string) ([]*cpv1.Budget, error) {
	var stored []*cpv1.Budget
	if err := eachObject(ctx, s.store, kindBudget, org, func(m proto.Message) error {
		stored = append(stored, m.(*cpv1.Budget))
		return nil
	}); err != nil {
		return nil, s.toStatus(err, org)
	}
	if len(stored) == 0 {
		return nil, nil
	}
	period, spent, currency, err := s.monthSpent(ctx, org)
	if err != nil {
		return nil, err
	}
	now := s.now()
	out := make([]*cpv1.Budget, 0, len(stored))
	for _, b := range stored {
		parsed, err := billing.ParseBudget(b.GetAmount(), b.GetAlertThresholds())
		if err != nil {
			return nil, s.toStatus(fmt.Errorf("apiserver: stored budget %s: %w", b.GetName(), err), b.GetName())
		}
		var prev []int32
		if b.GetStatus().GetPeriod() == period.String() {
			prev = b.GetStatus().GetAlertedThresholds()
		}
		ev := parsed.Evaluate(spent, prev)
		alerted := slices.Clone(prev)
		alerted = append(alerted, ev.NewAlerts...)
		slices.Sort(alerted)
		st := &cpv1.BudgetStatus{Period: period.String(), Spent: billing.FormatDecimal(spent, billing.MinorUnitDigits),
			Currency: currency, State: budgetState(ev.State), AlertedThresholds: alerted}
		old := b.GetStatus()
		changed := old.GetPeriod() != st.Period || old.GetSpent() != st.Spent || old.GetState() != st.State ||
			!slices.Equal(old.GetAlertedThresholds(), st.AlertedThresholds) || old.GetCurrency() != st.Currency
		st.EvaluateTime = timestamppb.New(now)
		if changed {
			if err := s.storeBudgetStatus(ctx, org, b, st, ev.NewAlerts, parsed); err != nil {
				return nil, err
			}
		}
		nb := proto.Clone(b).(*cpv1.Budget)
		nb.Status = st
		out = append(out, nb)
	}
	return out, nil
}

func budgetState(s billing.BudgetState) cpv1.BudgetStatus_State {
	switch s {
	case billing.Alerting:
		return cpv1.BudgetStatus_ALERTING
	case billing.Exceeded:
		return cpv1.BudgetStatus_EXCEEDED
	}
	return cpv1.BudgetStatus_WITHIN
}

// storeBudgetStatus writes the status unless the budget changed since it
// was read (the next evaluation then writes it), with an audit event per
// new alert.
func (s *Server) storeBudgetStatus(ctx context.Context, org string, b *cpv1.Budget, st *cpv1.BudgetStatus, alerts []int32, parsed billing.Budget) error {
	err := s.tx(ctx, func(w store.Writer) error {
		obj, err := w.Get(ctx, kindBudget.collection, b.GetName())
		if err != nil {
			return err
		}
		if obj.Etag != b.GetEtag() {
			return errStaleBudget
		}
		nb := proto.Clone(b).(*cpv1.Budget)
		nb.Status = st
		if obj.Data, err = reencode(obj, nb); err != nil {
			return err
		}
		if _, err := w.Update(ctx, obj, obj.Etag); err != nil {
			return err
		}
		for _, t := range alerts {
			detail, _ := json.Marshal(map[string]any{"threshold_percent": t, "spent": st.GetSpent(), "amount": b.GetAmount(),
				"currency": st.GetCurrency(), "period": st.GetPeriod(), "state": st.GetState().String()})
			if err := w.AppendAudit(ctx, store.AuditEvent{Org: org, Principal: "system/billing", Method: "BudgetAlert",
				Resource: b.GetName(), Outcome: "ok", Detail: detail}); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, errStaleBudget) || errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err == nil && len(alerts) > 0 {
		s.log.Info("apiserver: budget alert", "budget", b.GetName(), "thresholds", alerts, "spent", st.GetSpent(),
			"amount", billing.FormatDecimal(parsed.Amount, billing.MinorUnitDigits))
	}
	return s.toStatus(err, b.GetName())
}

var errStaleBudget = errors.New("apiserver: budget changed since it was evaluated")

// budgetFacts tells admission whether an enforcing budget of org is
// exceeded this month.
func (s *Server) budgetFacts(ctx context.Context, f *policy.OrgFacts) error {
	bs, err := s.evaluateBudgets(ctx, f.Name)
	if err != nil {
		return err
	}
	for _, b := range bs {
		if b.GetEnforce() && b.GetStatus().GetState() == cpv1.BudgetStatus_EXCEEDED {
			f.BudgetExceeded = true
			f.BudgetMessage = fmt.Sprintf("%s: spent %s of %s %s in %s; new clusters are refused", b.GetName(),
				b.GetStatus().GetSpent(), b.GetAmount(), b.GetStatus().GetCurrency(), b.GetStatus().GetPeriod())
			return nil
		}
	}
	return nil
}

// evaluateAfterIngest evaluates the budgets of the organizations whose
// usage arrived; failures are logged (usage is stored either way).
func (s *Server) evaluateAfterIngest(ctx context.Context, recs []store.UsageRecord) {
	seen := map[string]bool{}
	for _, r := range recs {
		if seen[r.Org] {
			continue
		}
		seen[r.Org] = true
		if _, err := s.evaluateBudgets(ctx, r.Org); err != nil {
			s.log.Warn("apiserver: budget evaluation failed", "organization", r.Org, "err", err.Error())
		}
	}
}
