package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
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
		Long: `Grant ROLE (org.admin, cluster.admin, viewer, pulsar.producer or
pulsar.consumer; "roles/" may be omitted) to MEMBER (a principal's full name,
e.g. organizations/acme/serviceAccounts/ci) on RESOURCE (a full resource name;
default: the organization).`,
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
