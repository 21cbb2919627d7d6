package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
)

// loaded returns the topic object open on the broker; the tests compare it
// before and after a policy change to show the topic was not reloaded.
func loaded(e *env, topic string) *broker.Topic {
	e.t.Helper()
	tn, err := broker.ParseTopicName(topic)
	if err != nil {
		e.t.Fatal(err)
	}
	tp := broker.LoadedTopic(e.sa.Broker(), tn)
	if tp == nil {
		e.t.Fatalf("topic %s is not loaded", topic)
	}
	return tp
}

// TestPolicyTTLAppliesToLoadedTopic: a message TTL set on a namespace
// while its topic is loaded expires the backlog without an unload.
func TestPolicyTTLAppliesToLoadedTopic(t *testing.T) {
	e := newFastPolicyEnv(t, 100*time.Millisecond)
	if err := e.sa.Broker().Resources().CreateNamespace(e.ctx, "public", "livettl", broker.Policies{}); err != nil {
		t.Fatal(err)
	}
	topic := "persistent://public/livettl/t"
	e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"}).Close()
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	for i := range 3 {
		e.send(p, msg(fmt.Sprint("m", i)))
	}
	before := loaded(e, topic)
	// Several passes without a TTL keep the backlog.
	time.Sleep(500 * time.Millisecond)
	if b := backlogOf(e, topic, "s"); b != 3 {
		t.Fatalf("backlog without TTL = %d, want 3", b)
	}
	setNamespaceField(e, "public/livettl", "message_ttl_in_seconds", json.RawMessage("1"))
	awaitCond(t, 15*time.Second, "the new TTL to expire the backlog", func() bool {
		return backlogOf(e, topic, "s") == 0
	})
	if loaded(e, topic) != before {
		t.Fatal("the topic was reloaded to apply the TTL")
	}
}

// TestPolicyBacklogQuotaAppliesToLoadedTopic: a backlog quota set while a
// producer is publishing blocks it at once (the cached verdict is dropped),
// and removing the quota lets producers in again, without an unload.
func TestPolicyBacklogQuotaAppliesToLoadedTopic(t *testing.T) {
	e := newFastPolicyEnv(t, time.Hour) // only the SEND-path check runs
	if err := e.sa.Broker().Resources().CreateNamespace(e.ctx, "public", "livequota", broker.Policies{}); err != nil {
		t.Fatal(err)
	}
	topic := "persistent://public/livequota/t"
	e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"}).Close()
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	for i := range 10 {
		e.send(p, msg(fmt.Sprint(strings.Repeat("x", 200), i)))
	}
	before := loaded(e, topic)
	setNamespaceField(e, "public/livequota", "backlog_quota_map", quotaMap(t, map[string]map[string]any{
		"destination_storage": {"limitSize": 1000, "limitTime": -1, "policy": "producer_exception"},
	}))
	var sendErr error
	awaitCond(t, 10*time.Second, "the new quota to block the producer", func() bool {
		ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
		defer cancel()
		_, sendErr = p.Send(ctx, msg("over"))
		return sendErr != nil
	})
	if !errors.Is(sendErr, pulsar.ErrProducerBlockedQuotaExceeded) {
		t.Fatalf("send after the quota was set: %v, want ErrProducerBlockedQuotaExceeded", sendErr)
	}
	if loaded(e, topic) != before {
		t.Fatal("the topic was reloaded to apply the quota")
	}

	setNamespaceField(e, "public/livequota", "backlog_quota_map", nil)
	var p2 pulsar.Producer
	awaitCond(t, 10*time.Second, "producers to be accepted after the quota was removed", func() bool {
		var err error
		p2, err = e.client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		return err == nil
	})
	defer p2.Close()
	e.send(p2, msg("after"))
	if loaded(e, topic) != before {
		t.Fatal("the topic was reloaded to remove the quota")
	}
}

