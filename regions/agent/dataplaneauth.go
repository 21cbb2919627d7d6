package agent

// Data-plane authentication (Config.DataPlaneAuth). The agent provisions
// every cluster with its brokers trusting the control plane as OAuth2/OIDC
// issuer, accepting the cluster's own audience (issuer.ClusterAudience) and
// its organization's (issuer.OrganizationAudience: one token for every
// member of a replication group), and the agent's role as their
// superuser. The agent gets its tokens from the control plane's token
// endpoint with its API key (internal/accesstoken), one per cluster
// audience, renewed before they expire, and sends them on every admin
// call.
//
// Role bindings become Pulsar permissions: every grantInterval the agent
// reads the role bindings of the organizations whose clusters it runs and
// makes each namespace's permissions and each tenant's admin roles match
// them (grants below), as Pulsar roles issuer.Role(member). A resource
// whose grants were made to match is not read again while its grants, its
// spec as applied and its cluster's admin URL stay the same, for up to
// grantResync:
//
//   - roles/pulsar.producer on a namespace or above it (its tenant, its
//     cluster, the organization): "produce" on the namespace;
//   - roles/pulsar.consumer likewise: "consume";
//   - roles/org.admin on the organization, roles/cluster.admin on the
//     organization, the cluster or the tenant: an admin role of the tenant.
//
// Only roles of control-plane principals ("organizations:...") are managed:
// grants made to other roles through the admin API stay. A binding deleted
// in the control plane is revoked in the data plane at the next pass.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/issuer"
	"github.com/magnetar-dev/magnetar/internal/atomicfile"
	"github.com/magnetar-dev/magnetar/regions/provisioner"
	"github.com/magnetar-dev/magnetar/regions/pulsaradmin"
	"google.golang.org/protobuf/proto"
)

// operatorRolePrefix starts the data-plane role of every control-plane
// operator (issuer.Role("operators/<name>")).
const operatorRolePrefix = "operators:"

// grantInterval is the period of the role bindings' sync.
const grantInterval = 5 * time.Second

// grantResync is how long a tenant's or namespace's grants, once made to
// match, are trusted without reading them back from the data plane while
// nothing the agent knows of changed (the role bindings, the resource as
// applied, the cluster's admin URL). Reading them back repairs changes
// made behind the agent's back, such as a tenant admin revoking a managed
// role, within this time.
const grantResync = time.Minute

// grantMark is what a tenant's or namespace's grants in a data plane were
// last made to match.
type grantMark struct {
	want     string        // the managed grants, canonical
	applied  proto.Message // the resource's spec as last applied: a re-created namespace is another one
	adminURL string
	at       time.Time
}

// grantsCurrent reports whether name's grants were made to match want
// recently enough to be trusted (grantResync). Called only from the grant
// loop's goroutine, which owns a.grantsDone.
func (a *Agent) grantsCurrent(name, want string, applied proto.Message, adminURL string, now time.Time) bool {
	m, ok := a.grantsDone[name]
	return ok && m.want == want && m.applied == applied && m.adminURL == adminURL && now.Sub(m.at) < grantResync
}

// clusterAuth is the Auth of cluster's spec when DataPlaneAuth is on.
func (a *Agent) clusterAuth(ctx context.Context, cluster string) (*provisioner.Auth, error) {
	if a.tokens == nil {
		return nil, nil
	}
	iss, err := a.tokens.Issuer(ctx)
	if err != nil {
		return nil, err
	}
	aud := issuer.ClusterAudience(cluster)
	role, err := a.tokens.Subject(ctx, aud)
	if err != nil {
		return nil, err
	}
	// The agent's own role, and every operator's: other regions' agents
	// replicate into this cluster with their tokens (peerCredentials).
	roles := []string{operatorRolePrefix + "*"}
	if !strings.HasPrefix(role, operatorRolePrefix) {
		roles = append([]string{role}, roles...)
	}
	org, _, _ := strings.Cut(cluster, "/clusters/")
	auds := []string{aud, issuer.OrganizationAudience(org)}
	fnTokens, err := a.functionsToken(ctx, cluster, aud)
	if err != nil {
		return nil, err
	}
	return &provisioner.Auth{Issuer: iss, Audiences: auds, SuperuserRoles: roles, FunctionsTokenFile: fnTokens}, nil
}

