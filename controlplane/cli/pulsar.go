package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

// pulsarHelp is appended to the tenant, namespace and topic commands' help.
const pulsarHelp = `

These calls record the desired state; the cluster's region agent applies it
to the data plane. STATE says how far it got (PENDING, APPLIED or FAILED).`

// crud holds the per-kind calls behind a Pulsar resource's get, list and
// delete commands.
type crud[T proto.Message] struct {
	k     kind
	get   func(ctx context.Context, s *session, name string) (T, error)
	page  func(ctx context.Context, s *session, parent, token string) ([]T, string, error)
	del   func(ctx context.Context, s *session, name string) error
	table func(...T) *table
	list  func([]T) proto.Message
	// delShort is delete's help line; default: refused while it has children.
	delShort string
}

// commands returns get, list and delete for the resource.
func (c crud[T]) commands(g *globals) []*cobra.Command {
	parent := c.k.parent()
	get := &cobra.Command{
		Use:   "get " + c.k.short(),
		Short: "Show one",
		Args:  nameArgs(c.k),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := c.k.resolve(args)
			if err != nil {
				return err
			}
			m, err := c.get(ctx, s, name)
			if err != nil {
				return err
			}
			return s.print(m, c.table(m))
		}),
	}
	list := &cobra.Command{
		Use:   "list " + parent.short(),
		Short: "List all under a parent",
		Args:  nameArgs(parent),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			p, err := parent.resolve(args)
			if err != nil {
				return err
			}
			all, err := listAll(ctx, func(ctx context.Context, tok string) ([]T, string, error) { return c.page(ctx, s, p, tok) })
			if err != nil {
				return err
			}
			return s.print(c.list(all), c.table(all...))
		}),
	}
	delShort := c.delShort
	if delShort == "" {
		delShort = "Delete one (refused while it has children)"
	}
	del := &cobra.Command{
		Use:   "delete " + c.k.short(),
		Short: delShort,
		Args:  nameArgs(c.k),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := c.k.resolve(args)
			if err != nil {
				return err
			}
			if err := c.del(ctx, s, name); err != nil {
				return err
			}
			return s.done(&emptypb.Empty{}, "deleted %s", name)
		}),
	}
	return []*cobra.Command{get, list, del}
}

func newTenantCommand() *cobra.Command {
	cmd, g := newGroup("tenant", "Manage Pulsar tenants of a cluster")
	cmd.Long += pulsarHelp
	var adminRoles []string
	create := &cobra.Command{
		Use:   "create ORG/CLUSTER/TENANT [--admin-roles R1,R2]",
		Short: "Create a Pulsar tenant",
		Args:  nameArgs(kindTenant),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			parent, id, err := kindTenant.resolveChild(args)
			if err != nil {
				return err
			}
			t, err := s.tenants().CreateTenant(ctx, &cpv1.CreateTenantRequest{Parent: parent, TenantId: id, Tenant: &cpv1.Tenant{AdminRoles: adminRoles}})
			if err != nil {
				return err
			}
			return s.print(t, tenantTable(t))
		}),
	}
	create.Flags().StringSliceVar(&adminRoles, "admin-roles", nil, "Pulsar roles (token subjects) that administer the tenant, comma-separated")
	var updRoles []string
	update := &cobra.Command{
		Use:   "update ORG/CLUSTER/TENANT --admin-roles R1,R2",
		Short: "Change a tenant's admin roles",
		Long:  "Change a tenant's admin roles (the whole list; --admin-roles \"\" clears it).",
		Args:  nameArgs(kindTenant),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := kindTenant.resolve(args)
			if err != nil {
				return err
			}
			if !s.cmd.Flags().Changed("admin-roles") {
				return usageError(s.cmd, "nothing to change: give --admin-roles")
			}
			t, err := s.tenants().UpdateTenant(ctx, &cpv1.UpdateTenantRequest{Tenant: &cpv1.Tenant{Name: name, AdminRoles: updRoles},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"admin_roles"}}})
			if err != nil {
				return err
			}
			return s.print(t, tenantTable(t))
		}),
	}
	update.Flags().StringSliceVar(&updRoles, "admin-roles", nil, "Pulsar roles (token subjects) that administer the tenant, comma-separated")
	cmd.AddCommand(create, update)
	cmd.AddCommand(crud[*cpv1.Tenant]{
		k: kindTenant,
		get: func(ctx context.Context, s *session, name string) (*cpv1.Tenant, error) {
			return s.tenants().GetTenant(ctx, &cpv1.GetTenantRequest{Name: name})
		},
		page: func(ctx context.Context, s *session, parent, tok string) ([]*cpv1.Tenant, string, error) {
			r, err := s.tenants().ListTenants(ctx, &cpv1.ListTenantsRequest{Parent: parent, PageToken: tok})
			return r.GetTenants(), r.GetNextPageToken(), err
		},
		del: func(ctx context.Context, s *session, name string) error {
			_, err := s.tenants().DeleteTenant(ctx, &cpv1.DeleteTenantRequest{Name: name})
			return err
		},
		table: tenantTable,
		list:  func(all []*cpv1.Tenant) proto.Message { return &cpv1.ListTenantsResponse{Tenants: all} },
	}.commands(g)...)
	return cmd
}

