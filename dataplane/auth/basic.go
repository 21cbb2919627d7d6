package auth

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"os"
	"strings"

	"golang.org/x/crypto/bcrypt"
)

// BasicProvider authenticates "user:password" ("basic") against an
// htpasswd file, as Pulsar's AuthenticationProviderBasic does. Entries may
// be apr1-MD5 ("$apr1$"), bcrypt ("$2y$", "$2a$", "$2b$") or SHA-1
// ("{SHA}"); the role is the user name.
type BasicProvider struct {
	users map[string]string // user -> hash
}

var _ Provider = (*BasicProvider)(nil)

// ReadHtpasswd loads an htpasswd file.
func ReadHtpasswd(path string) (*BasicProvider, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: htpasswd: %w", err)
	}
	return ParseHtpasswd(b)
}

// ParseHtpasswd parses htpasswd lines ("user:hash"; '#' comments).
func ParseHtpasswd(b []byte) (*BasicProvider, error) {
	p := &BasicProvider{users: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		user, hash, ok := strings.Cut(line, ":")
		if !ok || user == "" || hash == "" {
			return nil, fmt.Errorf("auth: htpasswd line %d is not user:hash", n)
		}
		p.users[user] = hash
	}
	if len(p.users) == 0 {
		return nil, fmt.Errorf("auth: htpasswd has no users")
	}
	return p, nil
}

// Method returns "basic".
func (p *BasicProvider) Method() string { return MethodBasic }

// Authenticate checks "user:password".
func (p *BasicProvider) Authenticate(_ context.Context, c Credentials) (Identity, error) {
	user, pass, ok := strings.Cut(string(c.Data), ":")
	if !ok || user == "" {
		return Identity{}, failf("basic credentials are not user:password")
	}
	hash, known := p.users[user]
	if !known || !checkHtpasswd(hash, pass) {
		return Identity{}, failf("unknown user or wrong password")
	}
	return Identity{Role: user, Method: MethodBasic}, nil
}

func checkHtpasswd(hash, pass string) bool {
	switch {
	case strings.HasPrefix(hash, "$apr1$"):
		parts := strings.SplitN(hash, "$", 4) // "", "apr1", salt, digest
		if len(parts) != 4 {
			return false
		}
		return subtle.ConstantTimeCompare([]byte(apr1(pass, parts[2])), []byte(hash)) == 1
	case strings.HasPrefix(hash, "$2"):
		return bcrypt.CompareHashAndPassword([]byte(hash), []byte(pass)) == nil
	case strings.HasPrefix(hash, "{SHA}"):
		sum := sha1.Sum([]byte(pass))
		want := "{SHA}" + base64.StdEncoding.EncodeToString(sum[:])
		return subtle.ConstantTimeCompare([]byte(want), []byte(hash)) == 1
	}
	return false
}

// apr1 computes Apache's MD5-crypt of pass with salt: "$apr1$salt$digest".
// The algorithm is the published md5crypt one with the magic "$apr1$": an
// alternate sum, 1000 rounds of mixing, and a custom base-64 of 22 chars.
func apr1(pass, salt string) string {
	const magic = "$apr1$"
	if len(salt) > 8 {
		salt = salt[:8]
	}
	pw, sl := []byte(pass), []byte(salt)

	alt := md5.New()
	alt.Write(pw)
	alt.Write(sl)
	alt.Write(pw)
	altSum := alt.Sum(nil)

	h := md5.New()
	h.Write(pw)
	h.Write([]byte(magic))
	h.Write(sl)
	for i := len(pw); i > 0; i -= 16 {
		h.Write(altSum[:min(i, 16)])
	}
	for i := len(pw); i > 0; i >>= 1 {
		if i&1 == 1 {
			h.Write([]byte{0})
		} else {
			h.Write(pw[:1])
		}
	}
	sum := h.Sum(nil)

	for i := 0; i < 1000; i++ {
		r := md5.New()
		if i&1 == 1 {
			r.Write(pw)
		} else {
			r.Write(sum)
		}
		if i%3 != 0 {
			r.Write(sl)
		}
		if i%7 != 0 {
			r.Write(pw)
		}
		if i&1 == 1 {
			r.Write(sum)
		} else {
			r.Write(pw)
		}
		sum = r.Sum(nil)
	}

	const itoa64 = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	var out []byte
	enc := func(a, b, c byte, n int) {
		v := uint(a)<<16 | uint(b)<<8 | uint(c)
		for ; n > 0; n-- {
			out = append(out, itoa64[v&0x3f])
			v >>= 6
		}
	}
	enc(sum[0], sum[6], sum[12], 4)
	enc(sum[1], sum[7], sum[13], 4)
	enc(sum[2], sum[8], sum[14], 4)
	enc(sum[3], sum[9], sum[15], 4)
	enc(sum[4], sum[10], sum[5], 4)
	enc(0, 0, sum[11], 2)
	return magic + salt + "$" + string(out)
}
