package schemacompat

import (
	"encoding/json"
	"errors"
	"testing"

	pb "github.com/magnetar-dev/magnetar/api/pulsarwire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

// protoNativeFiles describes two files: hi.proto defines demo.Hi, and
// hello.proto imports it and defines demo.Hello (with a field of type
// demo.Hi, a nested demo.Hello.Inner) and demo.Other.
func protoNativeFiles() (hi, hello *descriptorpb.FileDescriptorProto) {
	field := func(name string, n int32, typ descriptorpb.FieldDescriptorProto_Type, typeName string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{
			Name: proto.String(name), Number: proto.Int32(n), Type: typ.Enum(),
			Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), JsonName: proto.String(name),
		}
		if typeName != "" {
			f.TypeName = proto.String(typeName)
		}
		return f
	}
	hi = &descriptorpb.FileDescriptorProto{
		Name: proto.String("hi.proto"), Package: proto.String("demo"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name:  proto.String("Hi"),
			Field: []*descriptorpb.FieldDescriptorProto{field("id", 1, descriptorpb.FieldDescriptorProto_TYPE_INT32, "")},
		}},
	}
	hello = &descriptorpb.FileDescriptorProto{
		Name: proto.String("hello.proto"), Package: proto.String("demo"), Syntax: proto.String("proto3"),
		Dependency: []string{"hi.proto"},
		MessageType: []*descriptorpb.DescriptorProto{
			{
				Name: proto.String("Hello"),
				Field: []*descriptorpb.FieldDescriptorProto{
					field("num", 1, descriptorpb.FieldDescriptorProto_TYPE_INT32, ""),
					field("hi", 2, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, ".demo.Hi"),
				},
				NestedType: []*descriptorpb.DescriptorProto{{Name: proto.String("Inner")}},
			},
			{Name: proto.String("Other")},
		},
	}
	return hi, hello
}

// protoNative is a PROTOBUF_NATIVE version holding files in the given
// order, as the Go and Java clients write it.
func protoNative(t *testing.T, root, rootFile string, files ...*descriptorpb.FileDescriptorProto) Version {
	t.Helper()
	set, err := proto.Marshal(&descriptorpb.FileDescriptorSet{File: files})
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(protoNativeDef{FileDescriptorSet: set, RootMessageTypeName: root, RootFileDescriptorName: rootFile})
	if err != nil {
		t.Fatal(err)
	}
	return Version{Type: int32(pb.Schema_ProtobufNative), Data: data}
}

// TestProtoNativeCompatibility: PROTOBUF_NATIVE versions are compared by
// their root message, not by their bytes. The Go client lists the
// descriptor set's files in map order, so a producer and a consumer of one
// message in one process can send definitions that differ only in order.
func TestProtoNativeCompatibility(t *testing.T) {
	hi, hello := protoNativeFiles()
	v1 := protoNative(t, "demo.Hello", "hello.proto", hi, hello)
	reordered := protoNative(t, "demo.Hello", "hello.proto", hello, hi)
	other := protoNative(t, "demo.Other", "hello.proto", hello, hi)
	nested := protoNative(t, "demo.Hello.Inner", "hello.proto", hello, hi)
	missingRoot := protoNative(t, "demo.Nope", "hello.proto", hello, hi)
	wrongFile := protoNative(t, "demo.Hello", "hi.proto", hello, hi)
	missingImport := protoNative(t, "demo.Hello", "hello.proto", hello)
	notJSON := Version{Type: int32(pb.Schema_ProtobufNative), Data: []byte("message Hello {}")}
	tests := []struct {
		name     string
		strategy string
		existing []Version
		cand     Version
		ok       bool
	}{
		{"files reordered, full", "FULL", []Version{v1}, reordered, true},
		{"files reordered, default", "", []Version{v1}, reordered, true},
		{"files reordered, backward transitive", "BACKWARD_TRANSITIVE", []Version{reordered, v1}, reordered, true},
		{"root message changed", "FULL", []Version{v1}, other, false},
		{"root message changed, forward", "FORWARD", []Version{v1}, other, false},
		{"root message changed, always compatible", "ALWAYS_COMPATIBLE", []Version{v1}, other, true},
		{"nested root, same", "FULL", []Version{nested}, protoNative(t, "demo.Hello.Inner", "hello.proto", hi, hello), true},
		{"nested root replaces its parent", "FULL", []Version{v1}, nested, false},
		{"root message not defined", "FULL", []Version{v1}, missingRoot, false},
		{"root message in another file", "FULL", []Version{v1}, wrongFile, false},
		{"import missing", "FULL", []Version{v1}, missingImport, false},
		{"not a definition", "FULL", []Version{v1}, notJSON, false},
		{"type change", "FULL", []Version{v1}, avro(`{"name":"a","type":"int"}`), false},
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