func newNamespaceCommand() *cobra.Command {
	cmd, g := newGroup("namespace", "Manage Pulsar namespaces of a tenant")
	cmd.Aliases = []string{"ns"}
	cmd.Long += pulsarHelp
	var cf, uf nsPolicyFlags
	var bundles int32
	create := &cobra.Command{
		Use:   "create ORG/CLUSTER/TENANT/NS [policy flags]",
		Short: "Create a Pulsar namespace",
		Long: `Create a Pulsar namespace. Policies not given are left to the data plane's
defaults.` + nsPolicyHelp,
		Args: nameArgs(kindNamespace),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			parent, id, err := kindNamespace.resolveChild(args)
			if err != nil {
				return err
			}
			p := &cpv1.NamespacePolicies{Bundles: bundles}
			if _, err := cf.read(s.cmd, parent, p); err != nil {
				return err
			}
			ns, err := s.namespaces().CreateNamespace(ctx, &cpv1.CreateNamespaceRequest{Parent: parent, NamespaceId: id, Namespace: &cpv1.Namespace{Policies: p}})
			if err != nil {
				return err
			}
			return s.print(ns, namespaceTable(ns))
		}),
	}
	cf.register(create.Flags())
	create.Flags().Int32Var(&bundles, "bundles", 0, "number of bundles (0: the data plane's default; fixed once created)")
	var unset []string
	update := &cobra.Command{
		Use:   "update ORG/CLUSTER/TENANT/NS [policy flags] [--unset POLICY,...]",
		Short: "Change a Pulsar namespace's policies",
		Long: `Change the policies given and leave the others as they are. --unset
stops managing a policy (the data plane keeps its own value): retention,
message-ttl, deduplication, backlog-quota, auto-topic-creation,
schema-compatibility or replication-clusters.` + nsPolicyHelp,
		Args: nameArgs(kindNamespace),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := kindNamespace.resolve(args)
			if err != nil {
				return err
			}
			p := &cpv1.NamespacePolicies{}
			paths, err := uf.read(s.cmd, name, p)
			if err != nil {
				return err
			}
			for _, u := range unset {
				path, ok := nsPolicyPaths[u]
				if !ok {
					return usageError(s.cmd, fmt.Sprintf("--unset %q: want one of %s", u, strings.Join(slices.Sorted(maps.Keys(nsPolicyPaths)), ", ")))
				}
				if slices.Contains(paths, path) {
					return usageError(s.cmd, fmt.Sprintf("--unset %s and a value for it", u))
				}
				paths = append(paths, path)
			}
			if len(paths) == 0 {
				return usageError(s.cmd, "nothing to change: give a policy flag or --unset")
			}
			ns, err := s.namespaces().UpdateNamespace(ctx, &cpv1.UpdateNamespaceRequest{Namespace: &cpv1.Namespace{Name: name, Policies: p},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: paths}})
			if err != nil {
				return err
			}
			return s.print(ns, namespaceTable(ns))
		}),
	}
	uf.register(update.Flags())
	update.Flags().StringSliceVar(&unset, "unset", nil, "policies to stop managing, comma-separated")
	cmd.AddCommand(create, update)
	cmd.AddCommand(crud[*cpv1.Namespace]{
		k: kindNamespace,
		get: func(ctx context.Context, s *session, name string) (*cpv1.Namespace, error) {
			return s.namespaces().GetNamespace(ctx, &cpv1.GetNamespaceRequest{Name: name})
		},
		page: func(ctx context.Context, s *session, parent, tok string) ([]*cpv1.Namespace, string, error) {
			r, err := s.namespaces().ListNamespaces(ctx, &cpv1.ListNamespacesRequest{Parent: parent, PageToken: tok})
			return r.GetNamespaces(), r.GetNextPageToken(), err
		},
		del: func(ctx context.Context, s *session, name string) error {
			_, err := s.namespaces().DeleteNamespace(ctx, &cpv1.DeleteNamespaceRequest{Name: name})
			return err
		},
		table: namespaceTable,
		list:  func(all []*cpv1.Namespace) proto.Message { return &cpv1.ListNamespacesResponse{Namespaces: all} },
	}.commands(g)...)
	return cmd
}

