package broker

// Tiered storage in the broker: namespace offload policies mapped onto the
// managed ledger's OffloadPolicy, the manual trigger and status of the
// admin API, and the offload fields of topic stats. The offloading itself
// is the managed ledger's (ledger/offload.go) over the factory's
// Offloader (package offload).
//
// The namespace fields, as Pulsar stores them:
//
//	offload_threshold             bytes kept on bookies; -1 (or absent): no automatic offload
//	offload_threshold_in_seconds  also offload ledgers closed this long ago; -1: not by age
//	offload_deletion_lag_ms       bookie copy deleted this long after the offload (absent: 4 h)
//	offload_policies              the same as managedLedgerOffloadThresholdInBytes,
//	                              managedLedgerOffloadThresholdInSeconds,
//	                              managedLedgerOffloadDeletionLagInMillis, plus where copies go:
//	                              s3ManagedLedgerOffloadBucket, ...Region, ...ServiceEndpoint,
//	                              and managedLedgerOffloadedReadPriority (bookkeeper-first,
//	                              tiered-storage-first)
//
// The three single fields win over the same values in offload_policies.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/ledger"
)

// offloadPoliciesJSON is the part of Pulsar's OffloadPolicies the broker
// applies.
type offloadPoliciesJSON struct {
	Driver           string `json:"managedLedgerOffloadDriver"`
	ThresholdBytes   *int64 `json:"managedLedgerOffloadThresholdInBytes"`
	ThresholdSeconds *int64 `json:"managedLedgerOffloadThresholdInSeconds"`
	DeletionLagMs    *int64 `json:"managedLedgerOffloadDeletionLagInMillis"`
	Bucket           string `json:"s3ManagedLedgerOffloadBucket"`
	Region           string `json:"s3ManagedLedgerOffloadRegion"`
	Endpoint         string `json:"s3ManagedLedgerOffloadServiceEndpoint"`
	ReadPriority     string `json:"managedLedgerOffloadedReadPriority"`
}

// offloadPolicy returns the namespace's offload settings as the managed
// ledger's, and whether the namespace sets any.
func offloadPolicy(p Policies) (ledger.OffloadPolicy, bool) {
	var op ledger.OffloadPolicy
	set := false
	var threshold, seconds, lag *int64
	if raw, ok := p.Other["offload_policies"]; ok {
		var pj offloadPoliciesJSON
		if json.Unmarshal(raw, &pj) == nil {
			threshold, seconds, lag = pj.ThresholdBytes, pj.ThresholdSeconds, pj.DeletionLagMs
			op.Target = ledger.OffloadTarget{Bucket: pj.Bucket, Region: pj.Region, Endpoint: pj.Endpoint}
			rp := strings.ReplaceAll(strings.ToLower(pj.ReadPriority), "_", "-")
			op.TieredFirst = rp == "tiered-storage-first"
			set = true
		}
	}
	field := func(name string, dst **int64) {
		raw, ok := p.Other[name]
		if !ok {
			return
		}
		var v *int64
		if json.Unmarshal(raw, &v) == nil && v != nil {
			*dst = v
		}
	}
	field("offload_threshold", &threshold)
	field("offload_threshold_in_seconds", &seconds)
	field("offload_deletion_lag_ms", &lag)
	if threshold != nil && *threshold >= 0 {
		op.Enabled, op.Threshold, set = true, *threshold, true
	}
	if seconds != nil && *seconds >= 0 {
		op.Enabled, set = true, true
		op.ThresholdAge = time.Duration(*seconds) * time.Second
		if threshold == nil || *threshold < 0 {
			op.Threshold = 1 << 62 // by age only
		}
	}
	if lag != nil {
		set = true
		op.DeletionLag = time.Duration(*lag) * time.Millisecond
		if *lag <= 0 {
			op.DeletionLag = -1 // at once
		}
	}
	return op, set
}

// OffloadTopic starts offloading the closed ledgers of t before the one
// holding upTo (Pulsar's PUT .../offload). ErrConflict while one runs,
// ErrPrecondition without tiered storage.
func (s *Service) OffloadTopic(ctx context.Context, t TopicName, upTo ledger.Position) error {
	tp, err := s.persistentTopic(ctx, t)
	if err != nil {
		return err
	}
	err = tp.ml.OffloadPrefix(upTo)
	switch {
	case errors.Is(err, ledger.ErrOffloadBusy):
		return fmt.Errorf("%w: Offload already running", ErrConflict)
	case errors.Is(err, ledger.ErrNoOffloader):
		return fmt.Errorf("%w: tiered storage is not configured on this broker", ErrPrecondition)
	}
	return err
}

// TopicOffloadStatus returns the state of t's offload (Pulsar's GET
// .../offload).
func (s *Service) TopicOffloadStatus(ctx context.Context, t TopicName) (ledger.OffloadStatus, error) {
	tp, err := s.persistentTopic(ctx, t)
	if err != nil {
		return ledger.OffloadStatus{}, err
	}
	return tp.ml.OffloadStatus(), nil
}

// fillOffloadStats sets the offload fields of a topic's stats.
func fillOffloadStats(st *TopicStats, ml *ledger.ManagedLedger) {
	st.OffloadedStorageSize = ml.OffloadedSize()
	os := ml.OffloadStatus()
	st.LastOffloadLedgerID = os.LastLedger
	st.LastOffloadSuccessTimeStamp = os.LastSuccess
	st.LastOffloadFailureTimeStamp = os.LastFailure
}
