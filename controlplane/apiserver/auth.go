package apiserver

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/issuer"
	"github.com/magnetar-dev/magnetar/controlplane/store"
	"github.com/magnetar-dev/magnetar/policy"
)

// API key format: "mgk_<uid>_<secret>", uid and secret in lower-case
// base32 without padding (no '_'), uid 80 bits and secret 256 bits random.
const keyPrefix = "mgk_"

// bootstrapOperator is the operator principal created on first start.
const bootstrapOperator = operatorsCollection + "/bootstrap"

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

func randomToken(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("apiserver: crypto/rand: " + err.Error()) // never fails on supported platforms
	}
	return strings.ToLower(b32.EncodeToString(b))
}

func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// newKeySecret returns a key's uid, its full secret and the secret's hash.
func newKeySecret() (uid, secret, hash string) {
	uid = randomToken(10)
	secret = keyPrefix + uid + "_" + randomToken(32)
	return uid, secret, hashSecret(secret)
}

type principalKey struct{}

// caller is the authenticated principal of a call.
type caller struct {
	name string // "organizations/a/serviceAccounts/ci" or "operators/bootstrap"
	kind string // "service_account", "user" or "operator"
	org  string // "" for operators
}

func (c caller) operator() bool { return c.kind == "operator" }

func callerFrom(ctx context.Context) caller {
	c, _ := ctx.Value(principalKey{}).(caller)
	return c
}

// authInterceptor authenticates every unary call.
func (s *Server) authInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	c, err := s.authenticate(ctx)
	if err != nil {
		s.metrics.authFailures.Add(ctx, 1)
		return nil, err
	}
	s.notePrincipal(ctx, c.name)
	if err := checkTextLimits(req); err != nil {
		return nil, err
	}
	ctx = withRequestFingerprint(ctx, info.FullMethod, req)
	resp, err := handler(context.WithValue(ctx, principalKey{}, c), req)
	return resp, s.toStatus(err, "")
}

func unauthenticated(msg string) error { return status.Error(codes.Unauthenticated, msg) }

func (s *Server) authenticate(ctx context.Context) (caller, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) == 0 {
		return caller{}, unauthenticated("missing authorization: send \"authorization: Bearer <api key>\"")
	}
	scheme, token, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return caller{}, unauthenticated("authorization: expected \"Bearer <api key or access token>\"")
	}
	token = strings.TrimSpace(token)
	if !strings.HasPrefix(token, keyPrefix) && strings.Count(token, ".") == 2 {
		return s.checkAccessToken(ctx, token)
	}
	c, _, err := s.checkAPIKey(ctx, token)
	return c, err
}

// checkAPIKey authenticates an API key secret, returning its principal and
// the key's store object. Its errors are gRPC statuses: UNAUTHENTICATED for
// a bad, revoked or expired key.
func (s *Server) checkAPIKey(ctx context.Context, secret string) (caller, store.Object, error) {
	rest, ok := strings.CutPrefix(secret, keyPrefix)
	uid, _, ok2 := strings.Cut(rest, "_")
	if !ok || !ok2 || uid == "" {
		return caller{}, store.Object{}, unauthenticated("invalid api key")
	}
	obj, err := s.keyByUID(ctx, uid)
	if err != nil {
		return caller{}, obj, err
	}
	_, rec, err := decode(kindApiKey, obj)
	if err != nil {
		return caller{}, obj, s.toStatus(err, "")
	}
	if subtle.ConstantTimeCompare([]byte(hashSecret(secret)), []byte(rec.SecretSHA256)) != 1 {
		return caller{}, obj, unauthenticated("invalid api key")
	}
	c, err := s.keyCaller(obj)
	return c, obj, err
}

// checkAccessToken authenticates an access token of this control plane's
// issuer: valid signature, iss and exp, and the API key it was issued for
// still active (a revoked key's tokens stop working here at once).
func (s *Server) checkAccessToken(ctx context.Context, token string) (caller, error) {
	claims, err := s.issuer.Verify(ctx, token)
	if errors.Is(err, issuer.ErrInvalidToken) {
		return caller{}, unauthenticated("invalid access token")
	}
	if err != nil {
		return caller{}, s.toStatus(err, "")
	}
	obj, err := s.keyByUID(ctx, claims.ClientID)
	if err != nil {
		return caller{}, err
	}
	c, err := s.keyCaller(obj)
	if err == nil && c.name != issuer.Principal(claims.Subject) {
		return caller{}, unauthenticated("invalid access token")
	}
	return c, err
}

// keyByUID finds an API key by uid (UNAUTHENTICATED when there is none).
func (s *Server) keyByUID(ctx context.Context, uid string) (store.Object, error) {
	obj, err := s.store.GetByUID(ctx, uid)
	if errors.Is(err, store.ErrNotFound) || (err == nil && obj.Kind != kindApiKey.collection) {
		return store.Object{}, unauthenticated("invalid api key")
	}
	if err != nil {
		return store.Object{}, s.toStatus(err, "")
	}
	return obj, nil
}

