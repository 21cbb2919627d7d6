package apiserver

import (
	"context"
	"fmt"
	"net/mail"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/store"
	"github.com/magnetar-dev/magnetar/policy/roles"
)

// ---- Organizations ----

type organizations struct {
	cpv1.UnimplementedOrganizationsServer
	s *Server
}

func (o organizations) GetOrganization(ctx context.Context, req *cpv1.GetOrganizationRequest) (*cpv1.Organization, error) {
	m, err := o.s.get(ctx, kindOrganization, req.GetName())
	return as[*cpv1.Organization](m), err
}

// ListOrganizations lists every organization for operators; any other
// caller sees its own organization only.
func (o organizations) ListOrganizations(ctx context.Context, req *cpv1.ListOrganizationsRequest) (*cpv1.ListOrganizationsResponse, error) {
	if c := callerFrom(ctx); !c.operator() {
		if err := checkPageSize(req.GetPageSize()); err != nil {
			return nil, err
		}
		if req.GetPageToken() != "" {
			return nil, invalid("page_token", "invalid or for a different query")
		}
		m, err := o.s.get(ctx, kindOrganization, c.org)
		if err != nil {
			return nil, err
		}
		return &cpv1.ListOrganizationsResponse{Organizations: []*cpv1.Organization{m.(*cpv1.Organization)}}, nil
	}
	ms, next, err := o.s.list(ctx, kindOrganization, "", req.GetPageSize(), req.GetPageToken())
	return &cpv1.ListOrganizationsResponse{Organizations: asAll[*cpv1.Organization](ms), NextPageToken: next}, err
}

func validateRegions(field string, regions []string) error {
	for i, r := range regions {
		if _, err := kindRegion.parseName(fmt.Sprintf("%s[%d]", field, i), r); err != nil {
			return err
		}
	}
	return nil
}

// validateOrgLimits checks the organization's limits (0 means the
// service default).
func validateOrgLimits(org *cpv1.Organization) error {
	switch {
	case org.GetMaxClusters() < 0:
		return invalid("organization.max_clusters", "must not be negative")
	case org.GetMaxFunctionInstances() < 0:
		return invalid("organization.max_function_instances", "must not be negative")
	case org.GetMaxFunctionRamBytes() < 0:
		return invalid("organization.max_function_ram_bytes", "must not be negative")
	}
	return nil
}

func (o organizations) CreateOrganization(ctx context.Context, req *cpv1.CreateOrganizationRequest) (*cpv1.Organization, error) {
	org := req.GetOrganization()
	if org == nil {
		org = &cpv1.Organization{}
	}
	obj, err := o.s.create(ctx, createReq{
		k: kindOrganization, id: req.GetOrganizationId(), msg: org, requestID: req.GetRequestId(),
		validate: func(resName) error {
			if err := validateOrgLimits(org); err != nil {
				return err
			}
			return validateRegions("organization.allowed_regions", org.GetAllowedRegions())
		},
	})
	return decodeAs[*cpv1.Organization](o.s, kindOrganization, obj, err)
}

func (o organizations) UpdateOrganization(ctx context.Context, req *cpv1.UpdateOrganizationRequest) (*cpv1.Organization, error) {
	org := req.GetOrganization()
	m, err := o.s.update(ctx, kindOrganization, org, req.GetUpdateMask(), nil, func(_ store.Writer, old, merged proto.Message) error {
		oldO, newO := old.(*cpv1.Organization), merged.(*cpv1.Organization)
		if !callerFrom(ctx).operator() {
			if !slices.Equal(oldO.GetAllowedRegions(), newO.GetAllowedRegions()) {
				return status.Error(codes.PermissionDenied, "organization.allowed_regions: only operators may change it")
			}
			if oldO.GetMaxClusters() != newO.GetMaxClusters() {
				return status.Error(codes.PermissionDenied, "organization.max_clusters: only operators may change it")
			}
			if oldO.GetMaxFunctionInstances() != newO.GetMaxFunctionInstances() {
				return status.Error(codes.PermissionDenied, "organization.max_function_instances: only operators may change it")
			}
			if oldO.GetMaxFunctionRamBytes() != newO.GetMaxFunctionRamBytes() {
				return status.Error(codes.PermissionDenied, "organization.max_function_ram_bytes: only operators may change it")
			}
		}
		if err := validateOrgLimits(newO); err != nil {
			return err
		}
		return validateRegions("organization.allowed_regions", newO.GetAllowedRegions())
	})
	return as[*cpv1.Organization](m), err
}

