package schemacompat

import (
	"errors"
	"testing"

	pb "github.com/magnetar-dev/magnetar/api/pulsarwire"
)

func avro(fields string) Version {
	return Version{Type: int32(pb.Schema_Avro), Data: []byte(`{"type":"record","name":"R","fields":[` + fields + `]}`)}
}

func TestSchemaCompatibility(t *testing.T) {
	v1 := avro(`{"name":"a","type":"int"}`)
	addOptional := avro(`{"name":"a","type":"int"},{"name":"b","type":["null","string"],"default":null}`)
	addRequired := avro(`{"name":"a","type":"int"},{"name":"b","type":"string"}`)
	widen := avro(`{"name":"a","type":"long"}`)
	dropA := avro(`{"name":"c","type":"int","default":0}`)
	str := Version{Type: int32(pb.Schema_String)}
	strPython := Version{Type: int32(pb.Schema_String), Data: []byte("null")}
	jsonA := Version{Type: int32(pb.Schema_Json), Data: []byte(`{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}`)}
	jsonB := Version{Type: int32(pb.Schema_Json), Data: []byte("not a record")}
	tests := []struct {
		name     string
		strategy string
		existing []Version
		cand     Version
		ok       bool
	}{
		{"first version", "FULL", nil, v1, true},
		{"optional field, full", "", []Version{v1}, addOptional, true},
		{"required field, backward", "BACKWARD", []Version{v1}, addRequired, false},
		{"required field, forward", "FORWARD", []Version{v1}, addRequired, true},
		{"required field, full", "FULL", []Version{v1}, addRequired, false},
		{"int to long, backward", "BACKWARD", []Version{v1}, widen, true},
		{"int to long, forward", "FORWARD", []Version{v1}, widen, false},
		{"always compatible", "ALWAYS_COMPATIBLE", []Version{v1}, addRequired, true},
		{"always incompatible", "ALWAYS_INCOMPATIBLE", []Version{v1}, addOptional, false},
		{"type change", "FULL", []Version{v1}, str, false},
		// Java writes STRING with an empty definition, Python and C++ "null".
		{"string, other definition", "FULL", []Version{str}, strPython, true},
		{"string, always incompatible", "ALWAYS_INCOMPATIBLE", []Version{str}, strPython, false},
		{"json, unreadable definition", "FULL", []Version{jsonA}, jsonB, false},
		// dropA drops a (no default in v1): not FORWARD-readable by v1.
		{"last only", "FORWARD", []Version{dropA, addOptional}, addOptional, true},
		{"transitive sees older", "BACKWARD_TRANSITIVE", []Version{v1, dropA}, dropA, true},
		{"forward transitive", "FORWARD_TRANSITIVE", []Version{v1, addOptional}, dropA, false},
	}
	for _, tt := range tests {
		err := Check(tt.strategy, tt.existing, tt.cand)
		if (err == nil) != tt.ok {
			t.Errorf("%s: err = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrIncompatible) {
			t.Errorf("%s: error %v is not ErrIncompatible", tt.name, err)
		}
	}
}
