package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

// table is text output: a header and aligned rows; empty cells print "-".
type table struct {
	header []string
	rows   [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(t.header, "\t"))
	for _, r := range t.rows {
		cells := make([]string, len(r))
		for i, c := range r {
			if c == "" {
				c = "-"
			}
			cells[i] = c
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

func ts(t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	return t.AsTime().UTC().Format(time.RFC3339)
}

func num[T int32 | int64](v T) string { return strconv.FormatInt(int64(v), 10) }

// enumName prints an enum value without its UNSPECIFIED zero.
func enumName(s fmt.Stringer, v int32) string {
	if v == 0 {
		return ""
	}
	return s.String()
}

func shortAll(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = shortName(n)
	}
	return strings.Join(out, ",")
}

func orgTable(orgs ...*cpv1.Organization) *table {
	t := &table{header: []string{"NAME", "DISPLAY NAME", "ALLOWED REGIONS", "MAX CLUSTERS", "CREATED"}}
	for _, o := range orgs {
		maxc := ""
		if o.GetMaxClusters() != 0 {
			maxc = num(o.GetMaxClusters())
		}
		t.add(shortName(o.GetName()), o.GetDisplayName(), shortAll(o.GetAllowedRegions()), maxc, ts(o.GetCreateTime()))
	}
	return t
}

func regionTable(regions ...*cpv1.Region) *table {
	t := &table{header: []string{"NAME", "DISPLAY NAME", "STATE", "LAST HEARTBEAT", "MESSAGE"}}
	for _, r := range regions {
		st := r.GetStatus()
		t.add(shortName(r.GetName()), r.GetDisplayName(), enumName(st.GetState(), int32(st.GetState())), ts(st.GetLastHeartbeat()), st.GetMessage())
	}
	return t
}

func userTable(users ...*cpv1.User) *table {
	t := &table{header: []string{"NAME", "DISPLAY NAME", "EMAIL", "CREATED"}}
	for _, u := range users {
		t.add(shortName(u.GetName()), u.GetDisplayName(), u.GetEmail(), ts(u.GetCreateTime()))
	}
	return t
}

func auditTable(evs ...*cpv1.AuditEvent) *table {
	t := &table{header: []string{"SEQ", "TIME", "PRINCIPAL", "METHOD", "RESOURCE", "OUTCOME"}}
	for _, e := range evs {
		t.add(num(e.GetSequence()), ts(e.GetTime()), e.GetPrincipal(), e.GetMethod(), shortName(e.GetResource()), e.GetOutcome())
	}
	return t
}

func saTable(sas ...*cpv1.ServiceAccount) *table {
	t := &table{header: []string{"NAME", "DISPLAY NAME", "DESCRIPTION", "CREATED"}}
	for _, a := range sas {
		t.add(shortName(a.GetName()), a.GetDisplayName(), a.GetDescription(), ts(a.GetCreateTime()))
	}
	return t
}

func apiKeyTable(keys ...*cpv1.ApiKey) *table {
	t := &table{header: []string{"NAME", "STATE", "EXPIRES", "CREATED"}}
	for _, k := range keys {
		t.add(shortName(k.GetName()), enumName(k.GetState(), int32(k.GetState())), ts(k.GetExpireTime()), ts(k.GetCreateTime()))
	}
	return t
}

func bindingTable(rbs ...*cpv1.RoleBinding) *table {
	t := &table{header: []string{"NAME", "ROLE", "MEMBER", "RESOURCE"}}
	for _, b := range rbs {
		t.add(shortName(b.GetName()), b.GetRole(), b.GetMember(), b.GetResource())
	}
	return t
}

func clusterTable(cls ...*cpv1.Cluster) *table {
	t := &table{header: []string{"NAME", "REGION", "STATE", "BROKERS", "BOOKIES", "SERVICE URL", "ADMIN URL", "PROTECTED", "MESSAGE"}}
	for _, c := range cls {
		t.add(shortName(c.GetName()), shortName(c.GetRegion()), enumName(c.GetState(), int32(c.GetState())),
			num(c.GetSize().GetBrokers()), num(c.GetSize().GetBookies()), c.GetServiceUrl(), c.GetAdminUrl(),
			strconv.FormatBool(c.GetDeletionProtection()), c.GetStatusMessage())
	}
	return t
}

func operationTable(ops ...*cpv1.Operation) *table {
	t := &table{header: []string{"NAME", "TYPE", "TARGET", "STATE", "ERROR", "CREATED"}}
	for _, o := range ops {
		errText := ""
		if e := o.GetError(); e != nil {
			errText = codeNameInt(e.GetCode()) + ": " + e.GetMessage()
		}
		t.add(shortName(o.GetName()), o.GetType(), shortName(o.GetTarget()), enumName(o.GetState(), int32(o.GetState())), errText, ts(o.GetCreateTime()))
	}
	return t
}

func tenantTable(ts_ ...*cpv1.Tenant) *table {
	t := &table{header: []string{"NAME", "STATE", "ADMIN ROLES", "MESSAGE"}}
	for _, x := range ts_ {
		t.add(shortName(x.GetName()), enumName(x.GetState(), int32(x.GetState())), strings.Join(x.GetAdminRoles(), ","), x.GetStatusMessage())
	}
	return t
}

func namespaceTable(nss ...*cpv1.Namespace) *table {
	t := &table{header: []string{"NAME", "STATE", "RETENTION", "MESSAGE TTL", "MESSAGE"}}
	for _, n := range nss {
		p := n.GetPolicies()
		ret := ""
		if r := p.GetRetention(); r != nil {
			ret = limit(int64(r.GetTimeMinutes()), "m") + "/" + limit(r.GetSizeMb(), "MB")
		}
		ttl := ""
		if p != nil && p.MessageTtlSeconds != nil {
			ttl = (time.Duration(p.GetMessageTtlSeconds()) * time.Second).String()
		}
		t.add(shortName(n.GetName()), enumName(n.GetState(), int32(n.GetState())), ret, ttl, n.GetStatusMessage())
	}
	return t
}

func limit(v int64, unit string) string {
	if v < 0 {
		return "unlimited"
	}
	return strconv.FormatInt(v, 10) + unit
}

func topicTable(tps ...*cpv1.Topic) *table {
	t := &table{header: []string{"NAME", "STATE", "PARTITIONS", "PERSISTENT", "MESSAGE"}}
	for _, x := range tps {
		persistent := x.Persistent == nil || x.GetPersistent()
		t.add(shortName(x.GetName()), enumName(x.GetState(), int32(x.GetState())), num(x.GetPartitions()),
			strconv.FormatBool(persistent), x.GetStatusMessage())
	}
	return t
}