// DeleteOrganization refuses while the organization has clusters or
// service accounts.
func (o organizations) DeleteOrganization(ctx context.Context, req *cpv1.DeleteOrganizationRequest) (*emptypb.Empty, error) {
	err := o.s.remove(ctx, kindOrganization, req.GetName(), req.GetEtag(), func(w store.Writer, _ proto.Message) error {
		for _, k := range []*kind{kindCluster, kindServiceAccount, kindUser} {
			n, err := w.Count(ctx, store.ListQuery{Kind: k.collection, Parent: req.GetName()})
			if err != nil {
				return err
			}
			if n > 0 {
				return status.Errorf(codes.FailedPrecondition, "organization has %d %s; delete them first", n, k.collection)
			}
		}
		return nil
	})
	return empty(err)
}

// ---- Users ----

type users struct {
	cpv1.UnimplementedUsersServer
	s *Server
}

func validateEmail(field, email string) error {
	if email == "" {
		return invalid(field, "required")
	}
	if a, err := mail.ParseAddress(email); err != nil || a.Address != email {
		return invalid(field, "%q is not an email address", email)
	}
	return nil
}

func (u users) GetUser(ctx context.Context, req *cpv1.GetUserRequest) (*cpv1.User, error) {
	m, err := u.s.get(ctx, kindUser, req.GetName())
	return as[*cpv1.User](m), err
}

func (u users) ListUsers(ctx context.Context, req *cpv1.ListUsersRequest) (*cpv1.ListUsersResponse, error) {
	ms, next, err := u.s.list(ctx, kindUser, req.GetParent(), req.GetPageSize(), req.GetPageToken())
	return &cpv1.ListUsersResponse{Users: asAll[*cpv1.User](ms), NextPageToken: next}, err
}

func (u users) CreateUser(ctx context.Context, req *cpv1.CreateUserRequest) (*cpv1.User, error) {
	user := req.GetUser()
	obj, err := u.s.create(ctx, createReq{
		k: kindUser, parent: req.GetParent(), id: req.GetUserId(), msg: nilIfNil(user), requestID: req.GetRequestId(),
		validate: func(resName) error { return validateEmail("user.email", user.GetEmail()) },
	})
	return decodeAs[*cpv1.User](u.s, kindUser, obj, err)
}

func (u users) UpdateUser(ctx context.Context, req *cpv1.UpdateUserRequest) (*cpv1.User, error) {
	m, err := u.s.update(ctx, kindUser, nilIfNil(req.GetUser()), req.GetUpdateMask(), nil, func(_ store.Writer, _, merged proto.Message) error {
		return validateEmail("user.email", merged.(*cpv1.User).GetEmail())
	})
	return as[*cpv1.User](m), err
}

func (u users) DeleteUser(ctx context.Context, req *cpv1.DeleteUserRequest) (*emptypb.Empty, error) {
	return empty(u.s.remove(ctx, kindUser, req.GetName(), req.GetEtag(), nil))
}

// ---- Service accounts and API keys ----

type serviceAccounts struct {
	cpv1.UnimplementedServiceAccountsServer
	s *Server
}

func (a serviceAccounts) GetServiceAccount(ctx context.Context, req *cpv1.GetServiceAccountRequest) (*cpv1.ServiceAccount, error) {
	m, err := a.s.get(ctx, kindServiceAccount, req.GetName())
	return as[*cpv1.ServiceAccount](m), err
}

func (a serviceAccounts) ListServiceAccounts(ctx context.Context, req *cpv1.ListServiceAccountsRequest) (*cpv1.ListServiceAccountsResponse, error) {
	ms, next, err := a.s.list(ctx, kindServiceAccount, req.GetParent(), req.GetPageSize(), req.GetPageToken())
	return &cpv1.ListServiceAccountsResponse{ServiceAccounts: asAll[*cpv1.ServiceAccount](ms), NextPageToken: next}, err
}

func (a serviceAccounts) CreateServiceAccount(ctx context.Context, req *cpv1.CreateServiceAccountRequest) (*cpv1.ServiceAccount, error) {
	sa := req.GetServiceAccount()
	if sa == nil {
		sa = &cpv1.ServiceAccount{}
	}
	obj, err := a.s.create(ctx, createReq{k: kindServiceAccount, parent: req.GetParent(), id: req.GetServiceAccountId(), msg: sa, requestID: req.GetRequestId()})
	return decodeAs[*cpv1.ServiceAccount](a.s, kindServiceAccount, obj, err)
}

func (a serviceAccounts) UpdateServiceAccount(ctx context.Context, req *cpv1.UpdateServiceAccountRequest) (*cpv1.ServiceAccount, error) {
	m, err := a.s.update(ctx, kindServiceAccount, nilIfNil(req.GetServiceAccount()), req.GetUpdateMask(), nil, nil)
	return as[*cpv1.ServiceAccount](m), err
}

