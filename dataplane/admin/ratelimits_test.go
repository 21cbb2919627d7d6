package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// TestRatePoliciesPerCluster: the namespace rate policies are stored as
// Pulsar stores them, keyed by cluster, and read back through the Go admin
// client.
func TestRatePoliciesPerCluster(t *testing.T) {
	s := cluster(t)
	base := s.WebServiceURL()
	runCalls(t, base, []call{
		{"tenant", "PUT", "/admin/v2/tenants/rl", `{"allowedClusters":["standalone"]}`, "", 204, ""},
		{"namespace", "PUT", "/admin/v2/namespaces/rl/ns", "", "", 204, ""},
	})
	a := newAdmin(t, s)
	ns, _ := utils.GetNamespaceName("rl/ns")
	if err := a.Namespaces().SetPublishRate(*ns, utils.PublishRate{PublishThrottlingRateInMsg: 100, PublishThrottlingRateInByte: 4096}); err != nil {
		t.Fatal(err)
	}
	pr, err := a.Namespaces().GetPublishRate(*ns)
	if err != nil || pr.PublishThrottlingRateInMsg != 100 || pr.PublishThrottlingRateInByte != 4096 {
		t.Fatalf("GetPublishRate = %+v, %v", pr, err)
	}
	if err := a.Namespaces().SetDispatchRate(*ns, utils.DispatchRate{DispatchThrottlingRateInMsg: 50, DispatchThrottlingRateInByte: -1, RatePeriodInSecond: 2}); err != nil {
		t.Fatal(err)
	}
	dr, err := a.Namespaces().GetDispatchRate(*ns)
	if err != nil || dr.DispatchThrottlingRateInMsg != 50 || dr.RatePeriodInSecond != 2 {
		t.Fatalf("GetDispatchRate = %+v, %v", dr, err)
	}
	runCalls(t, base, []call{
		{"stored by cluster", "GET", "/admin/v2/namespaces/rl/ns", "", "", 200,
			`"publishMaxMessageRate":{"standalone":{"publishThrottlingRateInMsg":100,"publishThrottlingRateInByte":4096}}`},
		{"dispatch by cluster", "GET", "/admin/v2/namespaces/rl/ns", "", "", 200, `"topicDispatchRate":{"standalone":{`},
		{"subscribe rate", "POST", "/admin/v2/namespaces/rl/ns/subscribeRate", `{"subscribeThrottlingRatePerConsumer":3,"ratePeriodInSecond":30}`, "", 204, ""},
		{"subscribe rate by cluster", "GET", "/admin/v2/namespaces/rl/ns", "", "", 200, `"clusterSubscribeRate":{"standalone":{`},
		{"subscribe rate get", "GET", "/admin/v2/namespaces/rl/ns/subscribeRate", "", "", 200, `"subscribeThrottlingRatePerConsumer":3`},
		{"publish rate removed", "DELETE", "/admin/v2/namespaces/rl/ns/publishRate", "", "", 204, ""},
		{"publish rate unset", "GET", "/admin/v2/namespaces/rl/ns/publishRate", "", "", 204, ""},
	})
}

// TestResourceGroups: the resource group endpoints and a namespace's
// membership, with Pulsar's paths, fields and statuses.
func TestResourceGroups(t *testing.T) {
	s := cluster(t)
	base := s.WebServiceURL()
	runCalls(t, base, []call{
		{"none", "GET", "/admin/v2/resourcegroups", "", "", 200, "[]"},
		{"unknown", "GET", "/admin/v2/resourcegroups/rg1", "", "", 404, "ResourceGroup does not exist"},
		{"create", "PUT", "/admin/v2/resourcegroups/rg1", `{"publishRateInMsgs":100,"dispatchRateInBytes":1048576}`, "", 204, ""},
		{"list", "GET", "/admin/v2/resourcegroups", "", "", 200, `["rg1"]`},
		{"get", "GET", "/admin/v2/resourcegroups/rg1", "", "", 200, `"publishRateInMsgs":100`},
		{"get all fields", "GET", "/admin/v2/resourcegroups/rg1", "", "", 200, `"dispatchRateInMsgs":0`},
		{"update", "PUT", "/admin/v2/resourcegroups/rg1", `{"publishRateInMsgs":200}`, "", 204, ""},
		{"updated", "GET", "/admin/v2/resourcegroups/rg1", "", "", 200, `"publishRateInMsgs":200`},
		{"bad body", "PUT", "/admin/v2/resourcegroups/rg1", `[1]`, "", 400, ""},
		{"tenant", "PUT", "/admin/v2/tenants/rgt", `{"allowedClusters":["standalone"]}`, "", 204, ""},
		{"namespace", "PUT", "/admin/v2/namespaces/rgt/ns", "", "", 204, ""},
		{"join unknown group", "POST", "/admin/v2/namespaces/rgt/ns/resourcegroup/nope", "", "", 412, "ResourceGroup does not exist"},
		{"join", "POST", "/admin/v2/namespaces/rgt/ns/resourcegroup/rg1", "", "", 204, ""},
		{"membership", "GET", "/admin/v2/namespaces/rgt/ns/resourcegroup", "", "", 200, `"rg1"`},
		{"in policies", "GET", "/admin/v2/namespaces/rgt/ns", "", "", 200, `"resource_group_name":"rg1"`},
		{"delete in use", "DELETE", "/admin/v2/resourcegroups/rg1", "", "", 409, ""},
		{"leave", "DELETE", "/admin/v2/namespaces/rgt/ns/resourcegroup", "", "", 204, ""},
		{"no membership", "GET", "/admin/v2/namespaces/rgt/ns/resourcegroup", "", "", 204, ""},
		{"delete", "DELETE", "/admin/v2/resourcegroups/rg1", "", "", 204, ""},
		{"deleted", "GET", "/admin/v2/resourcegroups/rg1", "", "", 404, ""},
		{"delete unknown", "DELETE", "/admin/v2/resourcegroups/rg1", "", "", 404, ""},
	})
}

