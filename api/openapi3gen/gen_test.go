package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

const (
	root      = "../.."
	cpDir     = root + "/api/controlplane/v1"
	docFile   = cpDir + "/controlplane.openapi3.json"
	rulesFile = cpDir + "/gateway.yaml"
	infoFile  = cpDir + "/openapi.yaml"
)

// The checked-in document is what the generator makes of the current
// .proto files and gateway.yaml. With protoc on PATH the comparison is
// byte for byte (descriptions from the comments included); without it the
// descriptors compiled into the Go package stand in, and the document is
// compared without descriptions (the compiled descriptors carry no
// comments). MAGNETAR_REQUIRE_PROTOC=1 makes a missing protoc a failure.
func TestDocumentIsCurrent(t *testing.T) {
	want, err := os.ReadFile(docFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("protoc"); err == nil {
		set := filepath.Join(t.TempDir(), "set.pb")
		// Relative to the module root, as generate.sh names them.
		protos, _ := filepath.Glob(filepath.Join(cpDir, "*.proto"))
		for i, p := range protos {
			protos[i], _ = filepath.Rel(root, p)
		}
		cmd := exec.Command("protoc", append([]string{"-I", ".", "--include_imports", "--include_source_info", "--descriptor_set_out=" + set}, protos...)...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("protoc: %v\n%s", err, out)
		}
		got, err := generateFiles(set, rulesFile, infoFile)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s is stale: run api/generate.sh (make generate)", docFile)
		}
		return
	}
	if os.Getenv("MAGNETAR_REQUIRE_PROTOC") == "1" {
		t.Fatal("protoc not on PATH and MAGNETAR_REQUIRE_PROTOC=1")
	}
	t.Log("protoc not on PATH: comparing with the compiled descriptors, descriptions left out")
	rb, _ := os.ReadFile(rulesFile)
	rules, err := parseHTTPRules(rb)
	if err != nil {
		t.Fatal(err)
	}
	ib, _ := os.ReadFile(infoFile)
	info, err := parseInfo(ib)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Generate(compiledSet(), rules, info)
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(withoutComments(g), withoutComments(w)) {
		t.Fatalf("%s is stale: run api/generate.sh (make generate)", docFile)
	}
}

// compiledSet is every control-plane file compiled into the Go package and
// their imports, as a descriptor set.
func compiledSet() *descriptorpb.FileDescriptorSet {
	set := new(descriptorpb.FileDescriptorSet)
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		imports := fd.Imports()
		for i := 0; i < imports.Len(); i++ {
			add(imports.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
	}
	for _, fd := range []protoreflect.FileDescriptor{
		cpv1.File_api_controlplane_v1_billing_proto, cpv1.File_api_controlplane_v1_clusters_proto,
		cpv1.File_api_controlplane_v1_iam_proto, cpv1.File_api_controlplane_v1_pulsar_proto,
		cpv1.File_api_controlplane_v1_replication_proto, cpv1.File_api_controlplane_v1_resources_proto,
	} {
		add(fd)
	}
	return set
}

// withoutComments drops what comes from comments: string "description"
// values, readOnly (set from "Output only" in a comment) and the allOf that
// wraps a reference only to carry them.
func withoutComments(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			if _, isString := e.(string); (k == "description" && isString) || k == "readOnly" {
				continue
			}
			out[k] = withoutComments(e)
		}
		if all, ok := out["allOf"].([]any); ok && len(out) == 1 && len(all) == 1 {
			return all[0]
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = withoutComments(e)
		}
		return out
	}
	return v
}

func TestParseTemplate(t *testing.T) {
	for _, c := range []struct {
		in, path string
		params   []pathParam
	}{
		{"/v1/organizations", "/v1/organizations", nil},
		{"/v1/{name=organizations/*}", "/v1/organizations/{organization}",
			[]pathParam{{"organization", "name", "organizations/{organization}"}}},
		{"/v1/{cluster.name=organizations/*/clusters/*}", "/v1/organizations/{organization}/clusters/{cluster}",
			[]pathParam{{"organization", "cluster.name", "organizations/{organization}/clusters/{cluster}"}, {"cluster", "cluster.name", "organizations/{organization}/clusters/{cluster}"}}},
		{"/v1/{parent=organizations/*}/replicationGroups:evacuate", "/v1/organizations/{organization}/replicationGroups:evacuate",
			[]pathParam{{"organization", "parent", "organizations/{organization}"}}},
		{"/v1/{name=organizations/*/serviceAccounts/*/apiKeys/*}:revoke", "/v1/organizations/{organization}/serviceAccounts/{serviceAccount}/apiKeys/{apiKey}:revoke",
			[]pathParam{{"organization", "name", "organizations/{organization}/serviceAccounts/{serviceAccount}/apiKeys/{apiKey}"}, {"serviceAccount", "name", "organizations/{organization}/serviceAccounts/{serviceAccount}/apiKeys/{apiKey}"}, {"apiKey", "name", "organizations/{organization}/serviceAccounts/{serviceAccount}/apiKeys/{apiKey}"}}},
		{"/v1/things/{thing}", "/v1/things/{thing}", []pathParam{{"thing", "thing", "{thing}"}}},
		{"/v1/{name=policies/*}", "/v1/policies/{policy}", []pathParam{{"policy", "name", "policies/{policy}"}}},
	} {
		got, err := parseTemplate(c.in)
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if got.path != c.path || !reflect.DeepEqual(got.params, c.params) {
			t.Errorf("%s: got %s %v, want %s %v", c.in, got.path, got.params, c.path, c.params)
		}
	}
	for _, bad := range []string{"/v1/{name=a/*/a/*}", "/v1/{name=a/**}", "/v1/{name=a/*"} {
		if _, err := parseTemplate(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
