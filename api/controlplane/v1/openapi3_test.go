package controlplanev1

import (
	"context"
	"encoding/json"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

var templateParam = regexp.MustCompile(`\{([^}]+)\}`)

// The OpenAPI 3 document is valid OpenAPI (kin-openapi's validation,
// references resolved), has no two paths of the same template, declares
// every path parameter of every operation, has unique operationIds, and
// has an operation for every operation of the v2 document.
func TestOpenAPI3Lint(t *testing.T) {
	ctx := context.Background()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(OpenAPI3)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if err := doc.Validate(ctx); err != nil {
		t.Fatalf("validate: %v", err)
	}
	if doc.OpenAPI != "3.0.3" {
		t.Errorf("openapi %q", doc.OpenAPI)
	}
	if s := doc.Components.SecuritySchemes["apiKey"]; s == nil || s.Value.Type != "http" || s.Value.Scheme != "bearer" {
		t.Errorf("security scheme apiKey: %+v", s)
	}
	if doc.Components.Schemas["Status"] == nil {
		t.Error("no Status schema")
	}

	templates := map[string]string{}
	ids := map[string]string{}
	ops := 0
	for path, item := range doc.Paths.Map() {
		shape := templateParam.ReplaceAllString(path, "{}")
		if other, dup := templates[shape]; dup {
			t.Errorf("paths %s and %s are the same template", path, other)
		}
		templates[shape] = path
		var inPath []string
		for _, m := range templateParam.FindAllStringSubmatch(path, -1) {
			inPath = append(inPath, m[1])
		}
		sort.Strings(inPath)
		for method, op := range item.Operations() {
			ops++
			where := method + " " + path
			if op.OperationID == "" {
				t.Errorf("%s: no operationId", where)
			} else if other, dup := ids[op.OperationID]; dup {
				t.Errorf("operationId %s on %s and %s", op.OperationID, where, other)
			}
			ids[op.OperationID] = where
			var declared []string
			for _, p := range op.Parameters {
				if p.Value.In == openapi3.ParameterInPath {
					declared = append(declared, p.Value.Name)
					if !p.Value.Required {
						t.Errorf("%s: path parameter %s not required", where, p.Value.Name)
					}
				}
			}
			sort.Strings(declared)
			if strings.Join(declared, ",") != strings.Join(inPath, ",") {
				t.Errorf("%s: path parameters declared %v, in the template %v", where, declared, inPath)
			}
			if op.Responses.Default() == nil || op.Responses.Status(200) == nil {
				t.Errorf("%s: want a 200 and a default (error) response", where)
			}
		}
	}

	var v2 struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(OpenAPI, &v2); err != nil {
		t.Fatal(err)
	}
	v2ops := 0
	for _, item := range v2.Paths {
		for k := range item {
			if k != "parameters" {
				v2ops++
			}
		}
	}
	if ops != v2ops {
		t.Errorf("%d operations, the v2 document has %d", ops, v2ops)
	}
}
