package cli

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

// nsPolicyHelp is appended to namespace create's and update's help.
const nsPolicyHelp = `

Retention needs both --retention-minutes and --retention-mb (-1 means
unlimited); --message-ttl is a duration such as 1h (0 disables expiry).
--backlog-quota-limit is in bytes (-1: unlimited), with
--backlog-quota-policy producer_request_hold (the default),
producer_exception or consumer_backlog_eviction. --auto-topic-creation is
off, non-partitioned or partitioned (with --auto-topic-partitions N).
--schema-compatibility is one of Pulsar's strategies (backward, full,
always_compatible, ...). --replication-clusters names clusters of the same
organization by id ("dr") or full name.`

// nsPolicyPaths maps the policy names of --unset to their update-mask paths.
var nsPolicyPaths = map[string]string{
	"retention":            "policies.retention",
	"message-ttl":          "policies.message_ttl_seconds",
	"deduplication":        "policies.deduplication_enabled",
	"backlog-quota":        "policies.backlog_quota",
	"auto-topic-creation":  "policies.auto_topic_creation",
	"schema-compatibility": "policies.schema_compatibility_strategy",
	"replication-clusters": "policies.replication_clusters",
}

// nsPolicyFlags are the namespace policy flags shared by create and update.
type nsPolicyFlags struct {
	retMinutes    int32
	retMB         int64
	ttl           time.Duration
	dedup         bool
	backlogLimit  int64
	backlogPolicy string
	autoTopic     string
	autoParts     int32
	schemaCompat  string
	replClusters  []string
}

func (n *nsPolicyFlags) register(f *pflag.FlagSet) {
	f.Int32Var(&n.retMinutes, "retention-minutes", 0, "keep acknowledged messages this many minutes (-1: unlimited)")
	f.Int64Var(&n.retMB, "retention-mb", 0, "keep up to this many MB of acknowledged messages (-1: unlimited)")
	f.DurationVar(&n.ttl, "message-ttl", 0, "acknowledge unacknowledged messages older than this automatically, e.g. 1h (0: never)")
	f.BoolVar(&n.dedup, "deduplication", false, "enable message deduplication")
	f.Int64Var(&n.backlogLimit, "backlog-quota-limit", 0, "backlog size limit of a subscription in bytes (-1: unlimited)")
	f.StringVar(&n.backlogPolicy, "backlog-quota-policy", "", "what happens above the limit: producer_request_hold, producer_exception or consumer_backlog_eviction")
	f.StringVar(&n.autoTopic, "auto-topic-creation", "", "whether clients create topics by using them: off, non-partitioned or partitioned")
	f.Int32Var(&n.autoParts, "auto-topic-partitions", 0, "partitions of automatically created partitioned topics")
	f.StringVar(&n.schemaCompat, "schema-compatibility", "", "schema compatibility strategy, e.g. backward or full_transitive")
	f.StringSliceVar(&n.replClusters, "replication-clusters", nil, "clusters of the organization to replicate to, comma-separated")
}

