package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/durationpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

var kindGroup = kind{[]string{"organizations", "replicationGroups"}, []string{"ORG", "GROUP"}}

func (s *session) groups() cpv1.ReplicationGroupsClient {
	return cpv1.NewReplicationGroupsClient(s.conn)
}

func newReplicationGroupCommand() *cobra.Command {
	cmd, g := newGroup("group", "Manage replication groups: namespaces geo-replicated across clusters in several regions")
	var (
		members, namespaces []string
		mode, primary       string
		auto, replSubs      bool
		failoverDelay, back time.Duration
		noWait              bool
	)
	create := &cobra.Command{
		Use:   "create ORG GROUP --member CLUSTER --member CLUSTER --namespace TENANT/NS [--mode active-passive|active-active]",
		Short: "Create a replication group and wait until every member has its namespaces",
		Args:  nameArgs(kindGroup),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			parent, id, err := kindGroup.resolveChild(args)
			if err != nil {
				return err
			}
			rg := &cpv1.ReplicationGroup{Namespaces: namespaces, ReplicatedSubscriptions: replSubs,
				FailoverPolicy: &cpv1.FailoverPolicy{Mode: cpv1.FailoverPolicy_MANUAL}}
			for _, m := range members {
				rg.Members = append(rg.Members, memberName(parent, m))
			}
			if primary != "" {
				rg.Primary = memberName(parent, primary)
			}
			switch mode {
			case "active-passive", "":
				rg.Mode = cpv1.ReplicationGroup_ACTIVE_PASSIVE
			case "active-active":
				rg.Mode = cpv1.ReplicationGroup_ACTIVE_ACTIVE
			default:
				return usageError(s.cmd, "--mode must be active-passive or active-active")
			}
			if auto {
				rg.FailoverPolicy = &cpv1.FailoverPolicy{Mode: cpv1.FailoverPolicy_AUTOMATIC,
					FailoverDelay: durationpb.New(failoverDelay), SwitchBackDelay: durationpb.New(back)}
			}
			op, err := s.groups().CreateReplicationGroup(ctx, &cpv1.CreateReplicationGroupRequest{Parent: parent, ReplicationGroupId: id, ReplicationGroup: rg})
			if err != nil {
				return err
			}
			return s.finishGroupOp(ctx, op, noWait, parent+"/replicationGroups/"+id)
		}),
	}
	cf := create.Flags()
	cf.StringSliceVar(&members, "member", nil, "member cluster (CLUSTER or ORG/CLUSTER), in failover order; at least two, in two regions")
	cf.StringSliceVar(&namespaces, "namespace", nil, "Pulsar namespace TENANT/NS of the group (repeatable)")
	cf.StringVar(&mode, "mode", "active-passive", "active-passive (one primary takes writes) or active-active")
	cf.StringVar(&primary, "primary", "", "active-passive: the member taking writes (default the first)")
	cf.BoolVar(&replSubs, "replicated-subscriptions", true, "consumers should replicate their subscriptions' positions")
	cf.BoolVar(&auto, "automatic-failover", false, "fail over by itself when the active cluster fails health checks")
	cf.DurationVar(&failoverDelay, "failover-delay", 10*time.Second, "automatic: how long the active cluster must fail health checks")
	cf.DurationVar(&back, "switch-back-delay", 60*time.Second, "automatic: how long the primary must pass them before failing back")
	cf.BoolVar(&noWait, "no-wait", false, "print the operation and return without waiting")

	get := &cobra.Command{
		Use:   "get ORG/GROUP",
		Short: "Show a group: members, active cluster, health, replication backlog",
		Args:  nameArgs(kindGroup),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := kindGroup.resolve(args)
			if err != nil {
				return err
			}
			rg, err := s.groups().GetReplicationGroup(ctx, &cpv1.GetReplicationGroupRequest{Name: name})
			if err != nil {
				return err
			}
			return s.print(rg, groupTable(rg))
		}),
	}
	list := &cobra.Command{
		Use:   "list ORG",
		Short: "List an organization's replication groups",
		Args:  nameArgs(kindOrg),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			org, err := kindOrg.resolve(args)
			if err != nil {
				return err
			}
			resp, err := s.groups().ListReplicationGroups(ctx, &cpv1.ListReplicationGroupsRequest{Parent: org, PageSize: 1000})
			if err != nil {
				return err
			}
			t := &table{header: []string{"NAME", "MODE", "ACTIVE", "STATE", "MEMBERS", "NAMESPACES"}}
			for _, rg := range resp.ReplicationGroups {
				t.add(shortName(rg.Name), rg.Mode.String(), shortName(rg.ActiveCluster), rg.State.String(), fmt.Sprint(len(rg.Members)), strings.Join(rg.Namespaces, ","))
			}
			return s.print(resp, t)
		}),
	}
	target := &cobra.Command{
		Use:   "failover-target ORG/GROUP",
		Short: "Show what the failover endpoint answers now (the cluster clients should use)",
		Args:  nameArgs(kindGroup),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := kindGroup.resolve(args)
			if err != nil {
				return err
			}
			ft, err := s.groups().GetFailoverTarget(ctx, &cpv1.GetFailoverTargetRequest{Name: name})
			if err != nil {
				return err
			}
			t := &table{header: []string{"SERVICE URL"}}
			t.add(ft.ServiceUrl)
			return s.print(ft, t)
		}),
	}
	var delNoWait bool
	del := &cobra.Command{
		Use:   "delete ORG/GROUP",
		Short: "Stop replication between the members (the namespaces and their data stay)",
		Args:  nameArgs(kindGroup),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := kindGroup.resolve(args)
			if err != nil {
				return err
			}
			op, err := s.groups().DeleteReplicationGroup(ctx, &cpv1.DeleteReplicationGroupRequest{Name: name})
			if err != nil {
				return err
			}
			if delNoWait {
				return s.printOperation(op)
			}
			op, err = s.wait(ctx, op)
			if err != nil {
				return err
			}
			return s.done(op, "deleted %s\n", name)
		}),
	}
	del.Flags().BoolVar(&delNoWait, "no-wait", false, "print the operation and return without waiting")
	cmd.AddCommand(create, get, list, target, del)
	return cmd
}

