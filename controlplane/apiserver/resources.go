package apiserver

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/store"
)

// kind describes one resource collection: how its names look, which
// message holds it and which fields an update mask may name.
type kind struct {
	collection string // collection id and store Kind: "clusters"
	field      string // request field name of the resource: "cluster"
	parent     string // parent collection: "organizations", "serviceAccounts", "clusters", ... or "" (top level)
	// ids is the pattern a new resource's id must match; nil means
	// idPattern.
	ids    *regexp.Regexp
	newMsg func() proto.Message
	// updatable lists the field paths an update mask may name.
	updatable []string
	// outputOnly lists fields, beside name, uid, etag and the times, that
	// only the server sets; an update mask naming them is accepted and they
	// are ignored (AIP-203), as grpc-gateway's PATCH derives the mask from
	// every field of the body.
	outputOnly []string
}

var commonOutputOnly = []string{"name", "uid", "etag", "create_time", "update_time"}

var (
	kindOrganization = &kind{collection: "organizations", field: "organization",
		newMsg: func() proto.Message { return &cpv1.Organization{} }, updatable: []string{"display_name", "allowed_regions", "max_clusters", "max_function_instances", "max_function_ram_bytes"}}
	kindUser = &kind{collection: "users", field: "user", parent: "organizations",
		newMsg: func() proto.Message { return &cpv1.User{} }, updatable: []string{"display_name", "email"}}
	kindServiceAccount = &kind{collection: "serviceAccounts", field: "service_account", parent: "organizations",
		newMsg: func() proto.Message { return &cpv1.ServiceAccount{} }, updatable: []string{"display_name", "description"}}
	kindApiKey = &kind{collection: "apiKeys", field: "api_key", parent: "serviceAccounts",
		newMsg: func() proto.Message { return &cpv1.ApiKey{} }}
	kindRoleBinding = &kind{collection: "roleBindings", field: "role_binding", parent: "organizations",
		newMsg: func() proto.Message { return &cpv1.RoleBinding{} }}
	kindRegion = &kind{collection: "regions", field: "region",
		newMsg: func() proto.Message { return &cpv1.Region{} }, updatable: []string{"display_name"}, outputOnly: []string{"status"}}
	kindCluster = &kind{collection: "clusters", field: "cluster", parent: "organizations",
		newMsg:     func() proto.Message { return &cpv1.Cluster{} },
		updatable:  []string{"display_name", "size", "size.brokers", "size.bookies", "deletion_protection"},
		outputOnly: []string{"state", "service_url", "admin_url", "status_message", "operation"}}
	kindOperation = &kind{collection: "operations", field: "operation",
		newMsg: func() proto.Message { return &cpv1.Operation{} }}
	kindTenant = &kind{collection: "tenants", field: "tenant", parent: "clusters", ids: pulsarIDPattern,
		newMsg: func() proto.Message { return &cpv1.Tenant{} }, updatable: []string{"admin_roles"},
		outputOnly: pulsarOutputOnly}
	kindNamespace = &kind{collection: "namespaces", field: "namespace", parent: "tenants", ids: pulsarIDPattern,
		newMsg:     func() proto.Message { return &cpv1.Namespace{} },
		updatable:  append([]string{"policies"}, leafPaths("policies", (&cpv1.NamespacePolicies{}).ProtoReflect().Descriptor())...),
		outputOnly: append([]string{"fenced_to", "replication_group"}, pulsarOutputOnly...)}
	kindTopic = &kind{collection: "topics", field: "topic", parent: "namespaces", ids: pulsarIDPattern,
		newMsg: func() proto.Message { return &cpv1.Topic{} }, updatable: []string{"partitions"},
		outputOnly: append([]string{"persistent"}, pulsarOutputOnly...)}
	// Functions, sources and sinks (svc_functions.go). Their immutable
	// fields are updatable here so a whole resource can be sent back; the
	// update refuses a change of them.
	kindFunction = &kind{collection: "functions", field: "function", parent: "namespaces", ids: pulsarIDPattern,
		newMsg: func() proto.Message { return &cpv1.PulsarFunction{} },
		updatable: append([]string{"runtime", "class_name", "package_url", "inputs", "output", "log_topic", "parallelism",
			"processing_guarantees", "subscription_name", "subscription_position", "user_config", "max_message_retries",
			"dead_letter_topic"}, resourcesPaths...),
		outputOnly: append([]string{"status"}, pulsarOutputOnly...)}
	kindSource = &kind{collection: "sources", field: "source", parent: "namespaces", ids: pulsarIDPattern,
		newMsg: func() proto.Message { return &cpv1.PulsarSource{} },
		updatable: append([]string{"archive", "package_url", "class_name", "topic", "configs", "parallelism",
			"processing_guarantees"}, resourcesPaths...),
		outputOnly: append([]string{"status"}, pulsarOutputOnly...)}
	kindSink = &kind{collection: "sinks", field: "sink", parent: "namespaces", ids: pulsarIDPattern,
		newMsg: func() proto.Message { return &cpv1.PulsarSink{} },
		updatable: append([]string{"archive", "package_url", "class_name", "inputs", "configs", "parallelism",
			"processing_guarantees", "subscription_name", "subscription_position", "max_message_retries",
			"dead_letter_topic"}, resourcesPaths...),
		outputOnly: append([]string{"status"}, pulsarOutputOnly...)}
)

