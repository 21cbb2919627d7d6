package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"gopkg.in/yaml.v3"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

// httpRule is one google.api.HttpRule of gateway.yaml.
type httpRule struct {
	Selector           string     `yaml:"selector"`
	Get                string     `yaml:"get"`
	Put                string     `yaml:"put"`
	Post               string     `yaml:"post"`
	Delete             string     `yaml:"delete"`
	Patch              string     `yaml:"patch"`
	Body               string     `yaml:"body"`
	ResponseBody       string     `yaml:"response_body"`
	AdditionalBindings []httpRule `yaml:"additional_bindings"`
}

// methodPath is the rule's HTTP method (lower case, as OpenAPI keys it) and
// path template.
func (r httpRule) methodPath() (string, string, error) {
	var method, path string
	n := 0
	for _, c := range []struct{ m, p string }{{"get", r.Get}, {"put", r.Put}, {"post", r.Post}, {"delete", r.Delete}, {"patch", r.Patch}} {
		if c.p != "" {
			method, path = c.m, c.p
			n++
		}
	}
	if n != 1 {
		return "", "", fmt.Errorf("rule %s: want exactly one of get, put, post, delete, patch; have %d", r.Selector, n)
	}
	return method, path, nil
}

// parseHTTPRules reads the http.rules of a google.api.Service YAML file.
func parseHTTPRules(b []byte) ([]httpRule, error) {
	var cfg struct {
		HTTP struct {
			Rules []httpRule `yaml:"rules"`
		} `yaml:"http"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("http rules: %w", err)
	}
	return cfg.HTTP.Rules, nil
}

// Info is the document's info object.
type Info struct {
	Title       string `yaml:"title"`
	Version     string `yaml:"version"`
	Description string `yaml:"description"`
}

// parseInfo reads the info of the first file option of an
// openapi_configuration file (openapi.yaml), the one protoc-gen-openapiv2
// reads too, so both documents carry the same title and description.
func parseInfo(b []byte) (Info, error) {
	var cfg struct {
		OpenapiOptions struct {
			File []struct {
				Option struct {
					Info Info `yaml:"info"`
				} `yaml:"option"`
			} `yaml:"file"`
		} `yaml:"openapiOptions"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return Info{}, fmt.Errorf("openapi configuration: %w", err)
	}
	for _, f := range cfg.OpenapiOptions.File {
		if f.Option.Info.Title != "" {
			return f.Option.Info, nil
		}
	}
	return Info{}, fmt.Errorf("openapi configuration: no file option has an info.title")
}

// pathParam is one "*" of a path template's variable.
type pathParam struct {
	name    string // OpenAPI parameter name: "cluster"
	field   string // request field path the variable binds: "cluster.name"
	pattern string // the variable's resource-name pattern with the parameters named
}

// template is a parsed path template.
type template struct {
	path   string      // OpenAPI path: /v1/organizations/{organization}/clusters/{cluster}:reportStatus
	params []pathParam // in path order
	fields []string    // request field paths bound by the path, in order
}

// parseTemplate expands a google.api.http path template's variables into
// one path parameter per "*" segment, named for the singular of the literal
// segment before it (organizations/* -> organizations/{organization}).
func parseTemplate(tpl string) (template, error) {
	var t template
	var out strings.Builder
	seen := map[string]bool{}
	for i := 0; i < len(tpl); {
		c := tpl[i]
		if c != '{' {
			out.WriteByte(c)
			i++
			continue
		}
		end := strings.IndexByte(tpl[i:], '}')
		if end < 0 {
			return t, fmt.Errorf("template %s: unclosed variable", tpl)
		}
		v := tpl[i+1 : i+end]
		i += end + 1
		field, pattern, ok := strings.Cut(v, "=")
		if !ok {
			pattern = "*"
		}
		t.fields = append(t.fields, field)
		segs := strings.Split(pattern, "/")
		var named []string
		for j, seg := range segs {
			switch seg {
			case "*":
				name := lastPart(field)
				if j > 0 {
					name = singular(segs[j-1])
				}
				if seen[name] {
					return t, fmt.Errorf("template %s: parameter %s twice", tpl, name)
				}
				seen[name] = true
				named = append(named, "{"+name+"}")
			case "**":
				return t, fmt.Errorf("template %s: ** is not supported", tpl)
			default:
				named = append(named, seg)
			}
		}
		p := strings.Join(named, "/")
		for _, seg := range named {
			if strings.HasPrefix(seg, "{") {
				t.params = append(t.params, pathParam{name: strings.Trim(seg, "{}"), field: field, pattern: p})
			}
		}
		out.WriteString(p)
	}
	t.path = out.String()
	return t, nil
}

