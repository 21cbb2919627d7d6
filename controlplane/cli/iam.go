package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/policy/roles"
)

func newOrgCommand() *cobra.Command {
	cmd, g := newGroup("org", "Manage organizations (tenants of the service); create and delete need an operator key")
	var displayName string
	var allowedRegions []string
	var maxClusters int32
	create := &cobra.Command{
		Use:   "create ORG",
		Short: "Create an organization",
		Args:  nameArgs(kindOrg),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			_, id, err := kindOrg.resolveChild(args)
			if err != nil {
				return err
			}
			regions := make([]string, len(allowedRegions))
			for i, r := range allowedRegions {
				regions[i] = qualify("regions", r)
			}
			o, err := s.orgs().CreateOrganization(ctx, &cpv1.CreateOrganizationRequest{OrganizationId: id,
				Organization: &cpv1.Organization{DisplayName: displayName, AllowedRegions: regions, MaxClusters: maxClusters}})
			if err != nil {
				return err
			}
			return s.print(o, orgTable(o))
		}),
	}
	create.Flags().StringVar(&displayName, "display-name", "", "human-readable name")
	create.Flags().StringSliceVar(&allowedRegions, "allowed-regions", nil, "regions the organization may place clusters in, comma-separated (default: all)")
	create.Flags().Int32Var(&maxClusters, "max-clusters", 0, "maximum number of clusters (0: the service default)")

	get := &cobra.Command{
		Use:   "get ORG",
		Short: "Show an organization",
		Args:  nameArgs(kindOrg),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := kindOrg.resolve(args)
			if err != nil {
				return err
			}
			o, err := s.orgs().GetOrganization(ctx, &cpv1.GetOrganizationRequest{Name: name})
			if err != nil {
				return err
			}
			return s.print(o, orgTable(o))
		}),
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the organizations the key can see",
		Args:  cobra.NoArgs,
		RunE: g.run(func(ctx context.Context, s *session, _ []string) error {
			all, err := listAll(ctx, func(ctx context.Context, tok string) ([]*cpv1.Organization, string, error) {
				r, err := s.orgs().ListOrganizations(ctx, &cpv1.ListOrganizationsRequest{PageToken: tok})
				return r.GetOrganizations(), r.GetNextPageToken(), err
			})
			if err != nil {
				return err
			}
			return s.print(&cpv1.ListOrganizationsResponse{Organizations: all}, orgTable(all...))
		}),
	}
	del := &cobra.Command{
		Use:   "delete ORG",
		Short: "Delete an organization",
		Args:  nameArgs(kindOrg),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := kindOrg.resolve(args)
			if err != nil {
				return err
			}
			if _, err := s.orgs().DeleteOrganization(ctx, &cpv1.DeleteOrganizationRequest{Name: name}); err != nil {
				return err
			}
			return s.done(&emptypb.Empty{}, "deleted %s", name)
		}),
	}
	cmd.AddCommand(create, get, list, del)
	return cmd
}

func newRegionCommand() *cobra.Command {
	cmd, g := newGroup("region", "Manage regions (operator): where clusters run")
	var displayName string
	create := &cobra.Command{
		Use:   "create REGION",
		Short: "Register a region (operator)",
		Args:  nameArgs(kindRegion),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			_, id, err := kindRegion.resolveChild(args)
			if err != nil {
				return err
			}
			r, err := s.regions().CreateRegion(ctx, &cpv1.CreateRegionRequest{RegionId: id, Region: &cpv1.Region{DisplayName: displayName}})
			if err != nil {
				return err
			}
			return s.print(r, regionTable(r))
		}),
	}
	create.Flags().StringVar(&displayName, "display-name", "", "human-readable name")
	get := &cobra.Command{
		Use:   "get REGION",
		Short: "Show a region and its health",
		Args:  nameArgs(kindRegion),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := kindRegion.resolve(args)
			if err != nil {
				return err
			}
			r, err := s.regions().GetRegion(ctx, &cpv1.GetRegionRequest{Name: name})
			if err != nil {
				return err
			}
			return s.print(r, regionTable(r))
		}),
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List regions",
		Args:  cobra.NoArgs,
		RunE: g.run(func(ctx context.Context, s *session, _ []string) error {
			all, err := listAll(ctx, func(ctx context.Context, tok string) ([]*cpv1.Region, string, error) {
				r, err := s.regions().ListRegions(ctx, &cpv1.ListRegionsRequest{PageToken: tok})
				return r.GetRegions(), r.GetNextPageToken(), err
			})
			if err != nil {
				return err
			}
			return s.print(&cpv1.ListRegionsResponse{Regions: all}, regionTable(all...))
		}),
	}
	cmd.AddCommand(create, get, list)
	return cmd
}