// resourcesPaths are the update-mask paths of a FunctionResources field.
var resourcesPaths = append([]string{"resources"}, leafPaths("resources", (&cpv1.FunctionResources{}).ProtoReflect().Descriptor())...)

// pulsarOutputOnly are the fields of Pulsar resources the region agent's
// reports set.
var pulsarOutputOnly = []string{"state", "status_message"}

// pulsarIDPattern is the local check of Pulsar tenant, namespace and topic
// ids; the policy's naming rule (admission) is applied before it.
var pulsarIDPattern = regexp.MustCompile(`^[A-Za-z0-9_=:.-]{1,255}$`)

// parentKind is the kind of k's parent collection; nil for top level.
func (k *kind) parentKind() *kind {
	switch k.parent {
	case "organizations":
		return kindOrganization
	case "serviceAccounts":
		return kindServiceAccount
	case "clusters":
		return kindCluster
	case "tenants":
		return kindTenant
	case "namespaces":
		return kindNamespace
	case "invoices":
		return kindInvoice
	case "replicationGroups":
		return kindReplicationGroup
	}
	return nil
}

// idRegexp is the pattern new ids of k must match.
func (k *kind) idRegexp() *regexp.Regexp {
	if k.ids != nil {
		return k.ids
	}
	return idPattern
}

// leafPaths lists prefix.f for every field of desc, and the paths below
// message fields ("policies.retention", "policies.retention.time_minutes"),
// the shapes of update mask grpc-gateway derives from a PATCH body.
func leafPaths(prefix string, desc protoreflect.MessageDescriptor) []string {
	var out []string
	fields := desc.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		p := prefix + "." + string(fd.Name())
		out = append(out, p)
		if fd.Message() != nil && !fd.IsList() && !fd.IsMap() {
			out = append(out, leafPaths(p, fd.Message())...)
		}
	}
	return out
}

// operatorsCollection holds operator principals ("operators/bootstrap").
const operatorsCollection = "operators"

// resName is a parsed resource name.
type resName struct {
	name   string // full name
	parent string // parent resource name, "" for top level
	org    string // owning organization, "" for global resources
	id     string // last segment
}

// parseName checks that name is a resource name of k:
// "organizations/a", "organizations/a/clusters/c",
// "organizations/a/serviceAccounts/s/apiKeys/k", "regions/r", ...
func (k *kind) parseName(field, name string) (resName, error) {
	if name == "" {
		return resName{}, invalid(field, "required")
	}
	segs := strings.Split(name, "/")
	want := k.segments()
	if len(segs) != len(want) {
		return resName{}, invalid(field, "%q is not a %s name (%s)", name, k.collection, k.pattern())
	}
	for i, w := range want {
		if segs[i] == "" || (w != "*" && segs[i] != w) {
			return resName{}, invalid(field, "%q is not a %s name (%s)", name, k.collection, k.pattern())
		}
	}
	r := resName{name: name, id: segs[len(segs)-1], parent: strings.Join(segs[:len(segs)-2], "/")}
	if segs[0] == "organizations" {
		r.org = "organizations/" + segs[1]
	}
	return r, nil
}