func newTopicCommand() *cobra.Command {
	cmd, g := newGroup("topic", "Manage Pulsar topics of a namespace")
	cmd.Long += pulsarHelp + `

list, produce, consume, peek and stats also talk to the cluster's data
plane (its service and admin URLs), as their help says.`
	var partitions int32
	var nonPersistent bool
	create := &cobra.Command{
		Use:   "create ORG/CLUSTER/TENANT/NS/TOPIC [--partitions N] [--non-persistent]",
		Short: "Create a Pulsar topic (--partitions 0: non-partitioned)",
		Args:  nameArgs(kindTopic),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			parent, id, err := kindTopic.resolveChild(args)
			if err != nil {
				return err
			}
			t := &cpv1.Topic{Partitions: partitions}
			if nonPersistent {
				t.Persistent = proto.Bool(false)
			}
			tp, err := s.topics().CreateTopic(ctx, &cpv1.CreateTopicRequest{Parent: parent, TopicId: id, Topic: t})
			if err != nil {
				return err
			}
			return s.print(tp, topicTable(tp))
		}),
	}
	create.Flags().Int32Var(&partitions, "partitions", 0, "number of partitions (0: a non-partitioned topic)")
	create.Flags().BoolVar(&nonPersistent, "non-persistent", false, "create a non-persistent topic")
	var updPartitions int32
	update := &cobra.Command{
		Use:   "update ORG/CLUSTER/TENANT/NS/TOPIC --partitions N",
		Short: "Add partitions to a partitioned topic",
		Long: `Add partitions to a partitioned topic. Partitions are never removed, and a
non-partitioned topic stays non-partitioned (the API refuses both).`,
		Args: nameArgs(kindTopic),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := kindTopic.resolve(args)
			if err != nil {
				return err
			}
			if !s.cmd.Flags().Changed("partitions") {
				return usageError(s.cmd, "nothing to change: give --partitions")
			}
			tp, err := s.topics().UpdateTopic(ctx, &cpv1.UpdateTopicRequest{Topic: &cpv1.Topic{Name: name, Partitions: updPartitions},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"partitions"}}})
			if err != nil {
				return err
			}
			return s.print(tp, topicTable(tp))
		}),
	}
	update.Flags().Int32Var(&updPartitions, "partitions", 0, "the new number of partitions")
	cmd.AddCommand(create, update)
	c := crud[*cpv1.Topic]{
		k: kindTopic,
		get: func(ctx context.Context, s *session, name string) (*cpv1.Topic, error) {
			return s.topics().GetTopic(ctx, &cpv1.GetTopicRequest{Name: name})
		},
		page: func(ctx context.Context, s *session, parent, tok string) ([]*cpv1.Topic, string, error) {
			r, err := s.topics().ListTopics(ctx, &cpv1.ListTopicsRequest{Parent: parent, PageToken: tok})
			return r.GetTopics(), r.GetNextPageToken(), err
		},
		del: func(ctx context.Context, s *session, name string) error {
			_, err := s.topics().DeleteTopic(ctx, &cpv1.DeleteTopicRequest{Name: name})
			return err
		},
		table:    topicTable,
		list:     func(all []*cpv1.Topic) proto.Message { return &cpv1.ListTopicsResponse{Topics: all} },
		delShort: "Delete one (the data plane's topic with it)",
	}.commands(g)
	// get and delete from crud; list merges the data plane's topics.
	cmd.AddCommand(c[0], newTopicListCommand(g), c[2],
		newProduceCommand(g), newConsumeCommand(g), newPeekCommand(g), newStatsCommand(g))
	return cmd
}
