// Package policy decides, with OPA, who may do what in Magnetar and which
// requests are admitted. The Rego policies live in policy/rego and are
// embedded in the binary; Engine prepares them once and evaluates an Input
// per call, goroutine-safe.
//
// Two questions are asked of every control-plane call: authorization (the
// principal's role bindings and organization isolation: an organization
// never sees another's resources) and admission (naming rules, allowed
// regions, maximum clusters per organization, the function limits: instances
// and RAM of an organization's functions, sources and sinks). Both are
// policy, not Go code. The same package will authorize produce and
// consume in brokers.
//
// # Files
//
//   - rego/actions.rego (package magnetar.actions): the known actions,
//     "<collection>.<verb>", and which are operator-only or public.
//   - rego/authz.rego (package magnetar.authz): `allow` (default false) and
//     `reasons`, the tenant-visible words for a denial.
//   - rego/admission.rego (package magnetar.admission): `deny`, a set of
//     {"code", "message"} objects, each message naming the field.
//   - rego/data.json: the default data document (data.magnetar.limits...),
//     which WithData overrides key by key.
//   - rego/*_test.rego: Rego unit tests, run by `go test ./policy` through
//     OPA's tester (TestRegoUnitTests); not loaded by the Engine.
//   - testdata/decisions.txt: golden decisions for every case of the Go
//     table test; refresh with `go test ./policy -run TestGoldenDecisions
//     -update` and review the diff.
//
// # Names
//
// Resources are named by paths ("organizations/acme/clusters/prod/tenants/
// t/namespaces/ns/topics/orders"); organizations by their resource name
// ("organizations/acme") in Principal.Org, Resource.Org and binding
// resources. A binding covers its resource and what is below it: equal, or
// a prefix followed by "/". The roles a binding can grant are those of
// policy/roles (roles.All), which the API server accepts; TestRolesAgree
// fails when the policies or docs/security.md name others or leave one out.
//
// # Callers
//
// The control-plane API server builds an Input per call and maps the
// Decision: Denied to PERMISSION_DENIED (or NOT_FOUND), otherwise Code to
// the gRPC status. Brokers will ask "topics.produce" and "topics.consume".
// Engine.Actions lists the actions the policy knows; every other action is
// denied to non-operators, so an API server can check its table against it.
//
// # Concurrency
//
// New compiles and prepares the queries once. An Engine is immutable
// afterwards: Decide may be called from any number of goroutines at once.
// The package starts no goroutines. Decide fails closed: on an evaluation
// error it returns a denial and an error wrapping ErrEvaluation.
package policy
