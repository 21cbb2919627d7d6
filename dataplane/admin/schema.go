package admin

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	pb "github.com/magnetar-dev/magnetar/api/pulsarwire"
	"github.com/magnetar-dev/magnetar/dataplane/broker"
)

// schemaTypeNames maps wire schema types to Pulsar's REST names.
var schemaTypeNames = map[pb.Schema_Type]string{
	pb.Schema_None: "BYTES", pb.Schema_String: "STRING", pb.Schema_Json: "JSON",
	pb.Schema_Protobuf: "PROTOBUF", pb.Schema_Avro: "AVRO", pb.Schema_Bool: "BOOLEAN",
	pb.Schema_Int8: "INT8", pb.Schema_Int16: "INT16", pb.Schema_Int32: "INT32", pb.Schema_Int64: "INT64",
	pb.Schema_Float: "FLOAT", pb.Schema_Double: "DOUBLE", pb.Schema_Date: "DATE", pb.Schema_Time: "TIME",
	pb.Schema_Timestamp: "TIMESTAMP", pb.Schema_KeyValue: "KEY_VALUE", pb.Schema_Instant: "INSTANT",
	pb.Schema_LocalDate: "LOCAL_DATE", pb.Schema_LocalTime: "LOCAL_TIME",
	pb.Schema_LocalDateTime: "LOCAL_DATE_TIME", pb.Schema_ProtobufNative: "PROTOBUF_NATIVE",
}

func schemaTypeOf(name string) (pb.Schema_Type, bool) {
	name = strings.ToUpper(name)
	if name == "NONE" {
		return pb.Schema_None, true
	}
	for t, n := range schemaTypeNames {
		if n == name {
			return t, true
		}
	}
	return 0, false
}

// getSchemaResponse is Pulsar's GetSchemaResponse.
type getSchemaResponse struct {
	Version    int64             `json:"version"`
	Type       string            `json:"type"`
	Timestamp  int64             `json:"timestamp"`
	Data       string            `json:"data"`
	Properties map[string]string `json:"properties"`
}

func schemaResponse(v broker.SchemaVersion) getSchemaResponse {
	props := v.Properties
	if props == nil {
		props = map[string]string{}
	}
	return getSchemaResponse{Version: v.Version, Type: schemaTypeNames[pb.Schema_Type(v.Type)], Timestamp: v.Timestamp, Data: string(v.Data), Properties: props}
}

// postSchemaPayload is Pulsar's PostSchemaPayload.
type postSchemaPayload struct {
	Type       string            `json:"type"`
	Schema     string            `json:"schema"`
	Properties map[string]string `json:"properties"`
}

func (h *Handler) schemaEntry(q *request, tn broker.TopicName) (broker.SchemaEntry, error) {
	var p postSchemaPayload
	if err := q.mustDecode(&p); err != nil {
		return broker.SchemaEntry{}, err
	}
	typ, ok := schemaTypeOf(p.Type)
	if !ok {
		return broker.SchemaEntry{}, failf(http.StatusBadRequest, "Invalid schema type %q", p.Type)
	}
	if len(p.Properties) == 0 {
		p.Properties = nil
	}
	return broker.SchemaEntry{Type: int32(typ), Name: tn.Local, Data: []byte(p.Schema), Properties: p.Properties}, nil
}

// schemaStrategy returns the compatibility strategy that applies to tn.
func (h *Handler) schemaStrategy(q *request, tn broker.TopicName) string {
	if m, err := h.res.TopicPolicies(q.ctx, tn, false); err == nil {
		var s string
		if json.Unmarshal(m["schemaCompatibilityStrategy"], &s) == nil && s != "" && s != "UNDEFINED" {
			return s
		}
	}
	if p, _, err := h.res.GetNamespace(q.ctx, tn.Tenant, tn.Namespace); err == nil {
		if s := p.SchemaCompatibilityStrategy; s != "" && s != "UNDEFINED" {
			return s
		}
	}
	return "FULL"
}