// memberName qualifies a member given as CLUSTER or ORG/CLUSTER.
func memberName(org, m string) string {
	if strings.HasPrefix(m, "organizations/") {
		return m
	}
	if strings.Contains(m, "/") {
		return "organizations/" + strings.Replace(m, "/", "/clusters/", 1)
	}
	return org + "/clusters/" + m
}

// groupTable shows a group's members in their failover order.
func groupTable(rg *cpv1.ReplicationGroup) *table {
	t := &table{header: []string{"MEMBER", "ROLE", "HEALTHY", "FENCED TO", "BACKLOG"}}
	members := slices.Clone(rg.GetStatus().GetMembers())
	order := func(m *cpv1.MemberStatus) int {
		if i := slices.Index(rg.GetMembers(), m.Cluster); i >= 0 {
			return i
		}
		return len(rg.GetMembers())
	}
	slices.SortStableFunc(members, func(a, b *cpv1.MemberStatus) int { return order(a) - order(b) })
	for _, m := range members {
		role := "member"
		if m.Cluster == rg.ActiveCluster {
			role = "active"
		}
		var bl []string
		for _, b := range m.Backlog {
			bl = append(bl, fmt.Sprintf("%s:%d", shortName(b.Cluster), b.Messages))
		}
		t.add(shortName(m.Cluster), role, fmt.Sprint(m.Healthy), shortName(m.FencedTo), strings.Join(bl, " "))
	}
	return t
}

func (s *session) finishGroupOp(ctx context.Context, op *cpv1.Operation, noWait bool, group string) error {
	if noWait {
		return s.printOperation(op)
	}
	op, err := s.wait(ctx, op)
	if err != nil {
		return err
	}
	if s.g.output == "json" {
		return s.printJSON(op)
	}
	rg, err := s.groups().GetReplicationGroup(ctx, &cpv1.GetReplicationGroupRequest{Name: group})
	if err != nil {
		return err
	}
	return groupTable(rg).write(s.out)
}