// functionsToken writes the token file the function instances of
// cluster authenticate to its brokers with, and has peerTokenLoop keep it
// fresh (the instances read it at every authentication: Pulsar's
// AuthenticationToken with file:// parameters). Its role is the agent's
// own, as Pulsar's workers give instances their own credentials: a
// function acts on its cluster with the operator's rights (it can read
// only what its creator's permissions let it name at create). "" when the
// agent has no PeerCredentialsDir to keep files in.
func (a *Agent) functionsToken(ctx context.Context, cluster, aud string) (string, error) {
	dir := a.cfg.PeerCredentialsDir
	if dir == "" {
		return "", nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	file := filepath.Join(dir, a.pulsarName(cluster)+".functions.token")
	tok, err := a.tokens.Token(ctx, aud)
	if err != nil {
		return "", err
	}
	if err := atomicfile.WriteFile(file, []byte(tok)); err != nil {
		return "", err
	}
	a.mu.Lock()
	a.peerTokens[file] = aud
	a.mu.Unlock()
	return file, nil
}

// adminAuth is the option that authenticates the agent's admin calls to
// cluster's data plane (none without DataPlaneAuth).
func (a *Agent) adminAuth(cluster string) []pulsaradmin.Option {
	if a.tokens == nil || cluster == "" {
		return nil
	}
	aud := issuer.ClusterAudience(cluster)
	return []pulsaradmin.Option{pulsaradmin.WithTokenSource(func(ctx context.Context) (string, error) {
		return a.tokens.Token(ctx, aud)
	})}
}

// grants says what role bindings give in the data plane.
type grants struct {
	bindings []*cpv1.RoleBinding // of one organization
}

// covers reports whether a binding on resource applies to target (the
// resource itself or one under it).
func covers(resource, target string) bool {
	return target == resource || strings.HasPrefix(target, resource+"/")
}

// namespace returns role -> actions on the namespace resource ns
// ("organizations/{o}/clusters/{c}/tenants/{t}/namespaces/{n}").
func (g grants) namespace(ns string) map[string][]string {
	out := map[string][]string{}
	for _, b := range g.bindings {
		var action string
		switch b.GetRole() {
		case "roles/pulsar.producer":
			action = "produce"
		case "roles/pulsar.consumer":
			action = "consume"
		default:
			continue
		}
		if !covers(b.GetResource(), ns) {
			continue
		}
		role := issuer.Role(b.GetMember())
		if !slices.Contains(out[role], action) {
			out[role] = append(out[role], action)
			slices.Sort(out[role])
		}
	}
	return out
}

// tenantAdmins returns the roles that administer the tenant resource
// ("organizations/{o}/clusters/{c}/tenants/{t}").
func (g grants) tenantAdmins(tenant string) []string {
	var out []string
	for _, b := range g.bindings {
		switch b.GetRole() {
		case "roles/org.admin", "roles/cluster.admin":
		default:
			continue
		}
		if covers(b.GetResource(), tenant) {
			out = append(out, issuer.Role(b.GetMember()))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// managedRole reports whether role is a control-plane principal's, which
// the agent grants and revokes.
func managedRole(role string) bool { return strings.HasPrefix(role, "organizations:") }

// grantLoop syncs role bindings into the data planes until ctx ends.
func (a *Agent) grantLoop(ctx context.Context) {
	t := time.NewTicker(grantInterval)
	defer t.Stop()
	for {
		if err := a.syncGrants(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("agent: role bindings not applied; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// syncGrants applies every organization's role bindings to its ready
// clusters' tenants and namespaces.
func (a *Agent) syncGrants(ctx context.Context) error {
	type target struct {
		cluster, adminURL string
		// tenants and namespaces map resource names to the spec last
		// applied.
		tenants, namespaces map[string]proto.Message
	}
	byOrg := map[string][]*target{}
	a.mu.Lock()
	clusters := map[string]*target{}
	for name, e := range a.desired {
		if e.deleted || e.adminURL == "" {
			continue
		}
		t := &target{cluster: name, adminURL: e.adminURL, tenants: map[string]proto.Message{}, namespaces: map[string]proto.Message{}}
		clusters[name] = t
		org := strings.Join(strings.Split(name, "/")[:2], "/")
		byOrg[org] = append(byOrg[org], t)
	}
	for name, e := range a.resources {
		if e.change.GetDeleted() || e.applied == nil {
			continue
		}
		t := clusters[clusterOf(name)]
		if t == nil {
			continue
		}
		switch {
		case e.change.GetNamespace() != nil:
			t.namespaces[name] = e.applied
		case e.change.GetTenant() != nil:
			t.tenants[name] = e.applied
		}
	}
	a.mu.Unlock()
	if a.grantsDone == nil {
		a.grantsDone = map[string]grantMark{}
	}
	for name := range a.grantsDone { // resources gone, or no longer ready
		t := clusters[clusterOf(name)]
		if t == nil || (t.tenants[name] == nil && t.namespaces[name] == nil) {
			delete(a.grantsDone, name)
		}
	}
	iam := cpv1.NewRoleBindingsClient(a.conn)
	var errs []error
	for org, targets := range byOrg {
		var g grants
		req := &cpv1.ListRoleBindingsRequest{Parent: org}
		for {
			cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
			resp, err := iam.ListRoleBindings(cctx, req)
			cancel()
			if err != nil {
				return fmt.Errorf("role bindings of %s: %w", org, err)
			}
			g.bindings = append(g.bindings, resp.GetRoleBindings()...)
			if resp.GetNextPageToken() == "" {
				break
			}
			req.PageToken = resp.GetNextPageToken()
		}
		for _, t := range targets {
			errs = append(errs, a.applyGrants(ctx, t.cluster, t.adminURL, g, t.tenants, t.namespaces))
		}
	}
	return errors.Join(errs...)
}

// applyGrants makes one cluster's tenant admins and namespace permissions
// match g.
func (a *Agent) applyGrants(ctx context.Context, cluster, adminURL string, g grants, tenants, namespaces map[string]proto.Message) error {
	c, err := pulsaradmin.New(adminURL, append([]pulsaradmin.Option{
		pulsaradmin.WithHTTPClient(&http.Client{Timeout: pulsaradmin.DefaultTimeout, Transport: a.adminTransport})}, a.adminAuth(cluster)...)...)
	if err != nil {
		return err
	}
	now := a.cfg.Now()
	done := func(name, want string, applied proto.Message) {
		a.grantsDone[name] = grantMark{want: want, applied: applied, adminURL: adminURL, at: now}
	}
	var errs []error
	for name, applied := range tenants {
		admins := g.tenantAdmins(name)
		mark := strings.Join(admins, ",")
		if a.grantsCurrent(name, mark, applied, adminURL, now) {
			continue
		}
		segs := strings.Split(name, "/")
		tenant := segs[5]
		info, err := c.GetTenant(ctx, tenant)
		if err != nil {
			errs = append(errs, fmt.Errorf("tenant %s: %w", tenant, err))
			continue
		}
		want := admins
		for _, r := range info.AdminRoles {
			if !managedRole(r) {
				want = append(want, r)
			}
		}
		info.AdminRoles = want
		did, err := c.EnsureTenant(ctx, tenant, info) // a no-op when the roles already match
		if err != nil {
			errs = append(errs, fmt.Errorf("tenant %s: %w", tenant, err))
			continue
		}
		if len(did) > 0 {
			a.log.Info("agent: tenant admins set from role bindings", "tenant", name, "admin_roles", want)
		}
		done(name, mark, applied)
	}
	for name, applied := range namespaces {
		want := g.namespace(name)
		mark := fmt.Sprint(want) // fmt prints maps sorted by key
		if a.grantsCurrent(name, mark, applied, adminURL, now) {
			continue
		}
		segs := strings.Split(name, "/")
		tenant, ns := segs[5], segs[7]
		have, err := c.NamespacePermissions(ctx, tenant, ns)
		if err != nil {
			errs = append(errs, fmt.Errorf("namespace %s/%s: %w", tenant, ns, err))
			continue
		}
		failed := false
		for role, actions := range want {
			cur := slices.Clone(have[role])
			slices.Sort(cur)
			if slices.Equal(cur, actions) {
				continue
			}
			if err := c.GrantNamespace(ctx, tenant, ns, role, actions); err != nil {
				errs = append(errs, fmt.Errorf("grant %s on %s/%s: %w", role, tenant, ns, err))
				failed = true
				continue
			}
			a.log.Info("agent: permission granted from role bindings", "namespace", name, "role", role, "actions", actions)
		}
		for role := range have {
			if _, ok := want[role]; ok || !managedRole(role) {
				continue
			}
			if err := c.RevokeNamespace(ctx, tenant, ns, role); err != nil {
				errs = append(errs, fmt.Errorf("revoke %s on %s/%s: %w", role, tenant, ns, err))
				failed = true
				continue
			}
			a.log.Info("agent: permission revoked (no role binding)", "namespace", name, "role", role)
		}
		if !failed {
			done(name, mark, applied)
		}
	}
	return errors.Join(errs...)
}

// peerTokenEvery is how often the peers' token files are written again,
// at most: never less often than four times per token lifetime. The
// tokens are renewed at half their life, so a file's token always has a
// quarter of its life left.
const peerTokenEvery = 5 * time.Second

// peerCredentials fills cd, the record of replication peer rc (described
// by p) in a data plane, with how to reach it: when it serves TLS, its TLS
// URLs and its CA certificate (written to PeerCredentialsDir); when the
// agent authenticates to data planes (DataPlaneAuth), also a token file
// for its audience, which peerTokenLoop keeps fresh and the brokers read
// at every CONNECT and authentication challenge (Pulsar's
// AuthenticationToken with file:// parameters). The token's role is the
// agent's own (an operator's; brokers of authenticated clusters take
// operators as superusers).
func (a *Agent) peerCredentials(ctx context.Context, rc string, p *cpv1.Cluster, cd *pulsaradmin.ClusterData) error {
	if p.GetTlsServiceUrl() == "" || p.GetCaCertificate() == "" {
		if a.tokens != nil {
			return errors.New("the peer serves no TLS (provisioned with --insecure-data-planes?)")
		}
		return nil // a plain-text peer: its URLs are all there is
	}
	dir := a.cfg.PeerCredentialsDir
	if dir == "" {
		return errors.New("the peer serves TLS and Config.PeerCredentialsDir, where its CA certificate goes, is not set")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	base := filepath.Join(dir, a.pulsarName(rc))
	caFile := base + ".ca.pem"
	if err := atomicfile.WriteFile(caFile, []byte(p.GetCaCertificate())); err != nil {
		return err
	}
	cd.ServiceURLTLS, cd.BrokerServiceURLTLS = p.GetTlsAdminUrl(), p.GetTlsServiceUrl()
	cd.BrokerClientTLSEnabled, cd.BrokerClientTrustCertsFile = true, caFile
	if a.tokens == nil {
		return nil
	}
	tokenFile := base + ".token"
	aud := issuer.ClusterAudience(rc)
	tok, err := a.tokens.Token(ctx, aud)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(tokenFile, []byte(tok)); err != nil {
		return err
	}
	a.mu.Lock()
	a.peerTokens[tokenFile] = aud
	a.mu.Unlock()
	cd.AuthenticationPlugin = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
	cd.AuthenticationParameters = "file://" + tokenFile
	return nil
}

// peerTokenLoop rewrites every peer's token file with a fresh token until
// ctx ends.
func (a *Agent) peerTokenLoop(ctx context.Context) {
	t := time.NewTimer(peerTokenEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		every := peerTokenEvery
		if life := a.tokens.ShortestLife(); life > 0 && life/4 < every {
			every = life / 4
		}
		t.Reset(every)
		a.mu.Lock()
		files := maps.Clone(a.peerTokens)
		a.mu.Unlock()
		for f, aud := range files {
			tok, err := a.tokens.Token(ctx, aud)
			if err == nil {
				err = atomicfile.WriteFile(f, []byte(tok))
			}
			if err != nil && ctx.Err() == nil {
				a.log.Warn("agent: a replication peer's token was not renewed", "audience", aud, "err", err)
			}
		}
	}
}