// TestPolicyRetentionAndPersistenceApplyToLoadedTopic: retention and
// persistence policies changed while a topic is loaded reach its managed
// ledger (retention at once, replication for the next ledger), and
// removing them restores the broker's defaults.
func TestPolicyRetentionAndPersistenceApplyToLoadedTopic(t *testing.T) {
	e := newEnv(t)
	if err := e.sa.Broker().Resources().CreateNamespace(e.ctx, "public", "liveret", broker.Policies{}); err != nil {
		t.Fatal(err)
	}
	topic := "persistent://public/liveret/t"
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	e.send(p, msg("m"))
	tp := loaded(e, topic)
	def := tp.LedgerConfig()
	if def.RetentionTime != 0 || def.RetentionSize != 0 {
		t.Fatalf("default retention = %v/%d, want none", def.RetentionTime, def.RetentionSize)
	}

	setNamespaceField(e, "public/liveret", "retention_policies", json.RawMessage(`{"retentionTimeInMinutes":-1,"retentionSizeInMB":20}`))
	setNamespaceField(e, "public/liveret", "persistence", json.RawMessage(
		`{"bookkeeperEnsemble":3,"bookkeeperWriteQuorum":2,"bookkeeperAckQuorum":2,"managedLedgerMaxMarkDeleteRate":0}`))
	awaitCond(t, 10*time.Second, "the retention and persistence policies to reach the loaded topic", func() bool {
		c := tp.LedgerConfig()
		return c.RetentionTime == -1 && c.RetentionSize == 20<<20 && c.Ensemble == 3 && c.WriteQuorum == 2 && c.AckQuorum == 2
	})

	setNamespaceField(e, "public/liveret", "retention_policies", nil)
	setNamespaceField(e, "public/liveret", "persistence", nil)
	awaitCond(t, 10*time.Second, "the defaults to come back", func() bool {
		c := tp.LedgerConfig()
		return c.RetentionTime == def.RetentionTime && c.RetentionSize == def.RetentionSize && c.Ensemble == def.Ensemble &&
			c.WriteQuorum == def.WriteQuorum && c.AckQuorum == def.AckQuorum
	})
	// The writes of the loaded topic were never disturbed.
	e.send(p, msg("still"))
	if loaded(e, topic) != tp {
		t.Fatal("the topic was reloaded")
	}
}

// TestPolicyDeduplicationSwitchesOnLoadedTopic: turning deduplication on
// for a loaded topic makes re-sent sequence ids duplicates (the state is
// rebuilt from the entries already written); turning it off stores them
// again.
func TestPolicyDeduplicationSwitchesOnLoadedTopic(t *testing.T) {
	e := newEnv(t)
	if err := e.sa.Broker().Resources().CreateNamespace(e.ctx, "public", "livededup", broker.Policies{}); err != nil {
		t.Fatal(err)
	}
	topic := "persistent://public/livededup/t"
	c := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	p := e.producer(pulsar.ProducerOptions{Topic: topic, Name: "lp", DisableBatching: true})
	for _, s := range []int64{0, 1, 1} { // off: the repeated 1 is stored
		e.send(p, seqMsg(s))
	}
	tp := loaded(e, topic)

	setNamespaceField(e, "public/livededup", "deduplicationEnabled", json.RawMessage("true"))
	awaitCond(t, 10*time.Second, "deduplication to be enabled on the loaded topic", tp.DedupActive)
	for _, s := range []int64{1, 2, 2} { // on: 1 was written before, 2 is repeated
		e.send(p, seqMsg(s))
	}

	setNamespaceField(e, "public/livededup", "deduplicationEnabled", json.RawMessage("false"))
	awaitCond(t, 10*time.Second, "deduplication to be disabled on the loaded topic", func() bool { return !tp.DedupActive() })
	e.send(p, seqMsg(2)) // off again: stored

	for _, want := range []string{"m0", "m1", "m1", "m2", "m2"} {
		m := e.receive(c)
		if string(m.Payload()) != want {
			t.Fatalf("got %q, want %q", m.Payload(), want)
		}
		c.Ack(m)
	}
	e.expectNothing(c, 300*time.Millisecond)
	if loaded(e, topic) != tp {
		t.Fatal("the topic was reloaded")
	}
}