func newRunbookCommand() *cobra.Command {
	cmd, g := newGroup("runbook", "Region failover runbooks: plan, failover, failback, evacuate")
	cmd.Long += `

Each runbook is an operation of the control plane: its steps are recorded as
they run, so a runbook interrupted by a crash of this command or of the
control plane goes on where it stopped ("magnetar runbook watch OPERATION"
follows it again). The final report gives the timeline, RTO and RPO.
"magnetar runbook plan KIND" takes the flags of "magnetar runbook KIND" and
prints the steps and the checks' results now, changing nothing.`
	plan := &cobra.Command{
		Use:   "plan",
		Short: "Print a runbook's steps and its checks' results now, changing nothing",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError(cmd, "missing runbook: plan failover, failback or evacuate")
		},
	}
	for _, rk := range runbookKinds {
		cmd.AddCommand(rk.command(g, false))
		plan.AddCommand(rk.command(g, true))
	}
	watch := &cobra.Command{
		Use:   "watch OPERATION",
		Short: "Follow a runbook until it ends and print its report",
		Args:  nameArgs(kindOperation),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := kindOperation.resolve(args)
			if err != nil {
				return err
			}
			op, err := s.operations().GetOperation(ctx, &cpv1.GetOperationRequest{Name: name})
			if err != nil {
				return err
			}
			return s.followRunbook(ctx, op, false)
		}),
	}
	cmd.AddCommand(plan, watch)
	return cmd
}

// runbookFlags are the flags of one runbook command.
type runbookFlags struct {
	group, to, org, region string
	unplanned              bool
	maxBacklog             int64
	drainTimeout           time.Duration
	noWait                 bool
}

// runbookKind is a runbook: the flags it takes and the call that starts it
// (or, validateOnly, plans it). "runbook KIND" and "runbook plan KIND" are
// built from the same kind, so both take the same flags.
type runbookKind struct {
	name, args, short string
	flags             func(f *pflag.FlagSet, rf *runbookFlags)
	// check returns a usage error's text when a required flag is missing.
	check func(rf *runbookFlags) string
	start func(ctx context.Context, s *session, rf *runbookFlags, validateOnly bool) (*cpv1.Operation, error)
}

func groupFlag(f *pflag.FlagSet, rf *runbookFlags) {
	f.StringVar(&rf.group, "group", "", "replication group ORG/GROUP (required)")
}

func maxBacklogFlag(f *pflag.FlagSet, rf *runbookFlags) {
	f.Int64Var(&rf.maxBacklog, "max-backlog", 100000, "planned: most entries the target may lack before writes stop")
}

func drainTimeoutFlag(f *pflag.FlagSet, rf *runbookFlags) {
	f.DurationVar(&rf.drainTimeout, "drain-timeout", 60*time.Second, "how long to wait for the old cluster to replicate everything")
}

func needGroup(rf *runbookFlags) string {
	if rf.group == "" {
		return "--group is required"
	}
	return ""
}