// keyCaller is the principal of an API key that is neither revoked nor
// expired.
func (s *Server) keyCaller(obj store.Object) (caller, error) {
	m, _, err := decode(kindApiKey, obj)
	if err != nil {
		return caller{}, s.toStatus(err, "")
	}
	key := m.(*cpv1.ApiKey)
	switch keyState(key, time.Now()) {
	case cpv1.ApiKey_REVOKED:
		return caller{}, unauthenticated("api key revoked")
	case cpv1.ApiKey_EXPIRED:
		return caller{}, unauthenticated("api key expired")
	}
	if strings.HasPrefix(obj.Parent, operatorsCollection+"/") {
		return caller{name: obj.Parent, kind: "operator"}, nil
	}
	sa, err := kindServiceAccount.parseName("key", obj.Parent)
	if err != nil {
		return caller{}, unauthenticated("invalid api key")
	}
	return caller{name: sa.name, kind: "service_account", org: sa.org}, nil
}

// keyState is the key's state at now: a stored ACTIVE key past its expire
// time is EXPIRED.
func keyState(k *cpv1.ApiKey, now time.Time) cpv1.ApiKey_State {
	if k.GetState() == cpv1.ApiKey_ACTIVE && k.GetExpireTime() != nil && !now.Before(k.GetExpireTime().AsTime()) {
		return cpv1.ApiKey_EXPIRED
	}
	return k.GetState()
}

// policyPrincipal builds the policy's view of c, with its role bindings.
func (s *Server) policyPrincipal(ctx context.Context, c caller) (policy.Principal, error) {
	p := policy.Principal{Name: c.name, Kind: c.kind, Org: c.org}
	if c.org == "" {
		return p, nil
	}
	q := store.ListQuery{Kind: kindRoleBinding.collection, Parent: c.org, PageSize: 1000}
	for {
		objs, next, err := s.store.List(ctx, q)
		if err != nil {
			return p, err
		}
		for _, o := range objs {
			m, _, err := decode(kindRoleBinding, o)
			if err != nil {
				return p, err
			}
			rb := m.(*cpv1.RoleBinding)
			if rb.GetMember() == c.name {
				p.Bindings = append(p.Bindings, policy.Binding{Role: rb.GetRole(), Resource: rb.GetResource()})
			}
		}
		if next == "" {
			return p, nil
		}
		q.PageToken = next
	}
}

// bootstrap creates the operator principal and its first key when the
// store has none, writing the key to cfg.BootstrapKeyFile (0600) before the
// transaction commits; a store that has an operator is left alone.
func (s *Server) bootstrap(ctx context.Context, keyFile string) error {
	_, err := s.store.Get(ctx, operatorsCollection, bootstrapOperator)
	if err == nil {
		return nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("apiserver: bootstrap: %w", err)
	}
	if keyFile == "" {
		return errors.New("apiserver: bootstrap: the store has no operator and no BootstrapKeyFile is set")
	}
	uid, secret, hash := newKeySecret()
	key := &cpv1.ApiKey{DisplayName: "bootstrap operator key", State: cpv1.ApiKey_ACTIVE}
	data, err := encode(key, hash)
	if err != nil {
		return err
	}
	opData, _ := encode(&cpv1.ServiceAccount{DisplayName: "bootstrap operator"}, "")
	if err := writeSecretFile(keyFile, secret+"\n"); err != nil {
		return err
	}
	err = s.store.Tx(ctx, func(w store.Writer) error {
		if _, err := w.Create(ctx, store.Object{Kind: operatorsCollection, Name: bootstrapOperator, Data: opData}, ""); err != nil {
			return err
		}
		keyName := bootstrapOperator + "/apiKeys/bootstrap"
		if _, err := w.Create(ctx, store.Object{Kind: kindApiKey.collection, Name: keyName, Parent: bootstrapOperator, UID: uid, Data: data}, ""); err != nil {
			return err
		}
		return w.AppendAudit(ctx, store.AuditEvent{Principal: bootstrapOperator, Method: "Bootstrap", Resource: keyName, Outcome: "ok"})
	})
	if err != nil {
		os.Remove(keyFile)
		return fmt.Errorf("apiserver: bootstrap: %w", err)
	}
	s.log.Info("apiserver: bootstrapped operator key", "principal", bootstrapOperator, "key_file", keyFile)
	return nil
}

// writeSecretFile writes data to path with mode 0600, atomically.
func writeSecretFile(path, data string) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("apiserver: bootstrap key file: %w", err)
		}
	}()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".bootstrap-key-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	err = tmp.Chmod(0o600)
	if err == nil {
		_, err = tmp.WriteString(data)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
