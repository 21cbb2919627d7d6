package cli

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

// The report line of an unplanned failover names the report its RPO is
// taken from; a planned one's does not.
func TestWriteRunbookReport(t *testing.T) {
	at := time.Date(2026, 12, 4, 3, 4, 5, 600e6, time.Local)
	op := func(asOf *timestamppb.Timestamp) *cpv1.Operation {
		return &cpv1.Operation{Type: "FailoverReplicationGroup", Target: "organizations/acme/replicationGroups/g",
			Runbook: &cpv1.Runbook{FromCluster: "organizations/acme/clusters/east", ToCluster: "organizations/acme/clusters/west",
				Report: &cpv1.RunbookReport{WritesStoppedTime: timestamppb.New(at), SwitchTime: timestamppb.New(at.Add(time.Second)),
					Rto: durationpb.New(time.Second), RpoMessages: 12, RpoAsOf: asOf, MessagesReplicated: 345}}}
	}
	var b strings.Builder
	writeRunbook(&b, op(timestamppb.New(at.Add(-300*time.Millisecond))))
	if want := "RPO 12 entries as of acme/east's last report (03:04:05.300), drained 0 entries"; !strings.Contains(b.String(), want) {
		t.Errorf("unplanned report:\n%s\nwant %q", b.String(), want)
	}
	b.Reset()
	writeRunbook(&b, op(nil))
	if want := "RPO 12 entries, drained 0 entries after the fence, 345 messages replicated to acme/west during the runbook"; !strings.Contains(b.String(), want) {
		t.Errorf("report without rpo_as_of:\n%s\nwant %q", b.String(), want)
	}
}

// A group's table lists its members in their failover order, whatever the
// order of its status entries.
func TestGroupTableMemberOrder(t *testing.T) {
	const dev, dr = "organizations/acme/clusters/dev", "organizations/acme/clusters/dr"
	rg := &cpv1.ReplicationGroup{Members: []string{dev, dr}, ActiveCluster: dev,
		Status: &cpv1.ReplicationGroupStatus{Members: []*cpv1.MemberStatus{{Cluster: dr, FencedTo: dev}, {Cluster: dev}}}}
	var b strings.Builder
	groupTable(rg).write(&b)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "acme/dev ") || !strings.HasPrefix(lines[2], "acme/dr ") {
		t.Fatalf("group table:\n%s", b.String())
	}
}