func lastPart(field string) string {
	if i := strings.LastIndexByte(field, '.'); i >= 0 {
		return field[i+1:]
	}
	return field
}

// singular is the singular of a collection id: clusters -> cluster,
// policies -> policy.
func singular(collection string) string {
	switch {
	case strings.HasSuffix(collection, "ies"):
		return strings.TrimSuffix(collection, "ies") + "y"
	case strings.HasSuffix(collection, "s"):
		return strings.TrimSuffix(collection, "s")
	}
	return collection
}

// obj is a JSON object; encoding/json writes its keys sorted.
type obj = map[string]any

// generator builds one document.
type generator struct {
	files   *protoregistry.Files
	pkg     string // proto package whose messages are named without it
	schemas obj    // components.schemas
	pending []protoreflect.MessageDescriptor
}

// Generate writes the OpenAPI 3 document of the services in set reachable
// through rules. set must hold every file the services import.
func Generate(set *descriptorpb.FileDescriptorSet, rules []httpRule, info Info) ([]byte, error) {
	files, err := protodesc.NewFiles(set)
	if err != nil {
		return nil, fmt.Errorf("descriptors: %w", err)
	}
	g := &generator{files: files, schemas: obj{}}
	paths := obj{}
	ids := map[string]bool{}
	tags := map[string]string{}
	for _, r := range rules {
		d, err := files.FindDescriptorByName(protoreflect.FullName(r.Selector))
		if err != nil {
			return nil, fmt.Errorf("rule %s: %w", r.Selector, err)
		}
		m, ok := d.(protoreflect.MethodDescriptor)
		if !ok {
			return nil, fmt.Errorf("rule %s: not a method", r.Selector)
		}
		svc := m.Parent().(protoreflect.ServiceDescriptor)
		if g.pkg == "" {
			g.pkg = string(svc.ParentFile().Package())
		}
		tags[string(svc.Name())] = comments(svc)
		for i, b := range append([]httpRule{r}, r.AdditionalBindings...) {
			if i > 0 {
				b.Selector = r.Selector
			}
			id := string(svc.Name()) + "_" + string(m.Name())
			if i > 0 {
				id += fmt.Sprintf("_%d", i+1)
			}
			if ids[id] {
				return nil, fmt.Errorf("operationId %s twice", id)
			}
			ids[id] = true
			method, path, op, err := g.operation(m, b, id)
			if err != nil {
				return nil, err
			}
			item, _ := paths[path].(obj)
			if item == nil {
				item = obj{}
				paths[path] = item
			}
			if _, dup := item[method]; dup {
				return nil, fmt.Errorf("%s %s: two rules", method, path)
			}
			item[method] = op
		}
	}
	if err := g.drain(); err != nil {
		return nil, err
	}
	g.schemas["Status"] = statusSchema()
	g.schemas["Any"] = obj{
		"type":                 "object",
		"description":          "A protobuf message of any type: \"@type\" names it, the other properties are its JSON fields.",
		"properties":           obj{"@type": obj{"type": "string", "description": "Type URL, e.g. type.googleapis.com/google.rpc.BadRequest."}},
		"additionalProperties": true,
	}
	var tagList []any
	names := make([]string, 0, len(tags))
	for n := range tags {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t := obj{"name": n}
		if tags[n] != "" {
			t["description"] = tags[n]
		}
		tagList = append(tagList, t)
	}
	doc := obj{
		"openapi":  "3.0.3",
		"info":     obj{"title": info.Title, "version": info.Version, "description": info.Description},
		"tags":     tagList,
		"paths":    paths,
		"security": []any{obj{"apiKey": []any{}}},
		"components": obj{
			"schemas": g.schemas,
			"securitySchemes": obj{"apiKey": obj{
				"type":   "http",
				"scheme": "bearer",
				"description": "An API key of a service account or operator (mgk_<uid>_<secret>), " +
					"sent as the header Authorization: Bearer <key>. A missing, unknown, revoked or expired key is refused with 401.",
			}},
		},
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// statusSchema is google.rpc.Status in the gateway's JSON rendering.
func statusSchema() obj {
	return obj{
		"type":        "object",
		"description": "An error: google.rpc.Status as JSON. The HTTP status follows the gRPC code (INVALID_ARGUMENT 400, UNAUTHENTICATED 401, PERMISSION_DENIED 403, NOT_FOUND 404, ALREADY_EXISTS and ABORTED 409, FAILED_PRECONDITION 400, RESOURCE_EXHAUSTED 429, UNAVAILABLE 503).",
		"properties": obj{
			"code":    obj{"type": "integer", "format": "int32", "description": "The gRPC status code (google.rpc.Code)."},
			"message": obj{"type": "string", "description": "What went wrong, naming the field or resource at fault."},
			"details": obj{"type": "array", "items": obj{"$ref": "#/components/schemas/Any"}, "description": "Typed details of the error."},
		},
		"required": []any{"code", "message"},
	}
}

// operation builds the operation of one binding of method m.
func (g *generator) operation(m protoreflect.MethodDescriptor, r httpRule, id string) (string, string, obj, error) {
	method, raw, err := r.methodPath()
	if err != nil {
		return "", "", nil, err
	}
	t, err := parseTemplate(raw)
	if err != nil {
		return "", "", nil, err
	}
	in := m.Input()
	bound := map[string]bool{} // top-level fields set from the path
	var params []any
	for _, f := range t.fields {
		fd, err := fieldByPath(in, f)
		if err != nil {
			return "", "", nil, fmt.Errorf("%s %s: %w", method, raw, err)
		}
		if fd.Kind() != protoreflect.StringKind || fd.Cardinality() == protoreflect.Repeated {
			return "", "", nil, fmt.Errorf("%s %s: path field %s is not a string", method, raw, f)
		}
		bound[strings.SplitN(f, ".", 2)[0]] = true
	}
	for _, p := range t.params {
		params = append(params, obj{
			"name": p.name, "in": "path", "required": true,
			"schema":      obj{"type": "string", "pattern": "^[^/]+$"},
			"description": fmt.Sprintf("The {%s} segment of %s (%s).", p.name, jsonPath(in, p.field), p.pattern),
		})
	}
	op := obj{"operationId": id, "tags": []any{string(m.Parent().Name())}}
	if c := comments(m); c != "" {
		op["description"] = c
	}
	switch r.Body {
	case "":
		params = append(params, g.queryParams(in, bound, "", 0)...)
	case "*":
		op["requestBody"] = obj{"required": true, "content": obj{"application/json": obj{"schema": g.bodySchema(in, bound)}}}
	default:
		fd := in.Fields().ByName(protoreflect.Name(r.Body))
		if fd == nil || fd.Message() == nil {
			return "", "", nil, fmt.Errorf("%s %s: body %s is not a message field of %s", method, raw, r.Body, in.FullName())
		}
		bound[r.Body] = true
		body := g.singular(fd)
		if c := comments(fd); c != "" {
			body = obj{"allOf": []any{body}, "description": c}
		}
		op["requestBody"] = obj{"required": true, "content": obj{"application/json": obj{"schema": body}}}
		params = append(params, g.queryParams(in, bound, "", 0)...)
	}
	if len(params) > 0 {
		op["parameters"] = params
	}
	out := g.messageRef(m.Output())
	if r.ResponseBody != "" {
		fd := m.Output().Fields().ByName(protoreflect.Name(r.ResponseBody))
		if fd == nil {
			return "", "", nil, fmt.Errorf("%s %s: response_body %s is not a field of %s", method, raw, r.ResponseBody, m.Output().FullName())
		}
		out = g.fieldSchema(fd)
	}
	op["responses"] = obj{
		"200": obj{"description": "OK: " + string(m.Output().Name()) + ".", "content": obj{"application/json": obj{"schema": out}}},
		"default": obj{"description": "An error.", "content": obj{"application/json": obj{
			"schema": obj{"$ref": "#/components/schemas/Status"}}}},
	}
	return method, t.path, op, nil
}

// fieldByPath resolves a dotted request field path ("cluster.name").
func fieldByPath(md protoreflect.MessageDescriptor, path string) (protoreflect.FieldDescriptor, error) {
	parts := strings.Split(path, ".")
	var fd protoreflect.FieldDescriptor
	for i, p := range parts {
		if md == nil {
			return nil, fmt.Errorf("field %s: %s is not a message", path, strings.Join(parts[:i], "."))
		}
		fd = md.Fields().ByName(protoreflect.Name(p))
		if fd == nil {
			return nil, fmt.Errorf("field %s: no %s in %s", path, p, md.FullName())
		}
		md = fd.Message()
	}
	return fd, nil
}

// jsonPath is a request field path in JSON names ("cluster.name").
func jsonPath(md protoreflect.MessageDescriptor, path string) string {
	var out []string
	for _, p := range strings.Split(path, ".") {
		fd := md.Fields().ByName(protoreflect.Name(p))
		out = append(out, fd.JSONName())
		md = fd.Message()
	}
	return strings.Join(out, ".")
}

// bodySchema is the schema of a body: "*" request: every field of md not
// bound from the path, as a component named <Request>Body.
func (g *generator) bodySchema(md protoreflect.MessageDescriptor, bound map[string]bool) obj {
	name := g.schemaName(md) + "Body"
	if _, done := g.schemas[name]; !done {
		s := g.messageSchema(md, bound)
		s["description"] = strings.TrimSpace("The request body of " + string(md.Name()) + ": every field but those in the path. " + comments(md))
		g.schemas[name] = s
	}
	return obj{"$ref": "#/components/schemas/" + name}
}

// queryParams lists the fields of md not in skip as query parameters, the
// fields of nested messages as dotted names (as the gateway parses them).
// Maps and repeated messages have no query form and are left out.
func (g *generator) queryParams(md protoreflect.MessageDescriptor, skip map[string]bool, prefix string, depth int) []any {
	var out []any
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if skip[string(fd.Name())] || fd.IsMap() {
			continue
		}
		name := prefix + fd.JSONName()
		if fd.Message() != nil && wellKnown(fd.Message()) == nil {
			if fd.IsList() || depth >= 3 {
				continue
			}
			out = append(out, g.queryParams(fd.Message(), nil, name+".", depth+1)...)
			continue
		}
		if fd.Message() != nil && fd.IsList() {
			continue
		}
		p := obj{"name": name, "in": "query", "schema": g.fieldSchemaBare(fd)}
		if c := comments(fd); c != "" {
			p["description"] = c
		}
		out = append(out, p)
	}
	return out
}

// schemaName is the component name of a message: its full name without the
// API's package ("Cluster", "NamespacePolicies.Retention").
func (g *generator) schemaName(md protoreflect.MessageDescriptor) string {
	n := string(md.FullName())
	if g.pkg != "" && strings.HasPrefix(n, g.pkg+".") {
		return n[len(g.pkg)+1:]
	}
	return n
}

// messageRef is the schema of a message-typed value: its well-known JSON
// form or a reference to its component (written by drain).
func (g *generator) messageRef(md protoreflect.MessageDescriptor) obj {
	if s := wellKnown(md); s != nil {
		return s
	}
	name := g.schemaName(md)
	if _, ok := g.schemas[name]; !ok {
		g.schemas[name] = nil // claimed; drain writes it
		g.pending = append(g.pending, md)
	}
	return obj{"$ref": "#/components/schemas/" + name}
}

// drain writes the components of every referenced message.
func (g *generator) drain() error {
	for len(g.pending) > 0 {
		md := g.pending[0]
		g.pending = g.pending[1:]
		s := g.messageSchema(md, nil)
		if c := comments(md); c != "" {
			s["description"] = c
		}
		g.schemas[g.schemaName(md)] = s
	}
	return nil
}

func (g *generator) messageSchema(md protoreflect.MessageDescriptor, skip map[string]bool) obj {
	props := obj{}
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if skip[string(fd.Name())] {
			continue
		}
		props[fd.JSONName()] = g.fieldSchema(fd)
	}
	s := obj{"type": "object", "properties": props}
	if oneofs := md.Oneofs(); oneofs.Len() > 0 {
		var notes []string
		for i := 0; i < oneofs.Len(); i++ {
			o := oneofs.Get(i)
			if o.IsSynthetic() {
				continue
			}
			var names []string
			for j := 0; j < o.Fields().Len(); j++ {
				names = append(names, o.Fields().Get(j).JSONName())
			}
			notes = append(notes, "at most one of "+strings.Join(names, ", "))
		}
		if len(notes) > 0 {
			s["x-oneof"] = strings.Join(notes, "; ")
		}
	}
	return s
}

