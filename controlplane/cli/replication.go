package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
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

func groupTable(rg *cpv1.ReplicationGroup) *table {
	t := &table{header: []string{"MEMBER", "ROLE", "HEALTHY", "FENCED TO", "BACKLOG"}}
	for _, m := range rg.GetStatus().GetMembers() {
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
follows it again). The final report gives the timeline, RTO and RPO.`
	var (
		group, to, region string
		unplanned         bool
		maxBacklog        int64
		drainTimeout      time.Duration
		noWait            bool
	)
	orgOf := func(name string) string {
		segs := strings.SplitN(name, "/", 3)
		return "organizations/" + segs[1]
	}
	failoverReq := func(validate bool) (*cpv1.FailoverReplicationGroupRequest, error) {
		name, err := kindGroup.resolve([]string{group})
		if err != nil {
			return nil, err
		}
		req := &cpv1.FailoverReplicationGroupRequest{Name: name, Planned: !unplanned, MaxBacklog: maxBacklog,
			DrainTimeout: durationpb.New(drainTimeout), ValidateOnly: validate}
		if to != "" {
			req.TargetCluster = memberName(orgOf(name), to)
		}
		return req, nil
	}
	addCommon := func(c *cobra.Command, withTarget bool) {
		f := c.Flags()
		if withTarget {
			f.StringVar(&group, "group", "", "replication group ORG/GROUP (required)")
			f.StringVar(&to, "to", "", "member cluster to move to (CLUSTER or ORG/CLUSTER; default the next healthy member)")
			f.BoolVar(&unplanned, "unplanned", false, "do not require the active cluster to be reachable (RPO: what it had not replicated)")
			f.Int64Var(&maxBacklog, "max-backlog", 100000, "planned: most entries the target may lack before writes stop")
		}
		f.DurationVar(&drainTimeout, "drain-timeout", 60*time.Second, "how long to wait for the old cluster to replicate everything")
		f.BoolVar(&noWait, "no-wait", false, "print the operation and return without following it")
	}
	plan := &cobra.Command{
		Use:   "plan failover|failback|evacuate [flags]",
		Short: "Print a runbook's steps and its checks' results now, changing nothing",
		Args:  cobra.ExactArgs(1),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			var op *cpv1.Operation
			var err error
			switch args[0] {
			case "failover":
				req, rerr := failoverReq(true)
				if rerr != nil {
					return rerr
				}
				op, err = s.groups().FailoverReplicationGroup(ctx, req)
			case "failback":
				name, rerr := kindGroup.resolve([]string{group})
				if rerr != nil {
					return rerr
				}
				op, err = s.groups().FailbackReplicationGroup(ctx, &cpv1.FailbackReplicationGroupRequest{Name: name, MaxBacklog: maxBacklog, ValidateOnly: true})
			case "evacuate":
				if region == "" || group == "" {
					return usageError(s.cmd, "plan evacuate needs --region and --group ORG (the organization)")
				}
				op, err = s.groups().EvacuateRegion(ctx, &cpv1.EvacuateRegionRequest{Parent: qualify("organizations", group), Region: qualify("regions", region), ValidateOnly: true})
			default:
				return usageError(s.cmd, "plan failover, failback or evacuate")
			}
			if err != nil {
				return err
			}
			if s.g.output == "json" {
				return s.printJSON(op)
			}
			writeRunbook(s.out, op)
			return nil
		}),
	}
	addCommon(plan, true)
	plan.Flags().StringVar(&region, "region", "", "evacuate: the region")

	failover := &cobra.Command{
		Use:   "failover --group ORG/GROUP [--to CLUSTER] [--unplanned]",
		Short: "Move a group's clients to another member (planned: RPO 0)",
		Args:  cobra.NoArgs,
		RunE: g.run(func(ctx context.Context, s *session, _ []string) error {
			if group == "" {
				return usageError(s.cmd, "--group is required")
			}
			req, err := failoverReq(false)
			if err != nil {
				return err
			}
			req.RequestId = randomID("failover")
			op, err := s.groups().FailoverReplicationGroup(ctx, req)
			if err != nil {
				return err
			}
			return s.followRunbook(ctx, op, noWait)
		}),
	}
	addCommon(failover, true)
	failback := &cobra.Command{
		Use:   "failback --group ORG/GROUP",
		Short: "Move a group's clients back to its primary once it has caught up",
		Args:  cobra.NoArgs,
		RunE: g.run(func(ctx context.Context, s *session, _ []string) error {
			name, err := kindGroup.resolve([]string{group})
			if err != nil {
				return err
			}
			op, err := s.groups().FailbackReplicationGroup(ctx, &cpv1.FailbackReplicationGroupRequest{Name: name, MaxBacklog: maxBacklog,
				DrainTimeout: durationpb.New(drainTimeout), RequestId: randomID("failback")})
			if err != nil {
				return err
			}
			return s.followRunbook(ctx, op, noWait)
		}),
	}
	addCommon(failback, true)
	var org string
	evacuate := &cobra.Command{
		Use:   "evacuate --org ORG --region REGION",
		Short: "Fail every group whose active cluster is in the region over to its next member outside it",
		Args:  cobra.NoArgs,
		RunE: g.run(func(ctx context.Context, s *session, _ []string) error {
			if org == "" || region == "" {
				return usageError(s.cmd, "--org and --region are required")
			}
			op, err := s.groups().EvacuateRegion(ctx, &cpv1.EvacuateRegionRequest{Parent: qualify("organizations", org), Region: qualify("regions", region),
				DrainTimeout: durationpb.New(drainTimeout), RequestId: randomID("evacuate")})
			if err != nil {
				return err
			}
			return s.followRunbook(ctx, op, noWait)
		}),
	}
	addCommon(evacuate, false)
	evacuate.Flags().StringVar(&org, "org", "", "organization (required)")
	evacuate.Flags().StringVar(&region, "region", "", "region to evacuate (required)")
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
	cmd.AddCommand(plan, failover, failback, evacuate, watch)
	return cmd
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