func newServiceAccountCommand() *cobra.Command {
	cmd, g := newGroup("serviceaccount", "Manage service accounts: machine identities that authenticate with API keys")
	cmd.Aliases = []string{"sa"}
	var displayName, description string
	create := &cobra.Command{
		Use:   "create ORG SA",
		Short: "Create a service account",
		Args:  nameArgs(kindSA),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			parent, id, err := kindSA.resolveChild(args)
			if err != nil {
				return err
			}
			a, err := s.sas().CreateServiceAccount(ctx, &cpv1.CreateServiceAccountRequest{Parent: parent, ServiceAccountId: id,
				ServiceAccount: &cpv1.ServiceAccount{DisplayName: displayName, Description: description}})
			if err != nil {
				return err
			}
			return s.print(a, saTable(a))
		}),
	}
	create.Flags().StringVar(&displayName, "display-name", "", "human-readable name")
	create.Flags().StringVar(&description, "description", "", "what the account is for")
	list := &cobra.Command{
		Use:   "list ORG",
		Short: "List an organization's service accounts",
		Args:  nameArgs(kindOrg),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			parent, err := kindOrg.resolve(args)
			if err != nil {
				return err
			}
			all, err := listAll(ctx, func(ctx context.Context, tok string) ([]*cpv1.ServiceAccount, string, error) {
				r, err := s.sas().ListServiceAccounts(ctx, &cpv1.ListServiceAccountsRequest{Parent: parent, PageToken: tok})
				return r.GetServiceAccounts(), r.GetNextPageToken(), err
			})
			if err != nil {
				return err
			}
			return s.print(&cpv1.ListServiceAccountsResponse{ServiceAccounts: all}, saTable(all...))
		}),
	}
	cmd.AddCommand(create, list)
	return cmd
}

func newAPIKeyCommand() *cobra.Command {
	cmd, g := newGroup("apikey", "Manage API keys of service accounts")
	var id, displayName string
	var expireIn time.Duration
	create := &cobra.Command{
		Use:   "create ORG SA",
		Short: "Create an API key and print its secret (shown only this once)",
		Args:  nameArgs(kindSA),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			parent, err := kindSA.resolve(args)
			if err != nil {
				return err
			}
			if id == "" {
				id = randomID("key-")
			}
			k := &cpv1.ApiKey{DisplayName: displayName}
			if expireIn < 0 {
				return usageError(s.cmd, "--expire-in must not be negative")
			}
			if expireIn > 0 {
				k.ExpireTime = timestamppb.New(time.Now().Add(expireIn))
			}
			key, err := s.sas().CreateApiKey(ctx, &cpv1.CreateApiKeyRequest{Parent: parent, ApiKeyId: id, ApiKey: k})
			if err != nil {
				return err
			}
			if s.g.output == "json" {
				return s.printJSON(key)
			}
			if err := apiKeyTable(key).write(s.out); err != nil {
				return err
			}
			fmt.Fprintln(s.errOut, "The secret below is shown only once; store it now.")
			_, err = fmt.Fprintf(s.out, "SECRET: %s\n", key.GetSecret())
			return err
		}),
	}
	create.Flags().StringVar(&id, "id", "", "key id (default: a random one)")
	create.Flags().StringVar(&displayName, "display-name", "", "human-readable name")
	create.Flags().DurationVar(&expireIn, "expire-in", 0, "the key stops working after this long, e.g. 720h (default: never)")
	list := &cobra.Command{
		Use:   "list ORG SA",
		Short: "List a service account's API keys (without secrets)",
		Args:  nameArgs(kindSA),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			parent, err := kindSA.resolve(args)
			if err != nil {
				return err
			}
			all, err := listAll(ctx, func(ctx context.Context, tok string) ([]*cpv1.ApiKey, string, error) {
				r, err := s.sas().ListApiKeys(ctx, &cpv1.ListApiKeysRequest{Parent: parent, PageToken: tok})
				return r.GetApiKeys(), r.GetNextPageToken(), err
			})
			if err != nil {
				return err
			}
			return s.print(&cpv1.ListApiKeysResponse{ApiKeys: all}, apiKeyTable(all...))
		}),
	}
	cmd.AddCommand(create, list)
	return cmd
}