// fieldSchema is a field's schema with its comment as description,
// readOnly for fields documented as output only, and nullable for singular
// message fields (an unset one is rendered as null).
func (g *generator) fieldSchema(fd protoreflect.FieldDescriptor) obj {
	s := g.fieldSchemaBare(fd)
	c := comments(fd)
	readOnly := strings.Contains(c, "Output only")
	nullable := fd.Message() != nil && !fd.IsList() && !fd.IsMap() && fd.Message().FullName() != "google.protobuf.Value"
	if c == "" && !readOnly && !nullable {
		return s
	}
	if _, isRef := s["$ref"]; isRef {
		s = obj{"allOf": []any{s}}
	}
	if c != "" {
		s["description"] = c
	}
	if readOnly {
		s["readOnly"] = true
	}
	if nullable {
		s["nullable"] = true
	}
	return s
}

func (g *generator) fieldSchemaBare(fd protoreflect.FieldDescriptor) obj {
	if fd.IsMap() {
		return obj{"type": "object", "additionalProperties": g.singular(fd.MapValue())}
	}
	s := g.singular(fd)
	if fd.IsList() {
		return obj{"type": "array", "items": s}
	}
	return s
}

// singular is the schema of one value of fd, in protojson's encoding.
func (g *generator) singular(fd protoreflect.FieldDescriptor) obj {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return obj{"type": "boolean"}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return obj{"type": "integer", "format": "int32", "minimum": -1 << 31, "maximum": 1<<31 - 1}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return obj{"type": "integer", "format": "int64", "minimum": 0, "maximum": 1<<32 - 1}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return obj{"type": "string", "format": "int64", "pattern": "^-?[0-9]+$", "description": "A 64-bit integer, as a decimal string."}
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return obj{"type": "string", "format": "uint64", "pattern": "^[0-9]+$", "description": "An unsigned 64-bit integer, as a decimal string."}
	case protoreflect.FloatKind:
		return obj{"type": "number", "format": "float"}
	case protoreflect.DoubleKind:
		return obj{"type": "number", "format": "double"}
	case protoreflect.StringKind:
		if limit, ok := cpv1.TextLimits[string(fd.Name())]; ok {
			return obj{"type": "string", "maxLength": limit}
		}
		return obj{"type": "string"}
	case protoreflect.BytesKind:
		return obj{"type": "string", "format": "byte"}
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		var names []any
		for i := 0; i < vals.Len(); i++ {
			names = append(names, string(vals.Get(i).Name()))
		}
		return obj{"type": "string", "enum": names}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return g.messageRef(fd.Message())
	}
	return obj{}
}

