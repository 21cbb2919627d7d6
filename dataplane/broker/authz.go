package broker

// Authentication and authorization on the binary protocol (package auth).
//
// With Config.Authenticator set, CONNECT must carry credentials one of its
// providers accepts (or none, when an anonymous role is configured);
// otherwise the broker answers ERROR AuthenticationError and closes the
// connection. The connection's Identity is fixed at CONNECT; a client may
// refresh its credentials (AUTH_RESPONSE) but not change its role.
// Credentials that expire (a token's exp, a certificate's NotAfter) are
// challenged at expiry (AUTH_CHALLENGE): a client that does not answer with
// valid credentials within authRefreshGrace is disconnected.
//
// With Config.Authorizer set as well, every LOOKUP, PARTITIONED_METADATA,
// GET_TOPICS_OF_NAMESPACE, PRODUCER, SUBSCRIBE and schema request is
// authorized (auth.Authorizer, Rego) against the facts of the tenant record
// and the namespace's auth_policies. A connection caches each decision per
// (action, topic, subscription) and drops it when any record under
// /admin/policies changes (authGen, bumped by the policy watch) or while
// the watch is not live, so SENDs never evaluate policy.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"sync"
	"time"

	pb "github.com/magnetar-dev/magnetar/api/pulsarwire"
	"github.com/magnetar-dev/magnetar/dataplane/auth"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
	"google.golang.org/protobuf/proto"
)

// authRefreshGrace is how long a client has to answer AUTH_CHALLENGE.
const authRefreshGrace = 10 * time.Second

// revokedCheckEvery is how often a connection's credentials are checked
// against the revocations its authentication provider knows of
// (auth.Authenticator.Revoked).
const revokedCheckEvery = 2 * time.Second

// refreshChallenge is the challenge data asking a client for fresh
// credentials: the Java client fetches new ones from its authentication
// plugin only for exactly these bytes (Pulsar's AuthData.REFRESH_AUTH_DATA)
// and otherwise answers with the credentials it connected with.
var refreshChallenge = []byte("PulsarAuthRefresh")

// AuthPolicies is a namespace's auth_policies record (Pulsar's
// AuthPolicies): grants per role on the namespace and per topic, and the
// roles allowed on named subscriptions.
type AuthPolicies struct {
	NamespaceAuth map[string][]string            `json:"namespace_auth"`
	TopicAuth     map[string]map[string][]string `json:"destination_auth"`
	SubAuthRoles  map[string][]string            `json:"subscription_auth_roles"`
}

// ReadAuthPolicies decodes p's auth_policies (empty maps when unset).
func ReadAuthPolicies(p Policies) AuthPolicies { return ParseAuthPolicies(p.Other["auth_policies"]) }

// ParseAuthPolicies decodes an auth_policies record; nil or a corrupt
// record gives empty maps (it grants nothing).
func ParseAuthPolicies(raw json.RawMessage) AuthPolicies {
	var a AuthPolicies
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &a)
	}
	if a.NamespaceAuth == nil {
		a.NamespaceAuth = map[string][]string{}
	}
	if a.TopicAuth == nil {
		a.TopicAuth = map[string]map[string][]string{}
	}
	if a.SubAuthRoles == nil {
		a.SubAuthRoles = map[string][]string{}
	}
	return a
}

// AuthEnabled says whether clients must authenticate.
func (s *Service) AuthEnabled() bool { return s.cfg.Authenticator != nil }

// AuthzEnabled says whether requests are authorized.
func (s *Service) AuthzEnabled() bool { return s.cfg.Authenticator != nil && s.cfg.Authorizer != nil }

// Authenticator returns the configured authenticator (nil: off).
func (s *Service) Authenticator() *auth.Authenticator { return s.cfg.Authenticator }

// NoteAuthenticationFailure counts an admin request refused for its
// credentials (pulsar_authentication_failures_total, with the binary
// protocol's refused connections).
func (s *Service) NoteAuthenticationFailure() { s.metrics.authFailures.Inc() }

// NoteDenied counts a refusal by the authorization policy on surface
// ("binary" or "admin") and logs it, at most denialLogBurst lines per
// denialLogWindow (a client retrying a refused request is not a log
// flood); the lines left out are counted in the next one.
func (s *Service) NoteDenied(surface string, de *auth.DeniedError) {
	s.metrics.authzDenials.WithLabelValues(surface, string(de.Action)).Inc()
	dl := &s.denialLog
	dl.mu.Lock()
	now := time.Now()
	if now.Sub(dl.windowStart) >= denialLogWindow {
		dl.windowStart, dl.logged = now, 0
	}
	if dl.logged >= denialLogBurst {
		dl.suppressed++
		dl.mu.Unlock()
		return
	}
	dl.logged++
	suppressed := dl.suppressed
	dl.suppressed = 0
	dl.mu.Unlock()
	args := []any{"surface", surface, "role", de.Role, "action", string(de.Action), "resource", de.Resource, "reasons", de.Reasons}
	if suppressed > 0 {
		args = append(args, "denials_not_logged_before", suppressed)
	}
	s.log.Info("broker authorization denied", args...)
}