// TestMaxTopicsPerNamespaceAdmin: creating topics over
// maxTopicsPerNamespace answers 412 with Pulsar's reason; partitions count.
func TestMaxTopicsPerNamespaceAdmin(t *testing.T) {
	s := cluster(t)
	base := s.WebServiceURL()
	runCalls(t, base, []call{
		{"tenant", "PUT", "/admin/v2/tenants/mt", `{"allowedClusters":["standalone"]}`, "", 204, ""},
		{"namespace", "PUT", "/admin/v2/namespaces/mt/ns", "", "", 204, ""},
		{"limit", "POST", "/admin/v2/namespaces/mt/ns/maxTopicsPerNamespace", "3", "", 204, ""},
		{"partitioned", "PUT", "/admin/v2/persistent/mt/ns/p/partitions", "2", "", 204, ""},
		{"one more", "PUT", "/admin/v2/persistent/mt/ns/a", "", "", 204, ""},
		{"over", "PUT", "/admin/v2/persistent/mt/ns/b", "", "", 412, "Exceed maximum number of topics in namespace."},
		{"partitioned over", "PUT", "/admin/v2/persistent/mt/ns/q/partitions", "1", "", 412, "Exceed maximum number of topics in namespace."},
		{"existing again", "PUT", "/admin/v2/persistent/mt/ns/a", "", "", 409, ""},
	})
}

// TestPublishRateThroughAdmin: a topic publish rate set with the Go admin
// client throttles a real producer to it (±10%, measured by the test's
// clock over the messages after the first second's burst and one more).
func TestPublishRateThroughAdmin(t *testing.T) {
	s := cluster(t)
	runCalls(t, s.WebServiceURL(), []call{
		{"tenant", "PUT", "/admin/v2/tenants/rl2", `{"allowedClusters":["standalone"]}`, "", 204, ""},
		{"namespace", "PUT", "/admin/v2/namespaces/rl2/ns", "", "", 204, ""},
		{"topic", "PUT", "/admin/v2/persistent/rl2/ns/t", "", "", 204, ""},
	})
	const rate = 250
	a := newAdmin(t, s)
	tn, _ := utils.GetTopicName("persistent://rl2/ns/t")
	if err := a.Topics().SetPublishRate(*tn, utils.PublishRateData{PublishThrottlingRateInMsg: rate, PublishThrottlingRateInByte: -1}); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, s.ServiceURL())
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: tn.String(), DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The policy reaches the loaded topic through the broker's watch:
	// wait until the producer is held below twice the rate.
	var ts []time.Time
	for attempt := 0; ; attempt++ {
		ts = ts[:0]
		for range 6 * rate {
			if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("x")}); err != nil {
				t.Fatalf("send: %v", err)
			}
			ts = append(ts, time.Now())
		}
		got := float64(len(ts)-1-2*rate) / ts[len(ts)-1].Sub(ts[2*rate]).Seconds()
		if got < 2*rate || attempt == 2 {
			t.Logf("publish rate %.1f/s, limit %d/s", got, rate)
			if got < 0.9*rate || got > 1.1*rate {
				t.Fatalf("publish rate %.1f/s, want %d/s ±10%%", got, rate)
			}
			return
		}
	}
}