// schemas serves /admin/v2/schemas/{t}/{ns}/{topic}/...
func (h *Handler) schemas(q *request) error {
	if len(q.seg) < 4 {
		return errNotFound
	}
	tn, err := h.topicName(q, broker.Persistent, q.seg[0], q.seg[1], q.seg[2])
	if err != nil {
		return err
	}
	if err := h.checkNamespace(q, tn.Tenant, tn.Namespace); err != nil {
		return err
	}
	rest := q.seg[3:]
	switch {
	case rest[0] == "schema" && len(rest) <= 2 && q.method() == http.MethodGet:
		var version *int64
		if len(rest) == 2 {
			v, err := strconv.ParseInt(rest[1], 10, 64)
			if err != nil {
				return failf(http.StatusBadRequest, "Invalid schema version %q", rest[1])
			}
			version = &v
		}
		v, err := h.svc.Schema(q.ctx, tn, version)
		if err != nil {
			if errors.Is(err, broker.ErrNotFound) {
				return failf(http.StatusNotFound, "Schema not found")
			}
			return err
		}
		return ok(q, schemaResponse(v))
	case rest[0] == "schemas" && len(rest) == 1 && q.method() == http.MethodGet:
		vs, err := h.svc.Schemas(q.ctx, tn)
		if err != nil {
			return err
		}
		out := []getSchemaResponse{}
		for _, v := range vs {
			out = append(out, schemaResponse(v))
		}
		return ok(q, map[string]any{"getSchemaResponses": out})
	case rest[0] == "schema" && len(rest) == 1 && q.method() == http.MethodPost:
		e, err := h.schemaEntry(q, tn)
		if err != nil {
			return err
		}
		if !h.compatible(q, tn, e) {
			return failf(http.StatusConflict, "Schema is incompatible with the topic's schema")
		}
		v, err := h.svc.PutSchema(q.ctx, tn, e)
		if err != nil {
			return err
		}
		return ok(q, map[string]any{"version": map[string]int64{"version": v}})
	case rest[0] == "schema" && len(rest) == 1 && q.method() == http.MethodDelete:
		v, err := h.svc.DeleteSchema(q.ctx, tn)
		if err != nil {
			return err
		}
		// DeleteSchemaResponse: the version as a number (the reply to a
		// POST wraps it in an object; the Java admin client parses each).
		return ok(q, map[string]int64{"version": max(v, 0)})
	case rest[0] == "compatibility" && len(rest) == 1 && q.method() == http.MethodPost:
		e, err := h.schemaEntry(q, tn)
		if err != nil {
			return err
		}
		return ok(q, map[string]any{"compatibility": h.compatible(q, tn, e), "schemaCompatibilityStrategy": h.schemaStrategy(q, tn)})
	case rest[0] == "version" && len(rest) == 1 && q.method() == http.MethodPost:
		e, err := h.schemaEntry(q, tn)
		if err != nil {
			return err
		}
		v, err := h.svc.SchemaVersionOf(q.ctx, tn, e)
		if err != nil {
			if errors.Is(err, broker.ErrNotFound) {
				return failf(http.StatusNotFound, "Not found schema")
			}
			return err
		}
		return ok(q, map[string]int64{"version": v})
	}
	return errNotFound
}

// compatible checks e against the latest schema under the applicable
// strategy. Only the type and ALWAYS_* strategies are checked; structural
// Avro/JSON compatibility is not evaluated yet.
func (h *Handler) compatible(q *request, tn broker.TopicName, e broker.SchemaEntry) bool {
	latest, err := h.svc.Schema(q.ctx, tn, nil)
	if err != nil {
		return true // no schema yet
	}
	if _, err := h.svc.SchemaVersionOf(q.ctx, tn, e); err == nil {
		return true // already registered
	}
	switch h.schemaStrategy(q, tn) {
	case "ALWAYS_COMPATIBLE":
		return true
	case "ALWAYS_INCOMPATIBLE":
		return false
	}
	return latest.Type == e.Type
}
