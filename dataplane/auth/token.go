package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// DefaultMaxTokenSize bounds the tokens a TokenProvider parses. Larger
// credentials are refused before any decoding.
const DefaultMaxTokenSize = 64 << 10

// TokenConfig configures a TokenProvider. Exactly one of SecretKey and
// PublicKey is set.
type TokenConfig struct {
	// SecretKey verifies HS256, HS384 and HS512 tokens.
	SecretKey []byte
	// PublicKey (*rsa.PublicKey or *ecdsa.PublicKey) verifies RS*/PS* or
	// ES* tokens.
	PublicKey crypto.PublicKey
	// RoleClaim is the claim holding the role. Default "sub" (Pulsar's
	// tokenAuthClaim).
	RoleClaim string
	// Audience, when set, must be one of the token's "aud" values (Pulsar's
	// tokenAudience); AudienceClaim names the claim (default "aud").
	Audience      string
	AudienceClaim string
	// MaxTokenSize is the longest token accepted. Default DefaultMaxTokenSize.
	MaxTokenSize int
	// Leeway tolerates clock skew on exp and nbf. Default 0.
	Leeway time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// TokenProvider authenticates JWTs ("token").
type TokenProvider struct {
	cfg    TokenConfig
	key    any
	algs   []string
	parser *jwt.Parser
}

var _ Provider = (*TokenProvider)(nil)

// NewTokenProvider checks cfg and returns the provider.
func NewTokenProvider(cfg TokenConfig) (*TokenProvider, error) {
	if cfg.RoleClaim == "" {
		cfg.RoleClaim = "sub"
	}
	if cfg.AudienceClaim == "" {
		cfg.AudienceClaim = "aud"
	}
	if cfg.MaxTokenSize <= 0 {
		cfg.MaxTokenSize = DefaultMaxTokenSize
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	p := &TokenProvider{cfg: cfg}
	switch k := cfg.PublicKey.(type) {
	case nil:
		if len(cfg.SecretKey) == 0 {
			return nil, errors.New("auth: token provider needs a secret key or a public key")
		}
		p.key, p.algs = cfg.SecretKey, []string{"HS256", "HS384", "HS512"}
	case *rsa.PublicKey:
		p.key, p.algs = k, []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}
	case *ecdsa.PublicKey:
		p.key, p.algs = k, []string{"ES256", "ES384", "ES512"}
	default:
		return nil, fmt.Errorf("auth: unsupported public key type %T", cfg.PublicKey)
	}
	if cfg.PublicKey != nil && len(cfg.SecretKey) > 0 {
		return nil, errors.New("auth: set a secret key or a public key, not both")
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(p.algs),
		jwt.WithTimeFunc(cfg.Now),
		jwt.WithLeeway(cfg.Leeway),
		// Tokens minted by some tools carry '='-padded segments.
		jwt.WithPaddingAllowed(),
	}
	p.parser = jwt.NewParser(opts...)
	return p, nil
}

// Method returns "token".
func (p *TokenProvider) Method() string { return MethodToken }

// Authenticate verifies the token in c.Data.
func (p *TokenProvider) Authenticate(_ context.Context, c Credentials) (Identity, error) {
	tok, err := tokenText(c, p.cfg.MaxTokenSize)
	if err != nil {
		return Identity{}, err
	}
	claims := jwt.MapClaims{}
	_, err = p.parser.ParseWithClaims(tok, claims, func(t *jwt.Token) (any, error) { return p.key, nil })
	if err != nil {
		return Identity{}, failf("%s", tokenReason(err))
	}
	role, _ := claims[p.cfg.RoleClaim].(string)
	if role == "" {
		return Identity{}, failf("token has no %q claim", p.cfg.RoleClaim)
	}
	if p.cfg.Audience != "" && !hasAudience(claims[p.cfg.AudienceClaim], p.cfg.Audience) {
		return Identity{}, failf("token is not for audience %q", p.cfg.Audience)
	}
	id := Identity{Role: role, Method: MethodToken}
	if exp, err := claims.GetExpirationTime(); err == nil && exp != nil {
		id.Expires = exp.Time
	}
	return id, nil
}

// tokenText is the token c carries, refused when empty or over max bytes.
func tokenText(c Credentials, max int) (string, error) {
	tok := strings.TrimSpace(string(c.Data))
	if tok == "" {
		return "", failf("empty token")
	}
	if len(tok) > max {
		return "", failf("token of %d bytes is over the %d-byte limit", len(tok), max)
	}
	return tok, nil
}

func hasAudience(v any, want string) bool {
	switch a := v.(type) {
	case string:
		return a == want
	case []any:
		for _, x := range a {
			if s, ok := x.(string); ok && s == want {
				return true
			}
		}
	}
	return false
}

// tokenReason words a parse failure for the client.
func tokenReason(err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return "token expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "token not valid yet"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return "token signature is invalid"
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return "token cannot be verified: its algorithm is not accepted"
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "malformed token"
	}
	return "invalid token"
}

// MintOptions describe a token to sign.
type MintOptions struct {
	Subject   string
	Audience  string        // optional "aud"
	Expiry    time.Duration // 0: the token never expires
	Now       time.Time     // default time.Now()
	RoleClaim string        // default "sub"
	Issuer    string        // optional "iss"
	// Claims are further claims; they do not override the ones above.
	Claims  map[string]any
	Headers map[string]any
}

// Mint signs a token with key: a []byte secret (HS256), *rsa.PrivateKey
// (RS256) or *ecdsa.PrivateKey (ES256 for P-256, ES384, ES512).
func Mint(key any, o MintOptions) (string, error) {
	if o.Subject == "" {
		return "", errors.New("auth: a token needs a subject")
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if o.RoleClaim == "" {
		o.RoleClaim = "sub"
	}
	claims := jwt.MapClaims{}
	for k, v := range o.Claims {
		claims[k] = v
	}
	claims[o.RoleClaim] = o.Subject
	if o.Issuer != "" {
		claims["iss"] = o.Issuer
	}
	if o.Expiry > 0 {
		claims["exp"] = o.Now.Add(o.Expiry).Unix()
	}
	if o.Audience != "" {
		claims["aud"] = o.Audience
	}
	var m jwt.SigningMethod
	switch k := key.(type) {
	case []byte:
		m = jwt.SigningMethodHS256
	case *rsa.PrivateKey:
		m = jwt.SigningMethodRS256
	case *ecdsa.PrivateKey:
		switch k.Curve.Params().BitSize {
		case 256:
			m = jwt.SigningMethodES256
		case 384:
			m = jwt.SigningMethodES384
		default:
			m = jwt.SigningMethodES512
		}
	default:
		return "", fmt.Errorf("auth: cannot sign with a %T", key)
	}
	t := jwt.NewWithClaims(m, claims)
	for k, v := range o.Headers {
		t.Header[k] = v
	}
	return t.SignedString(key)
}
