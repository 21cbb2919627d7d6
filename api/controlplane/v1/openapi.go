package controlplanev1

import _ "embed"

// OpenAPI is the OpenAPI v2 document of this API, as generated into
// controlplane.swagger.json. The API server serves it at /openapi.json.
//
//go:embed controlplane.swagger.json
var OpenAPI []byte

// OpenAPI3 is the OpenAPI 3 document of this API's REST mapping, as
// generated into controlplane.openapi3.json by api/openapi3gen: one path
// per resource template (/v1/organizations/{organization}/clusters/{cluster}),
// one operation per method and path. The API server serves it at
// /v3/openapi.json.
//
//go:embed controlplane.openapi3.json
var OpenAPI3 []byte