// read sets in p the policies whose flags were given and returns their
// update-mask paths. name is the namespace's or its parent's resource name
// (its organization qualifies --replication-clusters ids).
func (n *nsPolicyFlags) read(cmd *cobra.Command, name string, p *cpv1.NamespacePolicies) ([]string, error) {
	f := cmd.Flags()
	var paths []string
	if f.Changed("retention-minutes") != f.Changed("retention-mb") {
		return nil, usageError(cmd, "give both --retention-minutes and --retention-mb")
	}
	if f.Changed("retention-minutes") {
		p.Retention = &cpv1.NamespacePolicies_Retention{TimeMinutes: n.retMinutes, SizeMb: n.retMB}
		paths = append(paths, nsPolicyPaths["retention"])
	}
	if f.Changed("message-ttl") {
		if n.ttl < 0 {
			return nil, usageError(cmd, "--message-ttl must not be negative")
		}
		p.MessageTtlSeconds = proto.Int32(int32(n.ttl / time.Second))
		paths = append(paths, nsPolicyPaths["message-ttl"])
	}
	if f.Changed("deduplication") {
		p.DeduplicationEnabled = proto.Bool(n.dedup)
		paths = append(paths, nsPolicyPaths["deduplication"])
	}
	if f.Changed("backlog-quota-policy") && !f.Changed("backlog-quota-limit") {
		return nil, usageError(cmd, "--backlog-quota-policy needs --backlog-quota-limit")
	}
	if f.Changed("backlog-quota-limit") {
		q := &cpv1.NamespacePolicies_BacklogQuota{LimitBytes: n.backlogLimit}
		if n.backlogPolicy != "" {
			v, ok := enumValue(cpv1.NamespacePolicies_BacklogQuota_Policy_value, n.backlogPolicy)
			if !ok {
				return nil, usageError(cmd, fmt.Sprintf("--backlog-quota-policy %q: want producer_request_hold, producer_exception or consumer_backlog_eviction", n.backlogPolicy))
			}
			q.Policy = cpv1.NamespacePolicies_BacklogQuota_Policy(v)
		}
		p.BacklogQuota = q
		paths = append(paths, nsPolicyPaths["backlog-quota"])
	}
	if f.Changed("auto-topic-partitions") && !f.Changed("auto-topic-creation") {
		return nil, usageError(cmd, "--auto-topic-partitions needs --auto-topic-creation partitioned")
	}
	if f.Changed("auto-topic-creation") {
		a := &cpv1.NamespacePolicies_AutoTopicCreation{Allow: true, DefaultPartitions: n.autoParts}
		switch strings.ToLower(n.autoTopic) {
		case "off", "false", "none":
			a = &cpv1.NamespacePolicies_AutoTopicCreation{}
		case "non-partitioned", "non_partitioned":
			a.Type = cpv1.NamespacePolicies_AutoTopicCreation_NON_PARTITIONED
		case "partitioned":
			a.Type = cpv1.NamespacePolicies_AutoTopicCreation_PARTITIONED
		default:
			return nil, usageError(cmd, fmt.Sprintf("--auto-topic-creation %q: want off, non-partitioned or partitioned", n.autoTopic))
		}
		p.AutoTopicCreation = a
		paths = append(paths, nsPolicyPaths["auto-topic-creation"])
	}
	if f.Changed("schema-compatibility") {
		v, ok := enumValue(cpv1.NamespacePolicies_SchemaCompatibilityStrategy_value, n.schemaCompat)
		if !ok || v == 0 {
			names := slices.Sorted(maps.Keys(cpv1.NamespacePolicies_SchemaCompatibilityStrategy_value))
			names = slices.DeleteFunc(names, func(s string) bool { return strings.HasSuffix(s, "UNSPECIFIED") })
			return nil, usageError(cmd, fmt.Sprintf("--schema-compatibility %q: want one of %s", n.schemaCompat, strings.ToLower(strings.Join(names, ", "))))
		}
		p.SchemaCompatibilityStrategy = cpv1.NamespacePolicies_SchemaCompatibilityStrategy(v)
		paths = append(paths, nsPolicyPaths["schema-compatibility"])
	}
	if f.Changed("replication-clusters") {
		org := strings.Join(strings.SplitN(name, "/", 3)[:2], "/")
		for _, c := range n.replClusters {
			if !strings.HasPrefix(c, "organizations/") {
				c = org + "/clusters/" + strings.TrimPrefix(c, "clusters/")
			}
			p.ReplicationClusters = append(p.ReplicationClusters, c)
		}
		paths = append(paths, nsPolicyPaths["replication-clusters"])
	}
	return paths, nil
}

// enumValue looks a protobuf enum value up by its name, case-insensitively
// and with '-' for '_'.
func enumValue(values map[string]int32, name string) (int32, bool) {
	v, ok := values[strings.ToUpper(strings.ReplaceAll(name, "-", "_"))]
	return v, ok
}
