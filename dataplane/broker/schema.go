package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/url"

	pb "github.com/magnetar-dev/magnetar/api/pulsarwire"
	"github.com/magnetar-dev/magnetar/dataplane/auth"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
	"google.golang.org/protobuf/proto"
)

// schemasPath holds each topic's schema history:
// /schemas/<tenant>/<ns>/<escaped local name of the base topic> -> JSON list.
// Partitions share their base topic's schemas. A version is the index in the
// list, sent on the wire as 8 bytes big-endian (Pulsar's long versions).
const schemasPath = "/schemas"

// SchemaEntry is one stored schema version.
type SchemaEntry struct {
	Type       int32             `json:"type"`
	Name       string            `json:"name"`
	Data       []byte            `json:"data"`
	Properties map[string]string `json:"properties,omitempty"`
	Deleted    bool              `json:"deleted,omitempty"`
	Timestamp  int64             `json:"timestamp,omitempty"` // creation, Unix milliseconds
}

type schemaRegistry struct{ md metadata.Store }

func schemaKey(t TopicName) string {
	b := t.Base()
	return schemasPath + "/" + b.Tenant + "/" + b.Namespace + "/" + url.PathEscape(b.Local)
}

func encodeVersion(v int64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(v))
	return b
}

func decodeVersion(b []byte) (int64, bool) {
	if len(b) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(b)), true
}

func (r schemaRegistry) load(ctx context.Context, t TopicName) ([]SchemaEntry, metadata.Version, error) {
	kv, err := r.md.Get(ctx, schemaKey(t))
	if errors.Is(err, metadata.ErrNotFound) {
		return nil, metadata.NotExists, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var list []SchemaEntry
	if err := json.Unmarshal(kv.Value, &list); err != nil {
		return nil, 0, err
	}
	return list, kv.Version, nil
}

// addSchema returns the version of sc, registering it as a new version when
// it differs from every stored one. Schemas of type None (bytes) are not
// stored: they impose nothing.
func (r schemaRegistry) addSchema(ctx context.Context, t TopicName, sc *pb.Schema) ([]byte, error) {
	if sc.GetType() == pb.Schema_None || int32(sc.GetType()) < 0 {
		return nil, nil
	}
	for {
		list, ver, err := r.load(ctx, t)
		if err != nil {
			return nil, err
		}
		for i := len(list) - 1; i >= 0; i-- {
			e := list[i]
			if !e.Deleted && e.Type == int32(sc.GetType()) && bytes.Equal(e.Data, sc.GetSchemaData()) {
				return encodeVersion(int64(i)), nil
			}
		}
		cand := SchemaEntry{Type: int32(sc.GetType()), Name: sc.GetName(), Data: sc.GetSchemaData(), Properties: kvMap(sc.GetProperties())}
		// Only a new version needs the strategy (a namespace read).
		strategy := ""
		if p, _, err := NewResources(r.md).GetNamespace(ctx, t.Tenant, t.Namespace); err == nil {
			strategy = p.SchemaCompatibilityStrategy
		}
		if err := checkSchemaCompat(strategy, list, cand); err != nil {
			return nil, err
		}
		list = append(list, withTimestamp(cand))
		b, err := json.Marshal(list)
		if err != nil {
			return nil, err
		}
		if _, err := r.md.Put(ctx, schemaKey(t), b, ver); err == nil {
			return encodeVersion(int64(len(list) - 1)), nil
		} else if !errors.Is(err, metadata.ErrBadVersion) && !errors.Is(err, metadata.ErrExists) {
			return nil, err
		}
	}
}

// getSchema returns a version (nil: the latest) of a topic's schema.
func (r schemaRegistry) getSchema(ctx context.Context, t TopicName, version []byte) (*SchemaEntry, int64, error) {
	list, _, err := r.load(ctx, t)
	if err != nil {
		return nil, 0, err
	}
	if version == nil {
		for i := len(list) - 1; i >= 0; i-- {
			if !list[i].Deleted {
				return &list[i], int64(i), nil
			}
		}
		return nil, 0, ErrNotFound
	}
	v, ok := decodeVersion(version)
	if !ok || v < 0 || v >= int64(len(list)) || list[v].Deleted {
		return nil, 0, ErrNotFound
	}
	return &list[v], v, nil
}

func (c *conn) handleGetSchema(g *pb.CommandGetSchema) {
	reqID := g.GetRequestId()
	resp := &pb.CommandGetSchemaResponse{RequestId: proto.Uint64(reqID)}
	tn, err := ParseTopicName(g.GetTopic())
	if err == nil {
		ctx, cancel := c.ctx()
		defer cancel()
		// Reading a schema needs what a lookup needs (produce or consume).
		if aerr := c.authorize(ctx, auth.ActionLookup, tn, ""); aerr != nil {
			code, msg := protocol.ServerErrorOf(aerr)
			resp.ErrorCode, resp.ErrorMessage = code.Enum(), proto.String(msg)
			c.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_SCHEMA_RESPONSE.Enum(), GetSchemaResponse: resp})
			return
		}
		var e *SchemaEntry
		var v int64
		e, v, err = c.s.schemas.getSchema(ctx, tn, g.GetSchemaVersion())
		if err == nil {
			resp.Schema = &pb.Schema{Name: proto.String(e.Name), SchemaData: e.Data, Type: pb.Schema_Type(e.Type).Enum()}
			for k, val := range e.Properties {
				resp.Schema.Properties = append(resp.Schema.Properties, &pb.KeyValue{Key: proto.String(k), Value: proto.String(val)})
			}
			resp.SchemaVersion = encodeVersion(v)
		}
	}
	if err != nil {
		resp.ErrorCode = pb.ServerError_TopicNotFound.Enum()
		resp.ErrorMessage = proto.String("schema not found")
	}
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_SCHEMA_RESPONSE.Enum(), GetSchemaResponse: resp})
}

func (c *conn) handleGetOrCreateSchema(g *pb.CommandGetOrCreateSchema) {
	reqID := g.GetRequestId()
	resp := &pb.CommandGetOrCreateSchemaResponse{RequestId: proto.Uint64(reqID)}
	tn, err := ParseTopicName(g.GetTopic())
	if err == nil {
		ctx, cancel := c.ctx()
		defer cancel()
		// Registering a schema is part of producing.
		if err = c.authorize(ctx, auth.ActionProduce, tn, ""); err == nil {
			resp.SchemaVersion, err = c.s.schemas.addSchema(ctx, tn, g.GetSchema())
		}
	}
	if err != nil {
		code, msg := protocol.ServerErrorOf(err)
		resp.ErrorCode, resp.ErrorMessage = code.Enum(), proto.String(msg)
	}
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_OR_CREATE_SCHEMA_RESPONSE.Enum(), GetOrCreateSchemaResponse: resp})
}
