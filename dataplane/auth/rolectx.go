package auth

import "context"

type roleKey struct{}

// WithRole returns ctx carrying the authenticated role of a request, for
// handlers that authorize further steps themselves (the functions API
// checks the topics a function reads and writes).
func WithRole(ctx context.Context, role string) context.Context {
	return context.WithValue(ctx, roleKey{}, role)
}

// RoleFrom returns the role WithRole stored, and whether a request was
// authenticated at all.
func RoleFrom(ctx context.Context) (string, bool) {
	r, ok := ctx.Value(roleKey{}).(string)
	return r, ok
}