func newRoleBindingCommand() *cobra.Command {
	cmd, g := newGroup("rolebinding", "Manage role bindings: grant a role to a member on a resource and everything under it")
	var id, role, member, resource string
	create := &cobra.Command{
		Use:   "create ORG --role ROLE --member MEMBER [--resource RESOURCE]",
		Short: "Grant a role",
		Long: `Grant ROLE to MEMBER (a principal's full name, e.g.
organizations/acme/serviceAccounts/ci) on RESOURCE (a full resource name;
default: the organization) and everything under it. "roles/" may be omitted
from ROLE. The roles:

` + roleHelp(),
		Args: nameArgs(kindOrg),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			org, err := kindOrg.resolve(args)
			if err != nil {
				return err
			}
			if role == "" || member == "" {
				return usageError(s.cmd, "--role and --member are required")
			}
			if id == "" {
				id = randomID("rb-")
			}
			res := resource
			if res == "" {
				res = org
			}
			if !strings.HasPrefix(role, "roles/") {
				role = "roles/" + role
			}
			b, err := s.bindings().CreateRoleBinding(ctx, &cpv1.CreateRoleBindingRequest{Parent: org, RoleBindingId: id,
				RoleBinding: &cpv1.RoleBinding{Role: role, Member: member, Resource: res}})
			if err != nil {
				return err
			}
			return s.print(b, bindingTable(b))
		}),
	}
	create.Flags().StringVar(&id, "id", "", "binding id (default: a random one)")
	create.Flags().StringVar(&role, "role", "", "role to grant, e.g. org.admin")
	create.Flags().StringVar(&member, "member", "", "principal, e.g. organizations/acme/serviceAccounts/ci")
	create.Flags().StringVar(&resource, "resource", "", "resource the role applies to (default: the organization)")
	list := &cobra.Command{
		Use:   "list ORG",
		Short: "List an organization's role bindings",
		Args:  nameArgs(kindOrg),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			org, err := kindOrg.resolve(args)
			if err != nil {
				return err
			}
			all, err := listAll(ctx, func(ctx context.Context, tok string) ([]*cpv1.RoleBinding, string, error) {
				r, err := s.bindings().ListRoleBindings(ctx, &cpv1.ListRoleBindingsRequest{Parent: org, PageToken: tok})
				return r.GetRoleBindings(), r.GetNextPageToken(), err
			})
			if err != nil {
				return err
			}
			return s.print(&cpv1.ListRoleBindingsResponse{RoleBindings: all}, bindingTable(all...))
		}),
	}
	del := &cobra.Command{
		Use:   "delete ORG/BINDING",
		Short: "Delete a role binding",
		Args:  nameArgs(kindBinding),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := kindBinding.resolve(args)
			if err != nil {
				return err
			}
			if _, err := s.bindings().DeleteRoleBinding(ctx, &cpv1.DeleteRoleBindingRequest{Name: name}); err != nil {
				return err
			}
			return s.done(&emptypb.Empty{}, "deleted %s", name)
		}),
	}
	cmd.AddCommand(create, list, del)
	return cmd
}

