package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

func newClusterCommand() *cobra.Command {
	cmd, g := newGroup("cluster", "Manage clusters: Pulsar data planes of an organization in a region")
	cmd.Long += `

create, update and delete start a long-running operation and wait for it,
showing progress on stderr; --no-wait prints the operation instead (follow it
with "magnetar operation wait OPERATION").`

	var (
		region, displayName string
		brokers, bookies    int32
		protect, noWait     bool
	)
	create := &cobra.Command{
		Use:   "create ORG CLUSTER --region REGION [--brokers N] [--bookies N]",
		Short: "Create a cluster and wait until it is READY",
		Args:  nameArgs(kindCluster),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			parent, id, err := kindCluster.resolveChild(args)
			if err != nil {
				return err
			}
			if region == "" {
				return usageError(s.cmd, "--region is required")
			}
			// The API reads 0 as "the default (1)": a 0 typed here would
			// silently become 1.
			if brokers < 1 || bookies < 1 {
				return usageError(s.cmd, "--brokers and --bookies must be at least 1")
			}
			op, err := s.clusters().CreateCluster(ctx, &cpv1.CreateClusterRequest{Parent: parent, ClusterId: id, Cluster: &cpv1.Cluster{
				DisplayName: displayName, Region: qualify("regions", region), DeletionProtection: protect,
				Size: &cpv1.ClusterSize{Brokers: brokers, Bookies: bookies}}})
			if err != nil {
				return err
			}
			return s.finishClusterOp(ctx, op, noWait, parent+"/clusters/"+id)
		}),
	}
	cf := create.Flags()
	cf.StringVar(&region, "region", "", "region to run in, e.g. local-a (required)")
	cf.StringVar(&displayName, "display-name", "", "human-readable name")
	cf.Int32Var(&brokers, "brokers", 1, "number of brokers")
	cf.Int32Var(&bookies, "bookies", 1, "number of bookies")
	cf.BoolVar(&protect, "deletion-protection", false, "refuse deletion until this is turned off")
	cf.BoolVar(&noWait, "no-wait", false, "print the operation and return without waiting")

	get := &cobra.Command{
		Use:   "get ORG/CLUSTER",
		Short: "Show a cluster, with its service URL once READY",
		Args:  nameArgs(kindCluster),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := kindCluster.resolve(args)
			if err != nil {
				return err
			}
			c, err := s.clusters().GetCluster(ctx, &cpv1.GetClusterRequest{Name: name})
			if err != nil {
				return err
			}
			return s.print(c, clusterTable(c))
		}),
	}
	list := &cobra.Command{
		Use:   "list ORG",
		Short: "List an organization's clusters",
		Args:  nameArgs(kindOrg),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			org, err := kindOrg.resolve(args)
			if err != nil {
				return err
			}
			all, err := listAll(ctx, func(ctx context.Context, tok string) ([]*cpv1.Cluster, string, error) {
				r, err := s.clusters().ListClusters(ctx, &cpv1.ListClustersRequest{Parent: org, PageToken: tok})
				return r.GetClusters(), r.GetNextPageToken(), err
			})
			if err != nil {
				return err
			}
			return s.print(&cpv1.ListClustersResponse{Clusters: all}, clusterTable(all...))
		}),
	}

	var updNoWait bool
	var updBrokers, updBookies int32
	var updProtect bool
	var updDisplay string
	update := &cobra.Command{
		Use:   "update ORG/CLUSTER [--brokers N] [--bookies N] [--deletion-protection=BOOL] [--display-name S]",
		Short: "Change a cluster's size, deletion protection or display name",
		Args:  nameArgs(kindCluster),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := kindCluster.resolve(args)
			if err != nil {
				return err
			}
			c := &cpv1.Cluster{Name: name, Size: &cpv1.ClusterSize{}}
			var paths []string
			f := s.cmd.Flags()
			if (f.Changed("brokers") && updBrokers < 1) || (f.Changed("bookies") && updBookies < 1) {
				return usageError(s.cmd, "--brokers and --bookies must be at least 1")
			}
			if f.Changed("brokers") {
				c.Size.Brokers, paths = updBrokers, append(paths, "size.brokers")
			}
			if f.Changed("bookies") {
				c.Size.Bookies, paths = updBookies, append(paths, "size.bookies")
			}
			if f.Changed("deletion-protection") {
				c.DeletionProtection, paths = updProtect, append(paths, "deletion_protection")
			}
			if f.Changed("display-name") {
				c.DisplayName, paths = updDisplay, append(paths, "display_name")
			}
			if len(paths) == 0 {
				return usageError(s.cmd, "nothing to change: give --brokers, --bookies, --deletion-protection or --display-name")
			}
			op, err := s.clusters().UpdateCluster(ctx, &cpv1.UpdateClusterRequest{Cluster: c, UpdateMask: &fieldmaskpb.FieldMask{Paths: paths}})
			if err != nil {
				return err
			}
			return s.finishClusterOp(ctx, op, updNoWait, name)
		}),
	}
	uf := update.Flags()
	uf.Int32Var(&updBrokers, "brokers", 0, "number of brokers")
	uf.Int32Var(&updBookies, "bookies", 0, "number of bookies")
	uf.BoolVar(&updProtect, "deletion-protection", false, "refuse deletion while true")
	uf.StringVar(&updDisplay, "display-name", "", "human-readable name")
	uf.BoolVar(&updNoWait, "no-wait", false, "print the operation and return without waiting")

	var delNoWait bool
	del := &cobra.Command{
		Use:   "delete ORG/CLUSTER",
		Short: "Delete a cluster and its data plane (refused while deletion protection is on)",
		Args:  nameArgs(kindCluster),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := kindCluster.resolve(args)
			if err != nil {
				return err
			}
			op, err := s.clusters().DeleteCluster(ctx, &cpv1.DeleteClusterRequest{Name: name})
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
			return s.done(op, "deleted %s", name)
		}),
	}
	del.Flags().BoolVar(&delNoWait, "no-wait", false, "print the operation and return without waiting")

	cmd.AddCommand(create, get, list, update, del)
	return cmd
}

