package controlplanev1

import _ "embed"

// OpenAPI is the OpenAPI v2 document of this API, as generated into
// controlplane.swagger.json. The API server serves it at /openapi.json.
//
//go:embed controlplane.swagger.json
var OpenAPI []byte