// denialLogBurst lines at most per denialLogWindow log refusals.
const (
	denialLogBurst  = 20
	denialLogWindow = 10 * time.Second
)

// denialLog rate-limits NoteDenied's log lines.
type denialLog struct {
	mu          sync.Mutex
	windowStart time.Time
	logged      int
	suppressed  int
}

// bumpAuthGen invalidates every connection's cached decisions.
func (s *Service) bumpAuthGen() { s.authGen.Add(1) }

// AuthorizeTopic decides whether role may take action on topic t (and,
// for consume, subscription sub). It returns nil when authorization is off.
func (s *Service) AuthorizeTopic(ctx context.Context, role string, action auth.Action, t TopicName, sub string) error {
	if !s.AuthzEnabled() {
		return nil
	}
	az := s.cfg.Authorizer
	if az.IsSuperuser(role) {
		return nil
	}
	req := auth.Request{Role: role, Action: action, Resource: t.String(), Subscription: sub}
	if ti, err := s.res.GetTenant(ctx, t.Tenant); err == nil {
		req.TenantAdmins = ti.AdminRoles
	} else if !errors.Is(err, ErrNotFound) {
		return err
	}
	if p, err := s.namespacePolicies(ctx, t); err == nil {
		ap := ReadAuthPolicies(p)
		req.NamespaceGrants = ap.NamespaceAuth
		req.TopicGrants = map[string][]string{}
		for _, name := range []string{t.String(), t.Base().String()} {
			for role, acts := range ap.TopicAuth[name] {
				req.TopicGrants[role] = append(req.TopicGrants[role], acts...)
			}
		}
		if roles, ok := ap.SubAuthRoles[sub]; ok && sub != "" {
			req.SubscriptionRoles = append([]string{}, roles...)
		}
		if raw, ok := p.Other["subscription_auth_mode"]; ok {
			_ = json.Unmarshal(raw, &req.SubscriptionAuthMode)
		}
	} else if !isTopicNotFound(err) {
		return err
	}
	return az.Authorize(ctx, req)
}

// AuthorizeNamespace decides a namespace-wide action (listing its topics
// needs consume on the namespace, as in Pulsar; administering it needs
// tenant admin).
func (s *Service) AuthorizeNamespace(ctx context.Context, role string, action auth.Action, tenant, ns string) error {
	return s.AuthorizeTopic(ctx, role, action, TopicName{Domain: Persistent, Tenant: tenant, Namespace: ns}, "")
}

// AuthorizeTenant decides whether role administers tenant.
func (s *Service) AuthorizeTenant(ctx context.Context, role, tenant string) error {
	if !s.AuthzEnabled() {
		return nil
	}
	az := s.cfg.Authorizer
	if az.IsSuperuser(role) {
		return nil
	}
	req := auth.Request{Role: role, Action: auth.ActionTenantAdmin, Resource: tenant}
	ti, err := s.res.GetTenant(ctx, tenant)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	req.TenantAdmins = ti.AdminRoles
	return az.Authorize(ctx, req)
}

// AuthorizeSuperuser decides broker-wide actions (clusters, tenants).
func (s *Service) AuthorizeSuperuser(ctx context.Context, role string) error {
	if !s.AuthzEnabled() || s.cfg.Authorizer.IsSuperuser(role) {
		return nil
	}
	return s.cfg.Authorizer.Authorize(ctx, auth.Request{Role: role, Action: auth.ActionSuperuser})
}

func isTopicNotFound(err error) bool {
	var pe *protocol.Error
	return errors.As(err, &pe) && pe.Code == pb.ServerError_TopicNotFound
}

// authKey names a cached decision of a connection.
type authKey struct {
	action auth.Action
	topic  string
	sub    string
}

type authDecision struct {
	gen uint64
	err error
}

