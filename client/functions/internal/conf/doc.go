// Package conf reads the configuration a functions worker hands a Go
// function instance: the JSON of Pulsar's GoInstanceConfig on
// -instance-conf, or the same keys as YAML in the file -instance-conf-path
// names, and resolves it into what the instance runs (Instance).
//
// The worker describes the function twice: flat fields (tenant, nameSpace,
// sourceInputSpecs, sinkSpecsTopic, ...; the only ones Pulsar's own Go
// instance reads) and functionDetails, the whole FunctionDetails as proto3
// JSON. Resolve starts from functionDetails and lets every flat field that is
// set replace the value it names, so either description alone works.
//
// It also interprets the authentication fields: a bearer token in any form
// Pulsar's AuthenticationToken accepts (TokenSource), the Pulsar client
// authentication (PulsarAuth) and the TLS trust for https URLs.
//
// Callers: package pf, once at start. Everything here is pure apart from
// reading the files the configuration names; an Instance is immutable and
// safe to share.
package conf
