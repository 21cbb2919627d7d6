package schemacompat

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// protoNativeDef is a PROTOBUF_NATIVE schema definition as every Pulsar
// client writes it: a JSON object holding a serialized FileDescriptorSet
// (base64 in JSON) with the root message's file and every file it
// imports, the root message's full name and its file's path.
type protoNativeDef struct {
	FileDescriptorSet      []byte `json:"fileDescriptorSet"`
	RootMessageTypeName    string `json:"rootMessageTypeName"`
	RootFileDescriptorName string `json:"rootFileDescriptorName"`
}

// protoNativeCompat decides PROTOBUF_NATIVE versions as Pulsar does under
// every strategy that compares versions: both definitions must describe a
// root message that their descriptor set defines, and the root message's
// full name may not change. The bytes of two definitions of one message
// may differ (clients list the descriptor set's files in map order).
func protoNativeCompat(old, cand []byte) error {
	oldRoot, err := protoNativeRoot(old)
	if err != nil {
		return fmt.Errorf("existing definition: %v", err)
	}
	candRoot, err := protoNativeRoot(cand)
	if err != nil {
		return fmt.Errorf("new definition: %v", err)
	}
	if oldRoot != candRoot {
		return fmt.Errorf("root message %s cannot replace %s", candRoot, oldRoot)
	}
	return nil
}

// protoNativeRoot returns the full name of the root message of a
// PROTOBUF_NATIVE definition after resolving its descriptor set.
func protoNativeRoot(data []byte) (protoreflect.FullName, error) {
	var def protoNativeDef
	if err := json.Unmarshal(data, &def); err != nil {
		return "", fmt.Errorf("not a PROTOBUF_NATIVE definition: %v", err)
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(def.FileDescriptorSet, &set); err != nil {
		return "", fmt.Errorf("fileDescriptorSet: %v", err)
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		return "", fmt.Errorf("fileDescriptorSet: %v", err)
	}
	file, err := files.FindFileByPath(def.RootFileDescriptorName)
	if err != nil {
		return "", fmt.Errorf("root file %q is not in the descriptor set", def.RootFileDescriptorName)
	}
	name := protoreflect.FullName(def.RootMessageTypeName)
	d, err := files.FindDescriptorByName(name)
	md, ok := d.(protoreflect.MessageDescriptor)
	if err != nil || !ok || md.ParentFile().Path() != file.Path() {
		return "", fmt.Errorf("root message %q is not defined in %q", name, def.RootFileDescriptorName)
	}
	return md.FullName(), nil
}
