package main

import (
	"flag"
	"fmt"
	"os"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

func main() {
	descriptors := flag.String("descriptors", "", "FileDescriptorSet written by protoc --include_imports --include_source_info --descriptor_set_out")
	rules := flag.String("http", "", "google.api.Service YAML with the HTTP rules (gateway.yaml)")
	info := flag.String("info", "", "protoc-gen-openapiv2 openapi_configuration YAML whose info the document takes (openapi.yaml)")
	out := flag.String("out", "", "document to write")
	flag.Parse()
	if *descriptors == "" || *rules == "" || *info == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "openapi3gen: -descriptors, -http, -info and -out are required")
		os.Exit(2)
	}
	if err := run(*descriptors, *rules, *info, *out); err != nil {
		fmt.Fprintln(os.Stderr, "openapi3gen:", err)
		os.Exit(1)
	}
}

func run(descriptors, rulesFile, infoFile, out string) error {
	doc, err := generateFiles(descriptors, rulesFile, infoFile)
	if err != nil {
		return err
	}
	return os.WriteFile(out, doc, 0o644)
}

// generateFiles is Generate on the contents of the three input files.
func generateFiles(descriptors, rulesFile, infoFile string) ([]byte, error) {
	b, err := os.ReadFile(descriptors)
	if err != nil {
		return nil, err
	}
	set := new(descriptorpb.FileDescriptorSet)
	if err := proto.Unmarshal(b, set); err != nil {
		return nil, fmt.Errorf("%s: %w", descriptors, err)
	}
	rb, err := os.ReadFile(rulesFile)
	if err != nil {
		return nil, err
	}
	rules, err := parseHTTPRules(rb)
	if err != nil {
		return nil, err
	}
	ib, err := os.ReadFile(infoFile)
	if err != nil {
		return nil, err
	}
	info, err := parseInfo(ib)
	if err != nil {
		return nil, err
	}
	return Generate(set, rules, info)
}
