package metadata

import (
	"fmt"
	"strings"
	"time"
)

// ValidateKey reports whether key is a well-formed key: it starts with '/',
// does not end with '/', and has no empty segments. "/" itself is not a key.
// The error wraps ErrInvalidKey.
func ValidateKey(key string) error {
	if key == "/" {
		return fmt.Errorf("%w: %q is the root, not a key", ErrInvalidKey, key)
	}
	return ValidatePath(key)
}

// ValidatePath is ValidateKey that also accepts the root "/". Paths name
// parents (Children) and watch prefixes (Watch).
func ValidatePath(p string) error {
	switch {
	case p == "/":
		return nil
	case p == "" || p[0] != '/':
		return fmt.Errorf("%w: %q does not start with '/'", ErrInvalidKey, p)
	case p[len(p)-1] == '/':
		return fmt.Errorf("%w: %q ends with '/'", ErrInvalidKey, p)
	case strings.Contains(p, "//"):
		return fmt.Errorf("%w: %q has an empty segment", ErrInvalidKey, p)
	}
	return nil
}

// ValidateName reports whether name is usable as a sequence name (NextID):
// non-empty and free of NUL bytes. Slashes are allowed.
func ValidateName(name string) error {
	if name == "" || strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("%w: bad name %q", ErrInvalidKey, name)
	}
	return nil
}

// InSubtree reports whether key is p or a descendant of p. p must be a valid
// path; "/" contains every key.
func InSubtree(key, p string) bool {
	if p == "/" {
		return strings.HasPrefix(key, "/")
	}
	return key == p || (strings.HasPrefix(key, p) && key[len(p)] == '/')
}

// ChildName returns the name of the direct child of parent on the way to
// key, or "" when key is not a strict descendant of parent.
func ChildName(key, parent string) string {
	pfx := parent + "/"
	if parent == "/" {
		pfx = "/"
	}
	if !strings.HasPrefix(key, pfx) || len(key) == len(pfx) {
		return ""
	}
	rest := key[len(pfx):]
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return rest[:i]
	}
	return rest
}

// DefaultSessionTTL is the TTL a backend uses when NewSession is given a TTL
// of zero or less.
const DefaultSessionTTL = 10 * time.Second