// segments is the name pattern: ["organizations", "*", "clusters", "*"].
func (k *kind) segments() []string {
	var p []string
	if pk := k.parentKind(); pk != nil {
		p = pk.segments()
	}
	return append(p, k.collection, "*")
}

func (k *kind) pattern() string {
	segs := k.segments()
	for i := 1; i < len(segs); i += 2 {
		segs[i] = "{" + strings.TrimSuffix(segs[i-1], "s") + "}"
	}
	return strings.Join(segs, "/")
}

// parseParent checks a parent name of k's collection and returns it parsed
// as a resource of the parent kind.
func (k *kind) parseParent(field, parent string) (resName, error) {
	if pk := k.parentKind(); pk != nil {
		return pk.parseName(field, parent)
	}
	if parent != "" {
		return resName{}, invalid(field, "must be empty")
	}
	return resName{}, nil
}

// childName is the name of a new resource id under parent.
func (k *kind) childName(parent resName, id string) resName {
	r := resName{parent: parent.name, org: parent.org, id: id}
	if parent.name == "" {
		r.name = k.collection + "/" + id
	} else {
		r.name = parent.name + "/" + k.collection + "/" + id
	}
	if k == kindOrganization {
		r.org = r.name
	}
	return r
}

// record is what the store's Object.Data holds: the resource as protojson
// without the fields the store keeps itself, plus private fields.
type record struct {
	Resource json.RawMessage `json:"resource"`
	// SecretSHA256 is the hex SHA-256 of an API key's secret.
	SecretSHA256 string `json:"secret_sha256,omitempty"`
	// RequestSHA256 fingerprints the create request that made the
	// resource (or operation) when it carried a request_id: a later request
	// with that request_id must be the same request (requestid.go).
	RequestSHA256 string `json:"request_sha256,omitempty"`
}

var (
	marshalOpts   = protojson.MarshalOptions{UseProtoNames: true}
	unmarshalOpts = protojson.UnmarshalOptions{DiscardUnknown: true}
)

// encode makes the store payload of msg. Name, uid, etag and times are not
// stored in the payload (the store has them), nor is an API key's secret.
func encode(msg proto.Message, secretHash string) ([]byte, error) {
	return record{SecretSHA256: secretHash}.encode(msg)
}

// reencode is obj's record with msg in place of its resource.
func reencode(obj store.Object, msg proto.Message) ([]byte, error) {
	var rec record
	if err := json.Unmarshal(obj.Data, &rec); err != nil {
		return nil, fmt.Errorf("apiserver: decode %s %s: %w", obj.Kind, obj.Name, err)
	}
	return rec.encode(msg)
}

// encode stores msg in place of r's resource, keeping r's other fields.
func (r record) encode(msg proto.Message) ([]byte, error) {
	m := proto.Clone(msg)
	clearMeta(m)
	raw, err := marshalOpts.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("apiserver: encode %T: %w", msg, err)
	}
	r.Resource = raw
	return json.Marshal(r)
}

// decode reads obj into a new message of k, with the store's metadata.
func decode(k *kind, obj store.Object) (proto.Message, record, error) {
	var rec record
	if err := json.Unmarshal(obj.Data, &rec); err != nil {
		return nil, rec, fmt.Errorf("apiserver: decode %s %s: %w", obj.Kind, obj.Name, err)
	}
	m := k.newMsg()
	if len(rec.Resource) > 0 {
		if err := unmarshalOpts.Unmarshal(rec.Resource, m); err != nil {
			return nil, rec, fmt.Errorf("apiserver: decode %s %s: %w", obj.Kind, obj.Name, err)
		}
	}
	setMeta(m, obj)
	return m, rec, nil
}