// DeleteServiceAccount deletes the account's API keys with it.
func (a serviceAccounts) DeleteServiceAccount(ctx context.Context, req *cpv1.DeleteServiceAccountRequest) (*emptypb.Empty, error) {
	return empty(a.s.remove(ctx, kindServiceAccount, req.GetName(), req.GetEtag(), func(w store.Writer, _ proto.Message) error {
		for {
			keys, _, err := w.List(ctx, store.ListQuery{Kind: kindApiKey.collection, Parent: req.GetName(), PageSize: 1000})
			if err != nil || len(keys) == 0 {
				return err
			}
			for _, k := range keys {
				if err := w.Delete(ctx, k.Kind, k.Name, ""); err != nil {
					return err
				}
			}
		}
	}))
}

func (a serviceAccounts) GetApiKey(ctx context.Context, req *cpv1.GetApiKeyRequest) (*cpv1.ApiKey, error) {
	m, err := a.s.get(ctx, kindApiKey, req.GetName())
	return presentKey(as[*cpv1.ApiKey](m)), err
}

func (a serviceAccounts) ListApiKeys(ctx context.Context, req *cpv1.ListApiKeysRequest) (*cpv1.ListApiKeysResponse, error) {
	ms, next, err := a.s.list(ctx, kindApiKey, req.GetParent(), req.GetPageSize(), req.GetPageToken())
	keys := asAll[*cpv1.ApiKey](ms)
	for _, k := range keys {
		presentKey(k)
	}
	return &cpv1.ListApiKeysResponse{ApiKeys: keys, NextPageToken: next}, err
}

// presentKey reports an expired key as EXPIRED.
func presentKey(k *cpv1.ApiKey) *cpv1.ApiKey {
	if k != nil {
		k.State = keyState(k, time.Now())
	}
	return k
}

func (a serviceAccounts) CreateApiKey(ctx context.Context, req *cpv1.CreateApiKeyRequest) (*cpv1.ApiKey, error) {
	key := req.GetApiKey()
	if key == nil {
		key = &cpv1.ApiKey{}
	}
	key.State = cpv1.ApiKey_ACTIVE
	key.RevokeTime = nil
	uid, secret, hash := newKeySecret()
	obj, err := a.s.create(ctx, createReq{
		k: kindApiKey, parent: req.GetParent(), id: req.GetApiKeyId(), msg: key, requestID: req.GetRequestId(),
		uid: uid, secretHash: hash,
		validate: func(resName) error {
			if et := key.GetExpireTime(); et != nil && (!et.IsValid() || !et.AsTime().After(time.Now())) {
				return invalid("api_key.expire_time", "must be in the future")
			}
			return nil
		},
	})
	out, err := decodeAs[*cpv1.ApiKey](a.s, kindApiKey, obj, err)
	if err == nil && obj.UID == uid {
		out.Secret = secret // only the call that made the key sees its secret
	}
	return presentKey(out), err
}

func (a serviceAccounts) RevokeApiKey(ctx context.Context, req *cpv1.RevokeApiKeyRequest) (*cpv1.ApiKey, error) {
	r, err := kindApiKey.parseName("name", req.GetName())
	if err != nil {
		return nil, err
	}
	msg := &cpv1.ApiKey{Name: r.name, Etag: req.GetEtag()}
	m, err := a.s.update(ctx, kindApiKey, msg, nil, nil, func(_ store.Writer, _, merged proto.Message) error {
		k := merged.(*cpv1.ApiKey)
		if k.State != cpv1.ApiKey_REVOKED {
			k.State = cpv1.ApiKey_REVOKED
			k.RevokeTime = timestamppb.Now()
		}
		return nil
	})
	return presentKey(as[*cpv1.ApiKey](m)), err
}

func (a serviceAccounts) DeleteApiKey(ctx context.Context, req *cpv1.DeleteApiKeyRequest) (*emptypb.Empty, error) {
	return empty(a.s.remove(ctx, kindApiKey, req.GetName(), req.GetEtag(), nil))
}

// ---- Role bindings ----

type roleBindings struct {
	cpv1.UnimplementedRoleBindingsServer
	s *Server
}

func (b roleBindings) GetRoleBinding(ctx context.Context, req *cpv1.GetRoleBindingRequest) (*cpv1.RoleBinding, error) {
	m, err := b.s.get(ctx, kindRoleBinding, req.GetName())
	return as[*cpv1.RoleBinding](m), err
}