var runbookKinds = []runbookKind{
	{
		name: "failover", args: "--group ORG/GROUP [--to CLUSTER] [--unplanned]",
		short: "Move a group's clients to another member (planned: RPO 0)",
		flags: func(f *pflag.FlagSet, rf *runbookFlags) {
			groupFlag(f, rf)
			f.StringVar(&rf.to, "to", "", "member cluster to move to (CLUSTER or ORG/CLUSTER; default the next healthy member)")
			f.BoolVar(&rf.unplanned, "unplanned", false, "do not require the active cluster to be reachable (RPO: what it had not replicated)")
			maxBacklogFlag(f, rf)
			drainTimeoutFlag(f, rf)
		},
		check: needGroup,
		start: func(ctx context.Context, s *session, rf *runbookFlags, validateOnly bool) (*cpv1.Operation, error) {
			name, err := kindGroup.resolve([]string{rf.group})
			if err != nil {
				return nil, err
			}
			req := &cpv1.FailoverReplicationGroupRequest{Name: name, Planned: !rf.unplanned, MaxBacklog: rf.maxBacklog,
				DrainTimeout: durationpb.New(rf.drainTimeout), ValidateOnly: validateOnly}
			if rf.to != "" {
				req.TargetCluster = memberName(orgOf(name), rf.to)
			}
			if !validateOnly {
				req.RequestId = randomID("failover")
			}
			return s.groups().FailoverReplicationGroup(ctx, req)
		},
	},
	{
		name: "failback", args: "--group ORG/GROUP",
		short: "Move a group's clients back to its primary once it has caught up",
		flags: func(f *pflag.FlagSet, rf *runbookFlags) {
			groupFlag(f, rf)
			maxBacklogFlag(f, rf)
			drainTimeoutFlag(f, rf)
		},
		check: needGroup,
		start: func(ctx context.Context, s *session, rf *runbookFlags, validateOnly bool) (*cpv1.Operation, error) {
			name, err := kindGroup.resolve([]string{rf.group})
			if err != nil {
				return nil, err
			}
			req := &cpv1.FailbackReplicationGroupRequest{Name: name, MaxBacklog: rf.maxBacklog,
				DrainTimeout: durationpb.New(rf.drainTimeout), ValidateOnly: validateOnly}
			if !validateOnly {
				req.RequestId = randomID("failback")
			}
			return s.groups().FailbackReplicationGroup(ctx, req)
		},
	},
	{
		name: "evacuate", args: "--org ORG --region REGION",
		short: "Fail every group whose active cluster is in the region over to its next member outside it",
		flags: func(f *pflag.FlagSet, rf *runbookFlags) {
			f.StringVar(&rf.org, "org", "", "organization (required)")
			f.StringVar(&rf.region, "region", "", "region to evacuate (required)")
			drainTimeoutFlag(f, rf)
		},
		check: func(rf *runbookFlags) string {
			if rf.org == "" || rf.region == "" {
				return "--org and --region are required"
			}
			return ""
		},
		start: func(ctx context.Context, s *session, rf *runbookFlags, validateOnly bool) (*cpv1.Operation, error) {
			req := &cpv1.EvacuateRegionRequest{Parent: qualify("organizations", rf.org), Region: qualify("regions", rf.region),
				DrainTimeout: durationpb.New(rf.drainTimeout), ValidateOnly: validateOnly}
			if !validateOnly {
				req.RequestId = randomID("evacuate")
			}
			return s.groups().EvacuateRegion(ctx, req)
		},
	},
}

// command builds "runbook KIND", which starts the runbook and follows it,
// or with plan "runbook plan KIND", which prints what it would do.
func (rk runbookKind) command(g *globals, plan bool) *cobra.Command {
	rf := &runbookFlags{}
	short := rk.short
	if plan {
		short = fmt.Sprintf("Print the steps \"runbook %s\" would take and its checks' results now, changing nothing", rk.name)
	}
	c := &cobra.Command{
		Use:   rk.name + " " + rk.args,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: g.run(func(ctx context.Context, s *session, _ []string) error {
			if msg := rk.check(rf); msg != "" {
				return usageError(s.cmd, msg)
			}
			op, err := rk.start(ctx, s, rf, plan)
			if err != nil {
				return err
			}
			if !plan {
				return s.followRunbook(ctx, op, rf.noWait)
			}
			if s.g.output == "json" {
				return s.printJSON(op)
			}
			writeRunbook(s.out, op)
			return nil
		}),
	}
	rk.flags(c.Flags(), rf)
	if !plan {
		c.Flags().BoolVar(&rf.noWait, "no-wait", false, "print the operation and return without following it")
	}
	return c
}

// orgOf is the organization of a resource name under one.
func orgOf(name string) string {
	segs := strings.SplitN(name, "/", 3)
	return "organizations/" + segs[1]
}