var metaFields = []protoreflect.Name{"name", "uid", "etag", "create_time", "update_time", "secret"}

func clearMeta(m proto.Message) {
	r := m.ProtoReflect()
	for _, n := range metaFields {
		if fd := r.Descriptor().Fields().ByName(n); fd != nil {
			r.Clear(fd)
		}
	}
}

func setMeta(m proto.Message, obj store.Object) {
	r := m.ProtoReflect()
	fields := r.Descriptor().Fields()
	set := func(n protoreflect.Name, v protoreflect.Value) {
		if fd := fields.ByName(n); fd != nil {
			r.Set(fd, v)
		}
	}
	set("name", protoreflect.ValueOfString(obj.Name))
	set("uid", protoreflect.ValueOfString(obj.UID))
	set("etag", protoreflect.ValueOfString(obj.Etag))
	if !obj.CreateTime.IsZero() {
		set("create_time", protoreflect.ValueOfMessage(timestamppb.New(obj.CreateTime).ProtoReflect()))
	}
	if !obj.UpdateTime.IsZero() {
		set("update_time", protoreflect.ValueOfMessage(timestamppb.New(obj.UpdateTime).ProtoReflect()))
	}
}

// stringField reads a top-level string field ("name", "etag") of m.
func stringField(m proto.Message, n protoreflect.Name) string {
	r := m.ProtoReflect()
	if fd := r.Descriptor().Fields().ByName(n); fd != nil {
		return r.Get(fd).String()
	}
	return ""
}

// checkMask validates an update mask against k and returns the paths to
// copy from msg. An empty mask means every updatable field that msg
// populates (AIP-134); "*" means every updatable field.
func (k *kind) checkMask(mask *fieldmaskpb.FieldMask, msg proto.Message) ([]string, error) {
	if len(mask.GetPaths()) == 0 || slices.Contains(mask.GetPaths(), "*") {
		star := len(mask.GetPaths()) > 0
		r := msg.ProtoReflect()
		var all []string
		for _, p := range k.updatable {
			if strings.Contains(p, ".") {
				continue
			}
			if star || r.Has(r.Descriptor().Fields().ByName(protoreflect.Name(p))) {
				all = append(all, p)
			}
		}
		return all, nil
	}
	desc := k.newMsg().ProtoReflect().Descriptor()
	var paths []string
	for _, p := range mask.GetPaths() {
		if !pathExists(desc, p) {
			return nil, invalid("update_mask", "unknown field %q in %s", p, k.field)
		}
		if slices.Contains(commonOutputOnly, p) || slices.Contains(k.outputOnly, p) {
			continue
		}
		if !slices.Contains(k.updatable, p) {
			return nil, invalid("update_mask", "field %q of %s cannot be updated", p, k.field)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

func pathExists(desc protoreflect.MessageDescriptor, path string) bool {
	parts := strings.Split(path, ".")
	for i, p := range parts {
		fd := desc.Fields().ByName(protoreflect.Name(p))
		if fd == nil {
			return false
		}
		if i < len(parts)-1 {
			if fd.Message() == nil || fd.IsList() || fd.IsMap() {
				return false
			}
			desc = fd.Message()
		}
	}
	return true
}

// applyMask copies the fields named by paths from src to dst.
func applyMask(dst, src proto.Message, paths []string) {
	for _, p := range paths {
		copyPath(dst.ProtoReflect(), src.ProtoReflect(), strings.Split(p, "."))
	}
}

func copyPath(dst, src protoreflect.Message, parts []string) {
	fd := dst.Descriptor().Fields().ByName(protoreflect.Name(parts[0]))
	if len(parts) == 1 {
		if src.Has(fd) {
			dst.Set(fd, src.Get(fd))
		} else {
			dst.Clear(fd)
		}
		return
	}
	if !src.Has(fd) {
		if dst.Has(fd) {
			copyPath(dst.Mutable(fd).Message(), dst.NewField(fd).Message(), parts[1:])
		}
		return
	}
	copyPath(dst.Mutable(fd).Message(), src.Get(fd).Message(), parts[1:])
}