func (b roleBindings) ListRoleBindings(ctx context.Context, req *cpv1.ListRoleBindingsRequest) (*cpv1.ListRoleBindingsResponse, error) {
	ms, next, err := b.s.list(ctx, kindRoleBinding, req.GetParent(), req.GetPageSize(), req.GetPageToken())
	return &cpv1.ListRoleBindingsResponse{RoleBindings: asAll[*cpv1.RoleBinding](ms), NextPageToken: next}, err
}

func (b roleBindings) CreateRoleBinding(ctx context.Context, req *cpv1.CreateRoleBindingRequest) (*cpv1.RoleBinding, error) {
	rb := req.GetRoleBinding()
	obj, err := b.s.create(ctx, createReq{
		k: kindRoleBinding, parent: req.GetParent(), id: req.GetRoleBindingId(), msg: nilIfNil(rb), requestID: req.GetRequestId(),
		attrs: map[string]any{"role": rb.GetRole(), "member": rb.GetMember(), "resource": rb.GetResource()},
		validate: func(r resName) error {
			if !roles.Known(rb.GetRole()) {
				return invalid("role_binding.role", "must be one of %s", strings.Join(roles.Names(), ", "))
			}
			if rb.GetMember() == "" {
				return invalid("role_binding.member", "required")
			}
			if !strings.HasPrefix(rb.GetMember(), r.org+"/") {
				return invalid("role_binding.member", "must be a principal of %s", r.org)
			}
			if res := rb.GetResource(); res != r.org && !strings.HasPrefix(res, r.org+"/") {
				return invalid("role_binding.resource", "must be %s or a resource under it", r.org)
			}
			return nil
		},
	})
	return decodeAs[*cpv1.RoleBinding](b.s, kindRoleBinding, obj, err)
}

func (b roleBindings) DeleteRoleBinding(ctx context.Context, req *cpv1.DeleteRoleBindingRequest) (*emptypb.Empty, error) {
	return empty(b.s.remove(ctx, kindRoleBinding, req.GetName(), req.GetEtag(), nil))
}

// ---- Audit events ----

type auditEvents struct {
	cpv1.UnimplementedAuditEventsServer
	s *Server
}

var kindAuditEvent = &kind{collection: "auditEvents", parent: "organizations"}

func (a auditEvents) ListAuditEvents(ctx context.Context, req *cpv1.ListAuditEventsRequest) (*cpv1.ListAuditEventsResponse, error) {
	pr, err := kindOrganization.parseName("parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	if err := checkPageSize(req.GetPageSize()); err != nil {
		return nil, err
	}
	if err := a.s.authorize(ctx, target{kind: kindAuditEvent, verb: "list", res: resName{parent: pr.name, org: pr.org}}); err != nil {
		return nil, err
	}
	evs, next, err := a.s.store.ListAudit(ctx, store.AuditQuery{Org: pr.org, PageSize: int(req.GetPageSize()), PageToken: req.GetPageToken()})
	if err != nil {
		return nil, a.s.toStatus(err, "")
	}
	resp := &cpv1.ListAuditEventsResponse{NextPageToken: next}
	for _, e := range evs {
		ae := &cpv1.AuditEvent{
			Sequence: e.Seq, Time: timestamppb.New(e.Time), Principal: e.Principal, Method: e.Method,
			Resource: e.Resource, RequestId: e.RequestID, Outcome: e.Outcome,
		}
		if len(e.Detail) > 0 {
			st := &structpb.Struct{}
			if unmarshalOpts.Unmarshal(e.Detail, st) == nil {
				ae.Detail = st
			}
		}
		resp.AuditEvents = append(resp.AuditEvents, ae)
	}
	return resp, nil
}

// ---- helpers ----

func as[T proto.Message](m proto.Message) T {
	t, _ := m.(T)
	return t
}

func asAll[T proto.Message](ms []proto.Message) []T {
	out := make([]T, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.(T))
	}
	return out
}

// decodeAs decodes the result of a create.
func decodeAs[T proto.Message](s *Server, k *kind, obj store.Object, err error) (T, error) {
	var zero T
	if err != nil {
		return zero, err
	}
	m, _, err := decode(k, obj)
	if err != nil {
		return zero, s.toStatus(err, obj.Name)
	}
	return m.(T), nil
}

// nilIfNil turns a typed nil message into an untyped nil interface.
func nilIfNil[T interface {
	proto.Message
	comparable
}](m T) proto.Message {
	var zero T
	if m == zero {
		return nil
	}
	return m
}

func empty(err error) (*emptypb.Empty, error) {
	if err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}
