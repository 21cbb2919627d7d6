package broker

import (
	"errors"
	"strings"
	"testing"

	pb "github.com/magnetar-dev/magnetar/api/pulsarwire"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
)

// TestSchemaCompatError: a refusal of package schemacompat reaches clients
// as IncompatibleSchema with its reason; the cases are schemacompat's.
func TestSchemaCompatError(t *testing.T) {
	v1 := SchemaEntry{Type: int32(pb.Schema_Avro), Data: []byte(`{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}`)}
	v2 := SchemaEntry{Type: int32(pb.Schema_Avro), Data: []byte(`{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"b","type":"string"}]}`)}
	err := checkSchemaCompat("BACKWARD", []SchemaEntry{v1}, v2)
	if !errors.Is(err, protocol.ErrIncompatibleSchema) || !strings.Contains(err.Error(), "incompatible with schema version (BACKWARD)") ||
		strings.Contains(err.Error(), "schemacompat:") {
		t.Fatalf("err = %v", err)
	}
	if err := checkSchemaCompat("FORWARD", []SchemaEntry{v1}, v2); err != nil {
		t.Fatalf("forward: %v", err)
	}
}
