package broker

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/ledger"
)

func TestOffloadPolicyFromNamespace(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fields map[string]string
		want   ledger.OffloadPolicy
		set    bool
	}{
		{name: "none", fields: nil},
		{name: "threshold -1 is off", fields: map[string]string{"offload_threshold": "-1"}},
		{name: "threshold", fields: map[string]string{"offload_threshold": "1048576"},
			want: ledger.OffloadPolicy{Enabled: true, Threshold: 1 << 20}, set: true},
		{name: "threshold 0 and lag 0", fields: map[string]string{"offload_threshold": "0", "offload_deletion_lag_ms": "0"},
			want: ledger.OffloadPolicy{Enabled: true, DeletionLag: -1}, set: true},
		{name: "by age only", fields: map[string]string{"offload_threshold_in_seconds": "60"},
			want: ledger.OffloadPolicy{Enabled: true, Threshold: 1 << 62, ThresholdAge: time.Minute}, set: true},
		{name: "offload_policies with target", fields: map[string]string{"offload_policies": `{"managedLedgerOffloadDriver":"aws-s3",
			"managedLedgerOffloadThresholdInBytes":10,"managedLedgerOffloadDeletionLagInMillis":5000,
			"s3ManagedLedgerOffloadBucket":"b","s3ManagedLedgerOffloadRegion":"eu-west-1","s3ManagedLedgerOffloadServiceEndpoint":"http://s3",
			"managedLedgerOffloadedReadPriority":"TIERED_STORAGE_FIRST"}`},
			want: ledger.OffloadPolicy{Enabled: true, Threshold: 10, DeletionLag: 5 * time.Second, TieredFirst: true,
				Target: ledger.OffloadTarget{Bucket: "b", Region: "eu-west-1", Endpoint: "http://s3"}}, set: true},
		{name: "single field wins", fields: map[string]string{"offload_policies": `{"managedLedgerOffloadThresholdInBytes":10}`,
			"offload_threshold": "20"}, want: ledger.OffloadPolicy{Enabled: true, Threshold: 20}, set: true},
		{name: "garbage ignored", fields: map[string]string{"offload_threshold": `"x"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Policies{Other: map[string]json.RawMessage{}}
			for k, v := range tc.fields {
				p.Other[k] = json.RawMessage(v)
			}
			got, set := offloadPolicy(p)
			if got != tc.want || set != tc.set {
				t.Fatalf("got %+v %v, want %+v %v", got, set, tc.want, tc.set)
			}
		})
	}
}