func newUserCommand() *cobra.Command {
	cmd, g := newGroup("user", "Manage the users of an organization")
	var email, displayName string
	create := &cobra.Command{
		Use:   "create ORG/USER --email ADDRESS [--display-name S]",
		Short: "Create a user",
		Args:  nameArgs(kindUser),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			parent, id, err := kindUser.resolveChild(args)
			if err != nil {
				return err
			}
			if email == "" {
				return usageError(s.cmd, "--email is required")
			}
			u, err := s.users().CreateUser(ctx, &cpv1.CreateUserRequest{Parent: parent, UserId: id,
				User: &cpv1.User{Email: email, DisplayName: displayName}})
			if err != nil {
				return err
			}
			return s.print(u, userTable(u))
		}),
	}
	create.Flags().StringVar(&email, "email", "", "contact address (required)")
	create.Flags().StringVar(&displayName, "display-name", "", "human-readable name")
	var updEmail, updDisplay string
	update := &cobra.Command{
		Use:   "update ORG/USER [--email ADDRESS] [--display-name S]",
		Short: "Change a user's email or display name",
		Args:  nameArgs(kindUser),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			name, err := kindUser.resolve(args)
			if err != nil {
				return err
			}
			u := &cpv1.User{Name: name}
			var paths []string
			f := s.cmd.Flags()
			if f.Changed("email") {
				u.Email, paths = updEmail, append(paths, "email")
			}
			if f.Changed("display-name") {
				u.DisplayName, paths = updDisplay, append(paths, "display_name")
			}
			if len(paths) == 0 {
				return usageError(s.cmd, "nothing to change: give --email or --display-name")
			}
			out, err := s.users().UpdateUser(ctx, &cpv1.UpdateUserRequest{User: u, UpdateMask: &fieldmaskpb.FieldMask{Paths: paths}})
			if err != nil {
				return err
			}
			return s.print(out, userTable(out))
		}),
	}
	update.Flags().StringVar(&updEmail, "email", "", "contact address")
	update.Flags().StringVar(&updDisplay, "display-name", "", "human-readable name")
	cmd.AddCommand(create, update)
	cmd.AddCommand(crud[*cpv1.User]{
		k: kindUser,
		get: func(ctx context.Context, s *session, name string) (*cpv1.User, error) {
			return s.users().GetUser(ctx, &cpv1.GetUserRequest{Name: name})
		},
		page: func(ctx context.Context, s *session, parent, tok string) ([]*cpv1.User, string, error) {
			r, err := s.users().ListUsers(ctx, &cpv1.ListUsersRequest{Parent: parent, PageToken: tok})
			return r.GetUsers(), r.GetNextPageToken(), err
		},
		del: func(ctx context.Context, s *session, name string) error {
			_, err := s.users().DeleteUser(ctx, &cpv1.DeleteUserRequest{Name: name})
			return err
		},
		table:    userTable,
		list:     func(all []*cpv1.User) proto.Message { return &cpv1.ListUsersResponse{Users: all} },
		delShort: "Delete one",
	}.commands(g)...)
	return cmd
}

func newAuditCommand() *cobra.Command {
	cmd, g := newGroup("audit", "Read an organization's audit log")
	var method, principal, outcome string
	var last int
	list := &cobra.Command{
		Use:   "list ORG [--last N] [--method M] [--principal P] [--outcome O]",
		Short: "List audit events, oldest first",
		Long: `List an organization's audit events, oldest first: every change made
through the API and every refused call, with the caller, the method, the
resource and the outcome ("ok", "denied" or a gRPC code name).

The API pages through the whole log in order and has no filters; --method,
--principal and --outcome (exact, case-insensitive matches) and --last
(the newest N of what matches) are applied by the CLI to the pages it reads.`,
		Args: nameArgs(kindOrg),
		RunE: g.run(func(ctx context.Context, s *session, args []string) error {
			org, err := kindOrg.resolve(args)
			if err != nil {
				return err
			}
			if last < 0 {
				return usageError(s.cmd, "--last must not be negative")
			}
			match := func(e *cpv1.AuditEvent) bool {
				return (method == "" || strings.EqualFold(e.GetMethod(), method)) &&
					(principal == "" || strings.EqualFold(e.GetPrincipal(), principal)) &&
					(outcome == "" || strings.EqualFold(e.GetOutcome(), outcome))
			}
			all, err := listAll(ctx, func(ctx context.Context, tok string) ([]*cpv1.AuditEvent, string, error) {
				r, err := s.audit().ListAuditEvents(ctx, &cpv1.ListAuditEventsRequest{Parent: org, PageSize: 1000, PageToken: tok})
				evs := slices.DeleteFunc(r.GetAuditEvents(), func(e *cpv1.AuditEvent) bool { return !match(e) })
				return evs, r.GetNextPageToken(), err
			})
			if err != nil {
				return err
			}
			if last > 0 && len(all) > last {
				all = all[len(all)-last:]
			}
			return s.print(&cpv1.ListAuditEventsResponse{AuditEvents: all}, auditTable(all...))
		}),
	}
	f := list.Flags()
	f.IntVar(&last, "last", 0, "show only the newest N events that match (0: all)")
	f.StringVar(&method, "method", "", "only events of this API method, e.g. CreateCluster")
	f.StringVar(&principal, "principal", "", "only events of this caller, e.g. organizations/acme/serviceAccounts/ci")
	f.StringVar(&outcome, "outcome", "", "only events with this outcome: ok, denied or a gRPC code name")
	cmd.AddCommand(list)
	return cmd
}

// roleHelp lists the roles a binding can grant, one per line with what it
// grants.
func roleHelp() string {
	var b strings.Builder
	for _, r := range roles.All {
		fmt.Fprintf(&b, "  %-16s %s\n", strings.TrimPrefix(r.Name, "roles/"), r.Summary)
	}
	return strings.TrimSuffix(b.String(), "\n")
}