// TestTopicPolicyDeduplication: the topic-level deduplicationEnabled policy
// switches deduplication on a loaded topic, applies when the topic is
// opened again, and overrides its namespace's policy.
func TestTopicPolicyDeduplication(t *testing.T) {
	e := newEnv(t)
	res := e.sa.Broker().Resources()
	if err := res.CreateNamespace(e.ctx, "public", "topicdedup", broker.Policies{}); err != nil {
		t.Fatal(err)
	}
	topic := "persistent://public/topicdedup/t"
	tn, _ := broker.ParseTopicName(topic)
	setTopicDedup := func(on bool) {
		t.Helper()
		err := res.UpdateTopicPolicies(e.ctx, tn, false, func(m map[string]json.RawMessage) error {
			m["deduplicationEnabled"] = json.RawMessage(strconv.FormatBool(on))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	c := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	p := e.producer(pulsar.ProducerOptions{Topic: topic, Name: "tp", DisableBatching: true})
	e.send(p, seqMsg(0))
	tp := loaded(e, topic)

	setTopicDedup(true)
	awaitCond(t, 10*time.Second, "the topic policy to enable deduplication", tp.DedupActive)
	st, err := e.sa.Broker().TopicStats(e.ctx, tn, broker.StatsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.DeduplicationStatus != "Enabled" {
		t.Fatalf("stats: deduplicationStatus %q, want Enabled", st.DeduplicationStatus)
	}
	e.send(p, seqMsg(0)) // a duplicate
	e.send(p, seqMsg(1))
	p.Close()

	// Reopened, the topic starts with the topic-level policy.
	if err := e.sa.Broker().UnloadTopic(e.ctx, tn); err != nil {
		t.Fatal(err)
	}
	p = e.producer(pulsar.ProducerOptions{Topic: topic, Name: "tp", DisableBatching: true})
	e.send(p, seqMsg(1)) // a duplicate
	tp = loaded(e, topic)
	if !tp.DedupActive() {
		t.Fatal("deduplication is off after the reopen")
	}

	// The topic's false beats the namespace's true.
	setNamespaceField(e, "public/topicdedup", "deduplicationEnabled", json.RawMessage("true"))
	setTopicDedup(false)
	awaitCond(t, 10*time.Second, "the topic policy to disable deduplication", func() bool { return !tp.DedupActive() })
	e.send(p, seqMsg(1)) // stored again

	for _, want := range []string{"m0", "m1", "m1"} {
		m := e.receive(c)
		if string(m.Payload()) != want {
			t.Fatalf("got %q, want %q", m.Payload(), want)
		}
		c.Ack(m)
	}
	e.expectNothing(c, 300*time.Millisecond)
}

// TestPolicyMaxProducersAppliesToLoadedTopic: max_producers_per_topic set
// while producers are connected refuses the next one; the connected ones
// keep publishing.
func TestPolicyMaxProducersAppliesToLoadedTopic(t *testing.T) {
	e := newEnv(t)
	if err := e.sa.Broker().Resources().CreateNamespace(e.ctx, "public", "liveprod", broker.Policies{}); err != nil {
		t.Fatal(err)
	}
	topic := "persistent://public/liveprod/t"
	p1 := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	e.send(p1, msg("a"))
	setNamespaceField(e, "public/liveprod", "max_producers_per_topic", json.RawMessage("1"))
	var err error
	awaitCond(t, 10*time.Second, "a second producer to be refused", func() bool {
		var p2 pulsar.Producer
		p2, err = e.client.CreateProducer(pulsar.ProducerOptions{Topic: topic})
		if err == nil {
			p2.Close()
			return false
		}
		return true
	})
	if !strings.Contains(err.Error(), "max producers") {
		t.Fatalf("second producer refused with %v, want the max producers limit", err)
	}
	e.send(p1, msg("b"))
}

// TestNamespacePoliciesShared: the topics of a namespace open with one
// snapshot of its policies, a change moves both to one new snapshot, and
// once the namespace is deleted no topic can be created in it.
func TestNamespacePoliciesShared(t *testing.T) {
	e := newEnv(t)
	svc := e.sa.Broker()
	if err := svc.Resources().CreateNamespace(e.ctx, "public", "shared", broker.Policies{}); err != nil {
		t.Fatal(err)
	}
	var names []broker.TopicName
	for _, s := range []string{"a", "b"} {
		tn, err := broker.ParseTopicName("persistent://public/shared/" + s)
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.CreateTopic(e.ctx, tn, nil); err != nil {
			t.Fatal(err)
		}
		names = append(names, tn)
	}
	ta, tb := broker.LoadedTopic(svc, names[0]), broker.LoadedTopic(svc, names[1])
	first := ta.PolicySnapshot()
	if first != tb.PolicySnapshot() {
		t.Fatal("two topics of one namespace opened with separate snapshots of its policies")
	}
	setNamespaceField(e, "public/shared", "max_producers_per_topic", json.RawMessage("2"))
	awaitCond(t, 10*time.Second, "the change to reach both topics", func() bool {
		s := ta.PolicySnapshot()
		return s != first && s == tb.PolicySnapshot()
	})

	for _, tn := range names {
		if err := svc.DeleteTopic(e.ctx, tn, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := svc.Resources().DeleteNamespace(e.ctx, "public", "shared"); err != nil {
		t.Fatal(err)
	}
	i := 0
	awaitCond(t, 10*time.Second, "creations in the deleted namespace to fail", func() bool {
		i++
		tn, _ := broker.ParseTopicName(fmt.Sprintf("persistent://public/shared/late-%d", i))
		err := svc.CreateTopic(e.ctx, tn, nil)
		return err != nil && strings.Contains(err.Error(), "Namespace not found")
	})
}

// TestTopicOpenUsesWatchedPolicies: while the policy watch runs, a topic
// opens with the broker's snapshot of its namespace without reading the
// record; a change this broker writes applies to the very next open
// (without waiting for the watch), and once it deleted the namespace no
// topic can be created in it.
func TestTopicOpenUsesWatchedPolicies(t *testing.T) {
	md, node := startCountedStandalone(t)
	svc := node.Broker()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := svc.Resources()
	if err := res.CreateNamespace(ctx, "public", "cached", broker.Policies{}); err != nil {
		t.Fatal(err)
	}
	topic := func(name string) broker.TopicName {
		tn, err := broker.ParseTopicName("persistent://public/cached/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return tn
	}
	if err := svc.CreateTopic(ctx, topic("first"), nil); err != nil { // acquires the bundle
		t.Fatal(err)
	}
	before, reads := md.policyReads.Load(), md.partitionedReads.Load()
	for _, name := range []string{"a", "b", "c"} {
		if err := svc.CreateTopic(ctx, topic(name), nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := md.policyReads.Load() - before; got != 0 {
		t.Fatalf("three topic creations read policy records %d times, want none", got)
	}
	if got := md.partitionedReads.Load() - reads; got != 0 {
		t.Fatalf("three topic creations read partitioned-topic records %d times, want none", got)
	}
	// The partitioned-topic check is part of the creation's write.
	if err := res.CreatePartitioned(ctx, topic("p"), 2, nil); err != nil {
		t.Fatal(err)
	}
	if err := svc.CreateTopic(ctx, topic("p"), nil); !errors.Is(err, broker.ErrAlreadyExists) || !strings.Contains(err.Error(), "partitioned") {
		t.Fatalf("creating a topic with a partitioned topic's name = %v, want already exists (partitioned)", err)
	}
	first := broker.LoadedTopic(svc, topic("a")).PolicySnapshot()

	on := true
	if err := res.UpdateNamespace(ctx, "public", "cached", func(p *broker.Policies) error {
		p.DeduplicationEnabled = &on
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := svc.CreateTopic(ctx, topic("d"), nil); err != nil {
		t.Fatal(err)
	}
	d, a := broker.LoadedTopic(svc, topic("d")).PolicySnapshot(), broker.LoadedTopic(svc, topic("a")).PolicySnapshot()
	if d == first || d != a {
		t.Fatal("a topic opened right after a policy change this broker wrote did not get the new policies")
	}

	if err := res.DeleteNamespace(ctx, "public", "cached"); err != nil {
		t.Fatal(err)
	}
	if err := svc.CreateTopic(ctx, topic("e"), nil); err == nil {
		t.Fatal("a topic was created in a deleted namespace")
	}
}