// wellKnown is the JSON schema of a well-known type with a special JSON
// form, nil for other messages.
func wellKnown(md protoreflect.MessageDescriptor) obj {
	switch md.FullName() {
	case "google.protobuf.Timestamp":
		return obj{"type": "string", "format": "date-time", "description": "RFC 3339 time, e.g. 2026-01-02T15:04:05Z."}
	case "google.protobuf.Duration":
		return obj{"type": "string", "pattern": `^-?[0-9]+(\.[0-9]{1,9})?s$`, "description": "A duration in seconds with an s suffix, e.g. 30s or 1.5s."}
	case "google.protobuf.FieldMask":
		return obj{"type": "string", "description": "Comma-separated lowerCamelCase field paths, e.g. displayName,labels."}
	case "google.protobuf.Empty":
		return obj{"type": "object", "description": "Empty."}
	case "google.protobuf.Struct":
		return obj{"type": "object", "additionalProperties": true}
	case "google.protobuf.Value":
		return obj{"description": "Any JSON value."}
	case "google.protobuf.ListValue":
		return obj{"type": "array", "items": obj{}}
	case "google.protobuf.Any":
		return obj{"$ref": "#/components/schemas/Any"}
	case "google.protobuf.StringValue":
		return obj{"type": "string"}
	case "google.protobuf.BoolValue":
		return obj{"type": "boolean"}
	case "google.protobuf.Int32Value", "google.protobuf.UInt32Value":
		return obj{"type": "integer"}
	case "google.protobuf.Int64Value", "google.protobuf.UInt64Value":
		return obj{"type": "string", "pattern": "^-?[0-9]+$"}
	case "google.protobuf.DoubleValue", "google.protobuf.FloatValue":
		return obj{"type": "number"}
	case "google.protobuf.BytesValue":
		return obj{"type": "string", "format": "byte"}
	}
	return nil
}

// comments is a descriptor's leading (else trailing) comment, one space of
// indentation removed from each line.
func comments(d protoreflect.Descriptor) string {
	loc := d.ParentFile().SourceLocations().ByDescriptor(d)
	c := loc.LeadingComments
	if strings.TrimSpace(c) == "" {
		c = loc.TrailingComments
	}
	lines := strings.Split(strings.TrimRight(c, "\n "), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, " ")
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}