// authorize checks action on t for the connection's role, through the
// connection's cache. The error is a protocol AuthorizationError with the
// policy's reasons.
func (c *conn) authorize(ctx context.Context, action auth.Action, t TopicName, sub string) error {
	if !c.s.AuthzEnabled() {
		return nil
	}
	key := authKey{action, t.String(), sub}
	c.s.pw.mu.Lock()
	live := c.s.pw.live
	c.s.pw.mu.Unlock()
	gen := c.s.authGen.Load()
	if d, ok := c.authCache[key]; ok && live && d.gen == gen {
		if d.err != nil {
			c.s.metrics.authzDenials.WithLabelValues("binary", string(action)).Inc()
		}
		return d.err
	}
	err := c.s.AuthorizeTopic(ctx, c.identity().Role, action, t, sub)
	var denied *auth.DeniedError
	switch {
	case err == nil:
	case errors.As(err, &denied):
		c.s.NoteDenied("binary", denied)
		err = protocol.ErrAuthorization.WithMessage(denied.Error())
	default:
		// Evaluation or store failures are not cached: the next request
		// asks again.
		c.log.Warn("broker authorization failed", "err", err)
		return protocol.ErrAuthorization.WithMessage("authorization could not be decided; retry")
	}
	if live {
		if c.authCache == nil {
			c.authCache = map[authKey]authDecision{}
		}
		if len(c.authCache) > 4096 {
			clear(c.authCache)
		}
		c.authCache[key] = authDecision{gen: gen, err: err}
	}
	return err
}

// identity returns the connection's identity.
func (c *conn) identity() auth.Identity {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ident
}

// peerCertificates returns the verified client chain of a TLS connection.
func (c *conn) peerCertificates() []*x509.Certificate {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return nil
	}
	st := tc.ConnectionState()
	if len(st.VerifiedChains) > 0 {
		return st.VerifiedChains[0]
	}
	return nil
}

// authenticate checks CONNECT's credentials.
func (c *conn) authenticate(cc *pb.CommandConnect) error {
	a := c.s.cfg.Authenticator
	if a == nil {
		return nil
	}
	ctx, cancel := c.ctx()
	defer cancel()
	id, err := a.Authenticate(ctx, auth.Credentials{
		Method: cc.GetAuthMethodName(), Data: cc.GetAuthData(), PeerCertificates: c.peerCertificates(),
	})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.ident = id
	c.mu.Unlock()
	if !id.Expires.IsZero() {
		c.wg.Add(1)
		go c.authRefresher()
	}
	return nil
}

// handleAuthResponse takes refreshed credentials. A failure, or a
// different role, closes the connection.
func (c *conn) handleAuthResponse(r *pb.CommandAuthResponse) error {
	a := c.s.cfg.Authenticator
	if a == nil {
		return nil
	}
	ctx, cancel := c.ctx()
	defer cancel()
	resp := r.GetResponse()
	id, err := a.Authenticate(ctx, auth.Credentials{
		Method: resp.GetAuthMethodName(), Data: resp.GetAuthData(), PeerCertificates: c.peerCertificates(),
	})
	old := c.identity()
	if err == nil && id.Role != old.Role {
		err = errors.New("refreshed credentials name role " + id.Role + ", not " + old.Role)
	}
	if err != nil {
		c.send(protocol.NewError(0, pb.ServerError_AuthenticationError, "authentication refresh failed: "+err.Error()))
		c.flushAndClose()
		return err
	}
	c.mu.Lock()
	c.ident = id
	c.challenged = time.Time{}
	c.mu.Unlock()
	c.s.metrics.authRefreshes.Inc()
	return nil
}

// authRefresher challenges the client when its credentials expire and
// closes the connection when no valid answer arrives in time, or as soon
// as it sees them revoked.
func (c *conn) authRefresher() {
	defer c.wg.Done()
	for {
		c.mu.Lock()
		id, exp, challenged := c.ident, c.ident.Expires, c.challenged
		c.mu.Unlock()
		if c.s.cfg.Authenticator.Revoked(id) {
			c.log.Warn("broker closing connection: credentials revoked", "role", id.Role, "client", id.ClientID)
			c.send(protocol.NewError(0, pb.ServerError_AuthenticationError, "credentials revoked by their issuer"))
			c.flushAndClose()
			return
		}
		var wait time.Duration
		switch {
		case !challenged.IsZero():
			wait = time.Until(challenged.Add(authRefreshGrace))
		case exp.IsZero():
			return
		default:
			wait = time.Until(exp)
		}
		if wait > 0 {
			if id.ClientID != "" {
				wait = min(wait, revokedCheckEvery)
			}
			t := time.NewTimer(wait)
			select {
			case <-c.closeCh:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		if !challenged.IsZero() {
			c.log.Warn("broker closing connection: credentials expired and were not refreshed", "role", c.identity().Role)
			c.send(protocol.NewError(0, pb.ServerError_AuthenticationError, "credentials expired"))
			c.flushAndClose()
			return
		}
		c.mu.Lock()
		c.challenged = time.Now()
		c.mu.Unlock()
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_AUTH_CHALLENGE.Enum(), AuthChallenge: &pb.CommandAuthChallenge{
			ServerVersion:   proto.String(serverVersion),
			ProtocolVersion: proto.Int32(maxProtocolVersion),
			Challenge:       &pb.AuthData{AuthMethodName: proto.String(c.identity().Method), AuthData: refreshChallenge},
		}})
	}
}