// followRunbook prints each step as it changes, then the report.
func (s *session) followRunbook(ctx context.Context, op *cpv1.Operation, noWait bool) error {
	if noWait {
		return s.printOperation(op)
	}
	fmt.Fprintf(s.errOut, "runbook %s (%s %s)\n", shortName(op.GetName()), op.GetType(), shortName(op.GetTarget()))
	seen := map[string]string{}
	show := func(op *cpv1.Operation) {
		for _, st := range op.GetRunbook().GetSteps() {
			line := st.State.String() + " " + st.Detail
			if seen[st.Id] == line || st.State == cpv1.RunbookStep_PENDING {
				continue
			}
			seen[st.Id] = line
			fmt.Fprintf(s.errOut, "  %-8s %-8s %s\n", st.Id, st.State, st.Detail)
		}
	}
	show(op)
	for !op.GetDone() {
		next, err := s.operations().WaitOperation(ctx, &cpv1.WaitOperationRequest{Name: op.GetName(), Timeout: durationpb.New(time.Second)})
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("stopped following runbook %s (it goes on in the control plane): resume with: magnetar runbook watch %s", shortName(op.GetName()), shortName(op.GetName()))
			}
			return err
		}
		op = next
		show(op)
	}
	if s.g.output == "json" {
		if err := s.printJSON(op); err != nil {
			return err
		}
	} else {
		writeRunbook(s.out, op)
	}
	return operationError(op)
}

// writeRunbook prints a runbook's steps, timeline and report.
func writeRunbook(w io.Writer, op *cpv1.Operation) {
	rb := op.GetRunbook()
	kind := "unplanned"
	if rb.GetPlanned() {
		kind = "planned"
	}
	if rb.GetRegion() != "" {
		fmt.Fprintf(w, "%s: evacuate %s (%d groups)\n", op.GetType(), shortName(rb.GetRegion()), len(rb.GetGroups()))
	} else {
		fmt.Fprintf(w, "%s %s: %s -> %s (%s)\n", op.GetType(), shortName(op.GetTarget()), shortName(rb.GetFromCluster()), shortName(rb.GetToCluster()), kind)
	}
	t := &table{header: []string{"STEP", "STATE", "AT", "TOOK", "DETAIL"}}
	for _, st := range rb.GetSteps() {
		at, took := "", ""
		if st.StartTime != nil {
			at = st.StartTime.AsTime().Format("15:04:05.000")
			if st.EndTime != nil {
				took = st.EndTime.AsTime().Sub(st.StartTime.AsTime()).Round(time.Millisecond).String()
			}
		}
		desc := st.Detail
		if desc == "" {
			desc = st.Description
		}
		t.add(st.Id, st.State.String(), at, took, desc)
	}
	t.write(w)
	if r := rb.GetReport(); r.GetSwitchTime() != nil {
		rto := "-"
		if r.GetRto() != nil {
			rto = r.GetRto().AsDuration().Round(time.Millisecond).String()
		}
		asOf := ""
		if r.GetRpoAsOf() != nil {
			asOf = fmt.Sprintf(" as of %s's last report (%s)", shortName(rb.GetFromCluster()), fmtTime(r.GetRpoAsOf().AsTime()))
		}
		fmt.Fprintf(w, "report: RTO %s (writes stopped %s, endpoint switched %s), RPO %d entries%s, drained %d entries after the fence, %d messages replicated to %s during the runbook\n",
			rto, fmtTime(r.GetWritesStoppedTime().AsTime()), fmtTime(r.GetSwitchTime().AsTime()), r.GetRpoMessages(), asOf, r.GetDrainedMessages(),
			r.GetMessagesReplicated(), shortName(rb.GetToCluster()))
	}
	if op.GetError() != nil {
		fmt.Fprintf(w, "failed: %s\n", op.GetError().GetMessage())
	}
}

func fmtTime(t time.Time) string {
	if t.IsZero() || t.Unix() == 0 {
		return "-"
	}
	return t.Format("15:04:05.000")
}
