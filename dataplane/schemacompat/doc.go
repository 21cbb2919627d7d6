// Package schemacompat decides whether a new schema version may be added
// to a topic under Pulsar's schema compatibility strategies: a pure
// function of schema definitions, called by the broker when a producer,
// consumer or GET_OR_CREATE_SCHEMA would add a version. Safe for
// concurrent use (it holds no state).
//
// The strategy is the namespace's schema_compatibility_strategy (default
// FULL, Pulsar's default for Avro and JSON):
//
//   - ALWAYS_COMPATIBLE: anything goes; ALWAYS_INCOMPATIBLE: no new version.
//   - BACKWARD: the new schema can read data written with the previous one;
//     FORWARD: the previous can read data written with the new; FULL: both.
//     The _TRANSITIVE forms check every earlier version, not only the last.
//
// Record schemas (AVRO, JSON and PROTOBUF, which Pulsar describes in Avro's
// JSON form) are compared structurally: a reader can read a writer's data
// when every reader field is either in the writer with a compatible type
// (equal, or an Avro promotion int->long->float->double, string<->bytes, or
// a union containing the writer's type) or has a default. PROTOBUF_NATIVE
// definitions (a JSON object holding a FileDescriptorSet and the root
// message's name) are resolved and compared by their root message's full
// name, which may not change, as Pulsar compares them; their bytes may
// differ for one message, since clients list the descriptor set's files in
// map order. KEY_VALUE definitions are compatible only when identical;
// primitive types (STRING, INT64, ...) are compatible with themselves
// whatever their definitions.
package schemacompat