// finishClusterOp prints op (--no-wait) or waits for it and prints the
// cluster as it is then (the final operation with --output json).
func (s *session) finishClusterOp(ctx context.Context, op *cpv1.Operation, noWait bool, cluster string) error {
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
	c, err := s.clusters().GetCluster(ctx, &cpv1.GetClusterRequest{Name: cluster})
	if err != nil {
		return err
	}
	return clusterTable(c).write(s.out)
}

// printOperation prints an operation that is not waited for, with a hint.
func (s *session) printOperation(op *cpv1.Operation) error {
	if err := s.print(op, operationTable(op)); err != nil {
		return err
	}
	if s.g.output == "text" && !op.GetDone() {
		fmt.Fprintf(s.errOut, "follow it with: magnetar operation wait %s\n", shortName(op.GetName()))
	}
	return nil
}

func newOperationCommand() *cobra.Command {
	cmd, g := newGroup("operation", "Follow long-running operations (cluster create, update and delete)")
	get := &cobra.Command{
		Use:   "get OPERATION",
		Short: "Show an operation",
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
			return s.print(op, operationTable(op))
		}),
	}
	var org, target, state string
	list := &cobra.Command{
		Use:   "list [--org ORG] [--target RESOURCE] [--state STATE]",
		Short: "List operations (--org is required except for operators)",
		Args:  cobra.NoArgs,
		RunE: g.run(func(ctx context.Context, s *session, _ []string) error {
			req := &cpv1.ListOperationsRequest{}
			if org != "" {
				name, err := kindOrg.resolve([]string{org})
				if err != nil {
					return err
				}
				req.Organization = name
			}
			if target != "" {
				req.Target = target
				if !strings.HasPrefix(target, "organizations/") {
					// A short cluster path, ORG/CLUSTER.
					if name, err := kindCluster.resolve([]string{target}); err == nil {
						req.Target = name
					}
				}
			}
			if state != "" {
				v, ok := cpv1.Operation_State_value[strings.ToUpper(state)]
				if !ok || v == 0 {
					return usageError(s.cmd, fmt.Sprintf("unknown --state %q: want PENDING, RUNNING, SUCCEEDED, FAILED or CANCELLED", state))
				}
				req.State = cpv1.Operation_State(v)
			}
			all, err := listAll(ctx, func(ctx context.Context, tok string) ([]*cpv1.Operation, string, error) {
				page := &cpv1.ListOperationsRequest{Organization: req.Organization, Target: req.Target, State: req.State, PageToken: tok}
				resp, err := s.operations().ListOperations(ctx, page)
				return resp.GetOperations(), resp.GetNextPageToken(), err
			})
			if err != nil {
				return err
			}
			return s.print(&cpv1.ListOperationsResponse{Operations: all}, operationTable(all...))
		}),
	}
	list.Flags().StringVar(&org, "org", "", "organization whose operations to list")
	list.Flags().StringVar(&target, "target", "", "only operations on this resource (ORG/CLUSTER or a full name)")
	list.Flags().StringVar(&state, "state", "", "only operations in this state (PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED)")
	wait := &cobra.Command{
		Use:   "wait OPERATION",
		Short: "Wait for an operation to finish; exits non-zero if it FAILED or was CANCELLED",
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
			op, err = s.wait(ctx, op)
			if err != nil {
				return err
			}
			return s.print(op, operationTable(op))
		}),
	}
	cancel := &cobra.Command{
		Use:   "cancel OPERATION",
		Short: "Cancel a pending operation (cancelling a cluster's creation deletes the cluster)",
		Args:  nameArgs(kindOperation),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := kindOperation.resolve(args)
			if err != nil {
				return err
			}
			op, err := s.operations().CancelOperation(ctx, &cpv1.CancelOperationRequest{Name: name})
			if err != nil {
				return err
			}
			return s.print(op, operationTable(op))
		}),
	}
	cmd.AddCommand(get, list, wait, cancel)
	return cmd
}
