// Command openapi3gen writes the OpenAPI 3 document of the control-plane
// REST API (api/controlplane/v1/controlplane.openapi3.json) from the API's
// proto descriptors and its HTTP mapping (gateway.yaml). api/generate.sh runs
// it after protoc has written a descriptor set with source info, so message,
// field and method comments become descriptions:
//
//	openapi3gen -descriptors set.pb -http gateway.yaml -info openapi.yaml -out controlplane.openapi3.json
//
// The document follows what grpc-gateway serves: each HTTP rule (and each of
// its additional bindings) is one operation whose path template spells the
// resource-name patterns out, so {name=organizations/*/clusters/*} becomes
// /organizations/{organization}/clusters/{cluster}, one path parameter per
// "*" named for the singular of the collection before it. Path fields are
// rebuilt from those parameters by the server; the other request fields are
// query parameters (no body), the body field's message (body: field) or one
// object of every remaining field (body: "*"). Message schemas follow
// protojson: lowerCamelCase names, 64-bit integers as strings, enums by name,
// well-known types in their JSON forms, controlplanev1.TextLimits as
// maxLength. Errors are google.rpc.Status as the
// gateway renders it ({"code", "message", "details"}).
//
// The output is deterministic (sorted keys), so a regenerated document that
// differs from the checked-in one means the checked-in one is stale; the
// package's test regenerates it and compares.
package main
