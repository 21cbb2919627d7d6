package apiserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"google.golang.org/protobuf/proto"
)

// Request ids (AIP-155): a create that carries a request_id is stored with
// a fingerprint of the whole request (method and deterministic wire form),
// so a later call with the same request_id is told apart: the same request
// gets the first call's result, a different one (another resource id or
// another body) is refused with INVALID_ARGUMENT naming request_id.

type fingerprintKey struct{}

// withRequestFingerprint returns ctx carrying the fingerprint of req when
// req has a non-empty request_id field.
func withRequestFingerprint(ctx context.Context, method string, req any) context.Context {
	m, ok := req.(proto.Message)
	if !ok || stringField(m, "request_id") == "" {
		return ctx
	}
	wire, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return ctx
	}
	sum := sha256.New()
	sum.Write([]byte(method))
	sum.Write([]byte{0})
	sum.Write(wire)
	return context.WithValue(ctx, fingerprintKey{}, hex.EncodeToString(sum.Sum(nil)))
}

// requestFingerprint is the fingerprint withRequestFingerprint put in
// ctx, "" when the request had no request_id.
func requestFingerprint(ctx context.Context) string {
	fp, _ := ctx.Value(fingerprintKey{}).(string)
	return fp
}

// checkReplay refuses a replayed request_id whose request differs from the
// one that made rec (named name). Records written before fingerprints, or
// without a request_id, accept any replay.
func checkReplay(ctx context.Context, rec record, name string) error {
	fp := requestFingerprint(ctx)
	if fp == "" || rec.RequestSHA256 == "" || fp == rec.RequestSHA256 {
		return nil
	}
	return reusedRequestID(name)
}

func reusedRequestID(name string) error {
	return invalid("request_id", "already used by a different request (for %s); repeat that request unchanged to get its result, or use a new request_id", name)
}
