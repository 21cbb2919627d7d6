package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/magnetar-dev/magnetar/dataplane/bundle"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin/config"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/magnetar-dev/magnetar/dataplane/standalone"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

var (
	sharedOnce sync.Once
	shared     *standalone.Standalone
	sharedErr  error
)

// cluster returns the package's standalone data plane (started once; the
// tests use distinct topic and namespace names).
func cluster(t *testing.T) *standalone.Standalone {
	t.Helper()
	sharedOnce.Do(func() {
		dir, err := tempDir()
		if err != nil {
			sharedErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		shared, sharedErr = standalone.Start(ctx, standalonetest.Config(dir, standalonetest.FreeAddr(t)))
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return shared
}

func newClient(t *testing.T, url string) pulsar.Client { return standalonetest.NewClient(t, url) }

func newAdmin(t *testing.T, s *standalone.Standalone) admin.Client {
	t.Helper()
	a, err := admin.New(&config.Config{WebServiceURL: s.WebServiceURL()})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

type call struct {
	name   string
	method string
	path   string
	body   string
	ctype  string
	status int
	want   string // substring of the response body
}

func do(t *testing.T, base string, c call) (int, string, http.Header) {
	t.Helper()
	var body io.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	req, err := http.NewRequest(c.method, base+c.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if c.body != "" {
		ct := c.ctype
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// rawGet sends GET path over a plain TCP connection and returns the
// response as sent (header names not canonicalized).
func rawGet(t *testing.T, base, path string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, u.Host)
	b, _ := io.ReadAll(conn)
	return string(b)
}

func runCalls(t *testing.T, base string, calls []call) {
	t.Helper()
	for _, c := range calls {
		status, body, _ := do(t, base, c)
		if status != c.status {
			t.Fatalf("%s: %s %s = %d %s, want %d", c.name, c.method, c.path, status, body, c.status)
		}
		if c.want != "" && !strings.Contains(body, c.want) {
			t.Fatalf("%s: %s %s body %q does not contain %q", c.name, c.method, c.path, body, c.want)
		}
		if status >= 400 && !json.Valid([]byte(body)) {
			t.Fatalf("%s: error body %q is not JSON", c.name, body)
		}
	}
}

func TestClustersTenantsNamespaces(t *testing.T) {
	s := cluster(t)
	base := s.WebServiceURL()
	runCalls(t, base, []call{
		{"list clusters", "GET", "/admin/v2/clusters", "", "", 200, `"standalone"`},
		{"get cluster", "GET", "/admin/v2/clusters/standalone", "", "", 200, ""},
		{"unknown cluster", "GET", "/admin/v2/clusters/nope", "", "", 404, "Cluster does not exist"},
		{"create cluster", "PUT", "/admin/v2/clusters/c2", `{"serviceUrl":"http://x:8080","peerClusterNames":["a"]}`, "", 204, ""},
		{"create again", "PUT", "/admin/v2/clusters/c2", `{}`, "", 409, ""},
		{"cluster round-trips", "GET", "/admin/v2/clusters/c2", "", "", 200, `"peerClusterNames":["a"]`},
		{"update cluster", "POST", "/admin/v2/clusters/c2", `{"serviceUrl":"http://y:8080"}`, "", 204, ""},
		{"delete cluster", "DELETE", "/admin/v2/clusters/c2", "", "", 204, ""},
		{"bad json", "PUT", "/admin/v2/tenants/t1", `{"adminRoles":`, "", 400, "Invalid JSON"},
		{"tenant unknown cluster", "PUT", "/admin/v2/tenants/t1", `{"allowedClusters":["zz"]}`, "", 412, ""},
		{"create tenant", "PUT", "/admin/v2/tenants/t1", `{"adminRoles":["r"],"allowedClusters":["standalone"]}`, "", 204, ""},
		{"tenant exists", "PUT", "/admin/v2/tenants/t1", `{}`, "", 409, ""},
		{"get tenant", "GET", "/admin/v2/tenants/t1", "", "", 200, `"adminRoles":["r"]`},
		{"list tenants", "GET", "/admin/v2/tenants", "", "", 200, `"t1"`},
		{"unknown tenant", "GET", "/admin/v2/tenants/nope", "", "", 404, "Tenant does not exist"},
		{"ns of unknown tenant", "PUT", "/admin/v2/namespaces/nope/ns", "", "", 404, "Tenant does not exist"},
		{"create ns", "PUT", "/admin/v2/namespaces/t1/ns1", "", "", 204, ""},
		{"create ns again", "PUT", "/admin/v2/namespaces/t1/ns1", "", "", 409, ""},
		{"list ns", "GET", "/admin/v2/namespaces/t1", "", "", 200, `"t1/ns1"`},
		{"get policies", "GET", "/admin/v2/namespaces/t1/ns1", "", "", 200, `"replication_clusters":["standalone"]`},
		{"unknown ns", "GET", "/admin/v2/namespaces/t1/nope/messageTTL", "", "", 404, "Namespace does not exist"},
		{"topic in unknown ns", "PUT", "/admin/v2/persistent/t1/late/tp", "", "", 404, "Namespace does not exist"},
		{"topic of unknown tenant", "PUT", "/admin/v2/persistent/nope/ns1/tp", "", "", 404, "Tenant does not exist"},
		{"ns created after", "PUT", "/admin/v2/namespaces/t1/late", "", "", 204, ""},
		{"no topic left behind", "GET", "/admin/v2/persistent/t1/late", "", "", 200, "[]"},
		{"ns created after deleted", "DELETE", "/admin/v2/namespaces/t1/late", "", "", 204, ""},
		{"delete non-empty tenant", "DELETE", "/admin/v2/tenants/t1", "", "", 409, ""},
		{"ttl unset", "GET", "/admin/v2/namespaces/t1/ns1/messageTTL", "", "", 204, ""},
		{"ttl set", "POST", "/admin/v2/namespaces/t1/ns1/messageTTL", "3600", "", 204, ""},
		{"ttl get", "GET", "/admin/v2/namespaces/t1/ns1/messageTTL", "", "", 200, "3600"},
		{"ttl bad", "POST", "/admin/v2/namespaces/t1/ns1/messageTTL", `"x"`, "", 400, ""},
		{"retention", "POST", "/admin/v2/namespaces/t1/ns1/retention", `{"retentionTimeInMinutes":60,"retentionSizeInMB":10}`, "", 204, ""},
		{"retention get", "GET", "/admin/v2/namespaces/t1/ns1/retention", "", "", 200, `"retentionSizeInMB":10`},
		{"backlog quota string limit", "POST", "/admin/v2/namespaces/t1/ns1/backlogQuota", `{"limit":"10485760","policy":"producer_request_hold"}`, "", 204, ""},
		{"backlog quota map", "GET", "/admin/v2/namespaces/t1/ns1/backlogQuotaMap", "", "", 200, `"destination_storage":{"limitSize":10485760`},
		{"backlog quota delete", "DELETE", "/admin/v2/namespaces/t1/ns1/backlogQuota", "", "", 204, ""},
		{"dedup", "POST", "/admin/v2/namespaces/t1/ns1/deduplication", "true", "", 204, ""},
		{"schema strategy", "PUT", "/admin/v2/namespaces/t1/ns1/schemaCompatibilityStrategy", `"BACKWARD"`, "", 204, ""},
		{"schema strategy get", "GET", "/admin/v2/namespaces/t1/ns1/schemaCompatibilityStrategy", "", "", 200, `"BACKWARD"`},
		{"permissions", "POST", "/admin/v2/namespaces/t1/ns1/permissions/alice", `["produce","consume"]`, "", 204, ""},
		{"permissions get", "GET", "/admin/v2/namespaces/t1/ns1/permissions", "", "", 200, `"alice":["produce","consume"]`},
		{"permissions revoke", "DELETE", "/admin/v2/namespaces/t1/ns1/permissions/alice", "", "", 204, ""},
		{"replication", "POST", "/admin/v2/namespaces/t1/ns1/replication", `["standalone"]`, "", 204, ""},
		{"replication unknown", "POST", "/admin/v2/namespaces/t1/ns1/replication", `["zz"]`, "", 412, ""},
		{"other policy", "POST", "/admin/v2/namespaces/t1/ns1/maxProducersPerTopic", "7", "", 204, ""},
		{"other policy in Policies", "GET", "/admin/v2/namespaces/t1/ns1", "", "", 200, `"max_producers_per_topic":7`},
		{"negative", "POST", "/admin/v2/namespaces/t1/ns1/maxTopicsPerNamespace", "-1", "", 412, "maxTopicsPerNamespace must be 0 or more"},
		{"auto creation bad", "POST", "/admin/v2/namespaces/t1/ns1/autoTopicCreation", `{"allowAutoTopicCreation":true,"topicType":"partitioned"}`, "", 400, "cannot be null"},
		{"auto creation", "POST", "/admin/v2/namespaces/t1/ns1/autoTopicCreation", `{"allowAutoTopicCreation":true,"topicType":"partitioned","defaultNumPartitions":2}`, "", 204, ""},
		{"auto creation get", "GET", "/admin/v2/namespaces/t1/ns1/autoTopicCreation", "", "", 200, `"defaultNumPartitions":2`},
		{"auto-created partitions", "GET", "/admin/v2/persistent/t1/ns1/auto/partitions?checkAllowAutoCreation=true", "", "", 200, `"partitions":2`},
		{"ns topics", "GET", "/admin/v2/namespaces/t1/ns1/topics", "", "", 200, "auto-partition-1"},
		{"delete ns with topics", "DELETE", "/admin/v2/namespaces/t1/ns1", "", "", 409, ""},
		{"delete ns forced", "DELETE", "/admin/v2/namespaces/t1/ns1?force=true", "", "", 204, ""},
		{"delete tenant", "DELETE", "/admin/v2/tenants/t1", "", "", 204, ""},
		{"unknown route", "GET", "/admin/v2/nothing", "", "", 404, ""},
	})
}

func TestBrokersAndLookup(t *testing.T) {
	s := cluster(t)
	lkBundle := bundle.Even(4).Find(bundle.Hash("persistent://public/default/lk")).String()
	base := s.WebServiceURL()
	host := strings.TrimPrefix(base, "http://")
	runCalls(t, base, []call{
		{"health", "GET", "/admin/v2/brokers/health", "", "", 200, "ok"},
		{"list", "GET", "/admin/v2/brokers/standalone", "", "", 200, host},
		{"leader", "GET", "/admin/v2/brokers/leaderBroker", "", "", 200, `"brokerId":"` + host},
		{"config names", "GET", "/admin/v2/brokers/configuration", "", "", 200, "allowAutoSubscriptionCreation"},
		{"config set", "POST", "/admin/v2/brokers/configuration/allowAutoSubscriptionCreation/%7B%22key%2F1%22%3A%22v%22%7D", "", "", 200, ""},
		{"config values", "GET", "/admin/v2/brokers/configuration/values", "", "", 200, `key/1`},
		{"config not dynamic", "POST", "/admin/v2/brokers/configuration/clusterName/x", "", "", 412, ""},
		{"lookup", "GET", "/lookup/v2/topic/persistent/public/default/lk", "", "", 200, `"brokerUrl":"` + s.ServiceURL()},
		{"lookup unknown ns", "GET", "/lookup/v2/topic/persistent/public/nope/lk", "", "", 404, ""},
		{"bundle", "GET", "/lookup/v2/topic/persistent/public/default/lk/bundle", "", "", 200, lkBundle},
		{"bundles", "GET", "/admin/v2/namespaces/public/default/bundles", "", "", 200, `"boundaries":["0x00000000","0x40000000","0x80000000","0xc0000000","0xffffffff"],"numBundles":4`},
		{"owned", "GET", "/admin/v2/brokers/standalone/" + host + "/ownedNamespaces", "", "", 200, `"public/default/` + lkBundle + `":{`},
		{"unload bundle", "PUT", "/admin/v2/namespaces/public/default/" + lkBundle + "/unload", "", "", 204, ""},
		{"owned after unload", "GET", "/admin/v2/brokers/standalone/" + host + "/ownedNamespaces", "", "", 200, `{}`},
		{"unload unowned bundle", "PUT", "/admin/v2/namespaces/public/default/" + lkBundle + "/unload", "", "", 204, ""},
		{"unload non-bundle", "PUT", "/admin/v2/namespaces/public/default/0x00000000_0x00000001/unload", "", "", 404, ""},
		{"lookup again", "GET", "/lookup/v2/topic/persistent/public/default/lk", "", "", 200, `"brokerUrl":"` + s.ServiceURL()},
		{"split", "PUT", "/admin/v2/namespaces/public/default/" + lkBundle + "/split", "", "", 204, ""},
		{"bundles after split", "GET", "/admin/v2/namespaces/public/default/bundles", "", "", 200, `"numBundles":5`},
	})
}

func TestTopicRoutes(t *testing.T) {
	s := cluster(t)
	base := s.WebServiceURL()
	p := "/admin/v2/persistent/public/default/"
	runCalls(t, base, []call{
		{"create", "PUT", p + "rt1", "null", "", 204, ""},
		{"create again", "PUT", p + "rt1", "null", "", 409, ""},
		{"list", "GET", p[:len(p)-1], "", "", 200, "persistent://public/default/rt1"},
		{"stats", "GET", p + "rt1/stats", "", "", 200, `"publishers":[]`},
		{"stats unknown", "GET", p + "nope/stats", "", "", 404, "Topic not found"},
		{"internal stats", "GET", p + "rt1/internalStats", "", "", 200, `"ledgers":[`},
		{"create sub", "PUT", p + "rt1/subscription/s1", `{"ledgerId":-1,"entryId":-1}`, "", 204, ""},
		{"create sub again", "PUT", p + "rt1/subscription/s1", "", "", 409, ""},
		{"subs", "GET", p + "rt1/subscriptions", "", "", 200, `["s1"]`},
		{"internal stats cursor", "GET", p + "rt1/internal-stats", "", "", 200, `"s1":{"markDeletePosition"`},
		{"skip", "POST", p + "rt1/subscription/s1/skip/1", "", "", 204, ""},
		{"skip all", "POST", p + "rt1/subscription/s1/skip_all", "", "", 204, ""},
		{"expire", "POST", p + "rt1/subscription/s1/expireMessages/10", "", "", 204, ""},
		{"reset ts", "POST", p + "rt1/subscription/s1/resetcursor/0", "", "", 204, ""},
		{"reset id", "POST", p + "rt1/subscription/s1/resetcursor", `{"ledgerId":-1,"entryId":-1}`, "", 204, ""},
		{"unknown sub", "POST", p + "rt1/subscription/zz/skip_all", "", "", 404, ""},
		{"props", "PUT", p + "rt1/properties", `{"a":"1","b":"2"}`, "", 204, ""},
		{"props del", "DELETE", p + "rt1/properties?key=a", "", "", 204, ""},
		{"props get", "GET", p + "rt1/properties", "", "", 200, `{"b":"2"}`},
		{"policy unset", "GET", p + "rt1/maxProducers", "", "", 204, ""},
		{"policy set", "POST", p + "rt1/maxProducers", "3", "", 204, ""},
		{"policy get", "GET", p + "rt1/maxProducers", "", "", 200, "3"},
		{"ttl query", "POST", p + "rt1/messageTTL?messageTTL=600", "", "", 204, ""},
		{"ttl get", "GET", p + "rt1/messageTTL", "", "", 200, "600"},
		{"ttl applied default", "GET", p + "rt1/retention?applied=true", "", "", 200, `"retentionTimeInMinutes":0`},
		{"strategy put", "PUT", p + "rt1/schemaCompatibilityStrategy", `"BACKWARD"`, "", 204, ""},
		{"strategy get", "GET", p + "rt1/schemaCompatibilityStrategy", "", "", 200, `"BACKWARD"`},
		{"policy unknown topic", "POST", p + "nope/maxProducers", "3", "", 404, ""},
		{"last id", "GET", p + "rt1/lastMessageId", "", "", 200, `"ledgerId"`},
		{"peek none", "GET", p + "rt1/subscription/s1/position/1", "", "", 404, ""},
		{"unload", "PUT", p + "rt1/unload", "", "", 204, ""},
		{"terminate", "POST", p + "rt1/terminate", "", "", 200, `"entryId":-1`},
		{"delete sub", "DELETE", p + "rt1/subscription/s1", "", "", 204, ""},
		{"delete", "DELETE", p + "rt1?force=true", "", "", 204, ""},
		{"delete gone", "DELETE", p + "rt1", "", "", 404, ""},
		{"partitions bare int", "PUT", p + "pt1/partitions", "2", "", 204, ""},
		{"partitions again", "PUT", p + "pt1/partitions", "2", "", 409, ""},
		{"partitions meta", "PUT", p + "pt2/partitions", `{"partitions":3,"properties":{"k":"v"}}`, "application/vnd.partitioned-topic-metadata+json", 204, ""},
		{"partitions get", "GET", p + "pt2/partitions", "", "", 200, `"partitions":3`},
		{"partitions grow", "POST", p + "pt1/partitions", "4", "", 204, ""},
		{"partitions shrink", "POST", p + "pt1/partitions", "1", "", 412, ""},
		{"partitioned list", "GET", p + "partitioned", "", "", 200, "persistent://public/default/pt1"},
		{"partitioned stats", "GET", p + "pt1/partitioned-stats?perPartition=true", "", "", 200, `"metadata":{"partitions":4}`},
		{"partition props", "GET", p + "pt2/properties", "", "", 200, `{"k":"v"}`},
		{"sub on partitioned", "PUT", p + "pt1/subscription/s", "", "", 204, ""},
		{"sub on partition", "GET", p + "pt1-partition-3/subscriptions", "", "", 200, `["s"]`},
		{"delete partitioned", "DELETE", p + "pt1/partitions?force=true", "", "", 204, ""},
		{"non-persistent list", "GET", "/admin/v2/non-persistent/public/default", "", "", 200, "["},
	})
}

func TestSchemaRoutes(t *testing.T) {
	s := cluster(t)
	base := s.WebServiceURL()
	p := "/admin/v2/schemas/public/default/sch/"
	avro := `{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}`
	body, _ := json.Marshal(map[string]any{"type": "AVRO", "schema": avro, "properties": map[string]string{"x": "y"}})
	runCalls(t, base, []call{
		{"none", "GET", p + "schema", "", "", 404, "Schema not found"},
		{"bad type", "POST", p + "schema", `{"type":"NOPE","schema":""}`, "", 400, ""},
		{"post", "POST", p + "schema", string(body), "", 200, ""},
		{"get", "GET", p + "schema", "", "", 200, `"type":"AVRO"`},
		{"get version", "GET", p + "schema/0", "", "", 200, `"properties":{"x":"y"}`},
		{"all", "GET", p + "schemas", "", "", 200, `"getSchemaResponses":[{"version":0`},
		{"version", "POST", p + "version", string(body), "", 200, `{"version":0}`},
		{"compat", "POST", p + "compatibility", `{"type":"STRING","schema":""}`, "", 200, `"compatibility":false`},
		{"delete", "DELETE", p + "schema", "", "", 200, `{"version":0}`},
		{"gone", "GET", p + "schema", "", "", 404, ""},
		// Deleting a topic deletes its schema (Pulsar 3.x).
		{"topic", "PUT", "/admin/v2/persistent/public/default/sch2", "null", "", 204, ""},
		{"topic schema", "POST", "/admin/v2/schemas/public/default/sch2/schema", string(body), "", 200, ""},
		{"delete topic", "DELETE", "/admin/v2/persistent/public/default/sch2", "", "", 204, ""},
		{"schema gone with topic", "GET", "/admin/v2/schemas/public/default/sch2/schema", "", "", 404, ""},
		{"partitioned", "PUT", "/admin/v2/persistent/public/default/sch3/partitions", "2", "", 204, ""},
		{"partitioned schema", "POST", "/admin/v2/schemas/public/default/sch3/schema", string(body), "", 200, ""},
		{"delete partitioned", "DELETE", "/admin/v2/persistent/public/default/sch3/partitions", "", "", 204, ""},
		{"schema gone with partitioned", "GET", "/admin/v2/schemas/public/default/sch3/schema", "", "", 404, ""},
	})
}

// TestPulsarAdminClient drives the API with Apache Pulsar's Go admin client
// and produces with the real Go client.
func TestPulsarAdminClient(t *testing.T) {
	s := cluster(t)
	a := newAdmin(t, s)
	if err := a.Tenants().Create(utils.TenantData{Name: "pa", AllowedClusters: []string{"standalone"}}); err != nil {
		t.Fatal(err)
	}
	if err := a.Namespaces().CreateNamespace("pa/ns"); err != nil {
		t.Fatal(err)
	}
	ns, _ := utils.GetNamespaceName("pa/ns")
	if err := a.Namespaces().SetNamespaceMessageTTL("pa/ns", 120); err != nil {
		t.Fatal(err)
	}
	if ttl, err := a.Namespaces().GetNamespaceMessageTTL("pa/ns"); err != nil || ttl != 120 {
		t.Fatalf("ttl = %d, %v", ttl, err)
	}
	if err := a.Namespaces().SetRetention("pa/ns", utils.RetentionPolicies{RetentionTimeInMinutes: 5, RetentionSizeInMB: 6}); err != nil {
		t.Fatal(err)
	}
	if r, err := a.Namespaces().GetRetention("pa/ns"); err != nil || r == nil || r.RetentionSizeInMB != 6 {
		t.Fatalf("retention = %+v, %v", r, err)
	}
	if err := a.Namespaces().SetMaxConsumersPerTopic(*ns, 9); err != nil {
		t.Fatal(err)
	}
	if n, err := a.Namespaces().GetMaxConsumersPerTopic(*ns); err != nil || n != 9 {
		t.Fatalf("maxConsumersPerTopic = %d, %v", n, err)
	}
	if err := a.Namespaces().SetSchemaCompatibilityStrategy(*ns, utils.SchemaCompatibilityStrategyForward); err != nil {
		t.Fatal(err)
	}
	if st, err := a.Namespaces().GetSchemaCompatibilityStrategy(*ns); err != nil || st != utils.SchemaCompatibilityStrategyForward {
		t.Fatalf("strategy = %v, %v", st, err)
	}
	if err := a.Namespaces().UpdateProperties(*ns, map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	if props, err := a.Namespaces().GetProperties(*ns); err != nil || props["k"] != "v" {
		t.Fatalf("properties = %v, %v", props, err)
	}

	topic := "persistent://pa/ns/pt"
	tn, _ := utils.GetTopicName(topic)
	if err := a.Topics().Create(*tn, 2); err != nil {
		t.Fatal(err)
	}
	if meta, err := a.Topics().GetMetadata(*tn); err != nil || meta.Partitions != 2 {
		t.Fatalf("metadata = %+v, %v", meta, err)
	}
	partitioned, _, err := a.Topics().List(*ns)
	if err != nil || len(partitioned) != 1 || partitioned[0] != topic {
		t.Fatalf("list = %v, %v", partitioned, err)
	}
	if err := a.Subscriptions().Create(*tn, "sub", utils.Earliest); err != nil {
		t.Fatal(err)
	}

	c := newClient(t, s.ServiceURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "the-producer", DisableBatching: true,
		Properties: map[string]string{"pm": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := 0; i < 6; i++ {
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m%d", i)), Key: "k", Properties: map[string]string{"Case": "Kept"}}); err != nil {
			t.Fatal(err)
		}
	}
	p0, _ := tn.GetPartition(0)
	st, err := a.Topics().GetStats(*p0)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Publishers) != 1 || st.Publishers[0].ProducerName != "the-producer" || st.Publishers[0].Metadata["pm"] != "1" ||
		!strings.Contains(st.Publishers[0].Address, "127.0.0.1") || st.TopicCreationTimeStamp == 0 {
		t.Fatalf("stats = %+v", st)
	}
	pst, err := a.Topics().GetPartitionedStats(*tn, true)
	if err != nil {
		t.Fatal(err)
	}
	if pst.Subscriptions["sub"].MsgBacklog != 6 || len(pst.Partitions) != 2 || pst.LastPublishTimestamp == 0 {
		t.Fatalf("partitioned stats = %+v", pst)
	}
	subs, err := a.Subscriptions().List(*p0)
	if err != nil || len(subs) != 1 || subs[0] != "sub" {
		t.Fatalf("subscriptions = %v, %v", subs, err)
	}
	total := 0
	for i := 0; i < 2; i++ {
		p, _ := tn.GetPartition(i)
		if back := pstBacklog(t, a, p); back > 0 {
			msgs, err := a.Subscriptions().PeekMessages(*p, "sub", int(back))
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				if !strings.HasPrefix(string(m.Payload), "m") || m.Properties["Case"] != "Kept" || m.GetMessageID().PartitionIndex != i {
					t.Fatalf("peeked %+v", m)
				}
			}
			total += len(msgs)
			// The Java admin client reads properties from the
			// X-Pulsar-PROPERTY (JSON) or X-Pulsar-PROPERTY-<key>
			// headers, matching those names case-sensitively: read the
			// raw response.
			raw := rawGet(t, s.WebServiceURL(), fmt.Sprintf("/admin/v2/persistent/pa/ns/pt-partition-%d/subscription/sub/position/1", i))
			// examinemessage counts entries from either end of the topic.
			ex := fmt.Sprintf("/admin/v2/persistent/pa/ns/pt-partition-%d/examinemessage", i)
			for _, c := range []struct {
				query  string
				status int
				body   string
			}{
				{"?initialPosition=earliest&messagePosition=1", 200, string(msgs[0].Payload)},
				{fmt.Sprintf("?initialPosition=latest&messagePosition=%d", back), 200, string(msgs[0].Payload)},
				{"?messagePosition=1", 200, string(msgs[len(msgs)-1].Payload)},
				{fmt.Sprintf("?initialPosition=earliest&messagePosition=%d", back+1), 404, ""},
				{"?initialPosition=middle", 400, ""},
			} {
				if status, body, _ := do(t, s.WebServiceURL(), call{method: "GET", path: ex + c.query}); status != c.status || (c.body != "" && body != c.body) {
					t.Fatalf("examinemessage%s = %d %q, want %d %q", c.query, status, body, c.status, c.body)
				}
			}
			if !strings.Contains(raw, "\r\nX-Pulsar-PROPERTY-Case: Kept\r\n") || !strings.Contains(raw, "\r\nX-Pulsar-PROPERTY: {\"Case\":\"Kept\"}\r\n") {
				t.Fatalf("peek response without the property header:\n%s", raw)
			}
			one, err := a.Subscriptions().GetMessageByID(*p, msgs[0].MessageID.LedgerID, msgs[0].MessageID.EntryID)
			if err != nil || string(one.Payload) != string(msgs[0].Payload) {
				t.Fatalf("get by id = %+v, %v", one, err)
			}
		}
	}
	if total != 6 {
		t.Fatalf("peeked %d messages, want 6", total)
	}
	var counters struct{ MsgInCounter, BytesInCounter int64 }
	if _, body, _ := do(t, s.WebServiceURL(), call{method: "GET", path: "/admin/v2/persistent/pa/ns/pt/partitioned-stats"}); json.Unmarshal([]byte(body), &counters) != nil ||
		counters.MsgInCounter != 6 || counters.BytesInCounter == 0 {
		t.Fatalf("partitioned stats counters = %+v, want 6 messages in", counters)
	}
	if err := a.Subscriptions().ClearBacklog(*tn, "sub"); err != nil {
		t.Fatal(err)
	}
	if b := pstBacklog(t, a, p0); b != 0 {
		t.Fatalf("backlog after clear = %d", b)
	}

	// Schemas.
	if err := a.Schemas().CreateSchemaByPayload(topic, utils.PostSchemaPayload{SchemaType: "STRING", Schema: ""}); err != nil {
		t.Fatal(err)
	}
	info, err := a.Schemas().GetSchemaInfo(topic)
	if err != nil || info.Type != "STRING" || info.Timestamp == 0 {
		t.Fatalf("schema = %+v, %v", info, err)
	}
	if v, err := a.Schemas().GetVersionBySchemaInfo(topic, utils.SchemaInfo{Type: "STRING", Schema: []byte("")}); err != nil || v != 0 {
		t.Fatalf("version = %d, %v", v, err)
	}
	if err := a.Schemas().ForceDeleteSchema(topic); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Schemas().GetSchemaInfo(topic); err == nil {
		t.Fatal("schema still there after delete")
	}

	// Topic policies.
	if err := a.Topics().SetMaxProducers(*tn, 4); err != nil {
		t.Fatal(err)
	}
	if n, err := a.Topics().GetMaxProducers(*tn); err != nil || n != 4 {
		t.Fatalf("max producers = %d, %v", n, err)
	}
	if err := a.Topics().SetMessageTTL(*tn, 30); err != nil {
		t.Fatal(err)
	}
	if n, err := a.Topics().GetMessageTTL(*tn); err != nil || n != 30 {
		t.Fatalf("ttl = %d, %v", n, err)
	}
	if err := a.Topics().RemoveMessageTTL(*tn); err != nil {
		t.Fatal(err)
	}
	if n, err := a.Topics().GetMessageTTL(*tn); err != nil || n != -1 {
		t.Fatalf("ttl after remove = %d, %v", n, err)
	}
	prod.Close()
	if err := a.Topics().Delete(*tn, true, false); err != nil {
		t.Fatal(err)
	}
}

func pstBacklog(t *testing.T, a admin.Client, p *utils.TopicName) int64 {
	t.Helper()
	st, err := a.Topics().GetStats(*p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Subscriptions["sub"].MsgBacklog
}

// TestHTTPLookupClient: the Go client with an http:// service URL looks up
// topics and partitions over HTTP, then produces and consumes.
func TestHTTPLookupClient(t *testing.T) {
	s := cluster(t)
	a := newAdmin(t, s)
	tn, _ := utils.GetTopicName("persistent://public/default/http-lookup")
	if err := a.Topics().Create(*tn, 2); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, s.WebServiceURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	parts, err := c.TopicPartitions(tn.String())
	if err != nil || len(parts) != 2 {
		t.Fatalf("partitions = %v, %v", parts, err)
	}
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: tn.String(), SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: tn.String()})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := 0; i < 10; i++ {
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[byte]bool{}
	for len(seen) < 10 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seen[m.Payload()[0]] = true
		cons.Ack(m)
	}
}

// TestBadInput: malformed values get 4xx with a JSON reason.
func TestBadInput(t *testing.T) {
	s := cluster(t)
	base := s.WebServiceURL()
	runCalls(t, base, []call{
		{"huge partitions", "PUT", "/admin/v2/persistent/public/default/bi/partitions", "-1", "", 412, ""},
		{"not a number", "PUT", "/admin/v2/persistent/public/default/bi/partitions", "abc", "", 400, ""},
		{"bad domain lookup", "GET", "/lookup/v2/topic/weird/public/default/x", "", "", 404, ""},
		{"bad message id", "GET", "/admin/v2/persistent/public/default/bi/ledger/x/entry/1", "", "", 400, ""},
	})
	status, _, _ := do(t, base, call{method: "POST", path: "/admin/v2/namespaces/public/default/properties", body: string(bytes.Repeat([]byte("x"), 10))})
	if status != 400 {
		t.Fatalf("garbage properties: %d", status)
	}
}

// TestTopicCreationTime: a persistent topic created through the admin API
// reports its creation time in its stats, and the same time after it was
// unloaded and loaded again (the managed ledger's record keeps it; nothing
// records "now" on the reload).
func TestTopicCreationTime(t *testing.T) {
	s := cluster(t)
	a := newAdmin(t, s)
	tn, _ := utils.GetTopicName("persistent://public/default/created-at")
	before := time.Now().UnixMilli()
	if err := a.Topics().Create(*tn, 0); err != nil {
		t.Fatal(err)
	}
	after := time.Now().UnixMilli()
	st, err := a.Topics().GetStats(*tn)
	if err != nil {
		t.Fatal(err)
	}
	created := st.TopicCreationTimeStamp
	if created < before || created > after {
		t.Fatalf("TopicCreationTimeStamp = %d, want within [%d, %d]", created, before, after)
	}
	time.Sleep(20 * time.Millisecond)
	if err := a.Topics().Unload(*tn); err != nil {
		t.Fatal(err)
	}
	if st, err = a.Topics().GetStats(*tn); err != nil {
		t.Fatal(err)
	}
	if st.TopicCreationTimeStamp != created {
		t.Fatalf("after reload TopicCreationTimeStamp = %d, want %d", st.TopicCreationTimeStamp, created)
	}
}
