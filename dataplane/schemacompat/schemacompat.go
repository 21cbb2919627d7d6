package schemacompat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	pb "github.com/magnetar-dev/magnetar/api/pulsarwire"
)

// ErrIncompatible is wrapped by every refusal of Check.
var ErrIncompatible = errors.New("schemacompat: incompatible schema")

// Version is a schema version as the check sees it.
type Version struct {
	// Type is the Pulsar schema type (api/pulsarwire Schema_Type).
	Type int32
	// Data is the schema definition (Avro's JSON form for record schemas).
	Data []byte
	// Deleted versions are not checked against.
	Deleted bool
}

// Check returns an error wrapping ErrIncompatible when candidate may not be
// added after the existing versions under strategy; its message says why.
func Check(strategy string, existing []Version, candidate Version) error {
	var live []Version
	for _, e := range existing {
		if !e.Deleted {
			live = append(live, e)
		}
	}
	if len(live) == 0 {
		return nil
	}
	strategy = strings.ToUpper(strategy)
	switch strategy {
	case "ALWAYS_COMPATIBLE":
		return nil
	case "ALWAYS_INCOMPATIBLE":
		return fmt.Errorf("%w: the topic's schema compatibility strategy is ALWAYS_INCOMPATIBLE", ErrIncompatible)
	case "", "UNDEFINED":
		strategy = "FULL"
	}
	check := live[len(live)-1:]
	if strings.HasSuffix(strategy, "_TRANSITIVE") {
		check = live
		strategy = strings.TrimSuffix(strategy, "_TRANSITIVE")
	}
	for _, old := range check {
		if err := pairCompat(strategy, old, candidate); err != nil {
			return fmt.Errorf("%w: incompatible with schema version (%s): %v", ErrIncompatible, strategy, err)
		}
	}
	return nil
}

func pairCompat(strategy string, old, cand Version) error {
	if old.Type != cand.Type {
		return fmt.Errorf("type %s cannot replace %s", pb.Schema_Type(cand.Type), pb.Schema_Type(old.Type))
	}
	if !structured(pb.Schema_Type(old.Type)) {
		// A primitive type (STRING, INT64, ...) is compatible with itself,
		// whatever its definition says: clients write it differently (Java
		// an empty one, Python and C++ "null"), as Pulsar accepts.
		return nil
	}
	if pb.Schema_Type(old.Type) == pb.Schema_ProtobufNative {
		return protoNativeCompat(old.Data, cand.Data)
	}
	oldRec, ok1 := parseRecord(old.Data)
	newRec, ok2 := parseRecord(cand.Data)
	if !ok1 || !ok2 {
		if bytes.Equal(old.Data, cand.Data) {
			return nil
		}
		return fmt.Errorf("definitions differ")
	}
	switch strategy {
	case "BACKWARD":
		return canRead(newRec, oldRec)
	case "FORWARD":
		return canRead(oldRec, newRec)
	default: // FULL
		if err := canRead(newRec, oldRec); err != nil {
			return err
		}
		return canRead(oldRec, newRec)
	}
}

// structured reports the types whose definitions are compared: the
// others are checked by type alone (Pulsar's default check for them).
func structured(t pb.Schema_Type) bool {
	switch t {
	case pb.Schema_Avro, pb.Schema_Json, pb.Schema_Protobuf, pb.Schema_ProtobufNative, pb.Schema_KeyValue:
		return true
	}
	return false
}

type recordField struct {
	typ        string
	hasDefault bool
}

// parseRecord reads an Avro record definition into field name -> type.
func parseRecord(data []byte) (map[string]recordField, bool) {
	var rec struct {
		Type   string `json:"type"`
		Fields []struct {
			Name    string          `json:"name"`
			Type    json.RawMessage `json:"type"`
			Default json.RawMessage `json:"default"`
		} `json:"fields"`
	}
	if json.Unmarshal(data, &rec) != nil || rec.Type != "record" {
		return nil, false
	}
	out := make(map[string]recordField, len(rec.Fields))
	for _, f := range rec.Fields {
		out[f.Name] = recordField{typ: avroTypeName(f.Type), hasDefault: f.Default != nil}
	}
	return out, true
}

// avroTypeName renders a field type: a primitive or named type as is, a
// union as "a|b" (sorted), a complex type by its kind and definition.
func avroTypeName(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var union []json.RawMessage
	if json.Unmarshal(raw, &union) == nil {
		names := make([]string, len(union))
		for i, u := range union {
			names[i] = avroTypeName(u)
		}
		slices.Sort(names)
		return strings.Join(names, "|")
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) == nil {
		var kind, name string
		json.Unmarshal(obj["type"], &kind)
		json.Unmarshal(obj["name"], &name)
		if name != "" {
			return kind + ":" + name
		}
		var compact bytes.Buffer
		json.Compact(&compact, raw)
		return compact.String()
	}
	return string(raw)
}

// promotions lists the writer types each reader type accepts besides itself.
var promotions = map[string][]string{
	"long":   {"int"},
	"float":  {"int", "long"},
	"double": {"int", "long", "float"},
	"string": {"bytes"},
	"bytes":  {"string"},
}

func typeReadable(reader, writer string) bool {
	if reader == writer || slices.Contains(promotions[reader], writer) {
		return true
	}
	readers := strings.Split(reader, "|")
	for _, w := range strings.Split(writer, "|") {
		ok := false
		for _, r := range readers {
			if r == w || slices.Contains(promotions[r], w) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// canRead reports whether data written with writer can be read with reader.
func canRead(reader, writer map[string]recordField) error {
	for name, rf := range reader {
		wf, ok := writer[name]
		switch {
		case ok && !typeReadable(rf.typ, wf.typ):
			return fmt.Errorf("field %q: %s cannot read %s", name, rf.typ, wf.typ)
		case !ok && !rf.hasDefault:
			return fmt.Errorf("field %q has no default and is missing from the other schema", name)
		}
	}
	return nil
}
