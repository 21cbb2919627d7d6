// Package broker is a Pulsar broker: it serves the Pulsar binary protocol,
// owns the topics loaded on it with their producers, subscriptions and
// dispatchers, owns namespace bundles under leases and balances them across
// brokers, and keeps the tenant, namespace and topic records in the
// metadata store that the admin REST API (package admin) edits.
// Package brokernode (behind `magnetar broker` and dataplane/standalone)
// builds a Service with New and runs it with Start and Shutdown; package
// admin calls its exported methods.
//
// # Map of the files
//
// The Service and its connections:
//   - service.go: Service, New, Start, Shutdown; the topic registry
//     (getTopic/openTopic: one open per name, auto-creation, the
//     namespace's topic count) and the broker-wide pending-bytes budget.
//   - config.go: Config and its defaults. metrics.go: the Prometheus
//     series; topicmetrics.go: the optional per-topic and per-subscription
//     series (Pulsar's names).
//   - conn.go: one client connection: CONNECT, the reader loop and command
//     switch, the writer and keep-alive; LOOKUP, PARTITIONED_METADATA and
//     GET_TOPICS_OF_NAMESPACE. authz.go: authentication on CONNECT,
//     credential refresh, authorization of every command (cached per
//     connection, invalidated by Service.authGen). backpressure.go: what
//     stops the reader (SENDs in flight per connection, pending bytes per
//     broker, publish-rate debt).
//
// Ownership and lookup:
//   - ownership.go: broker registration under a metadata session, bundle
//     ownership as ephemeral keys, Lookup (owner, redirect or take a free
//     bundle), unload and split, leader election; on a lost session every
//     bundle is dropped and the broker registers again. A topic load holds
//     a lease (its bundle, owned in the current session) and the topic is
//     served only if the lease still holds when the load ends.
//   - loadmanager.go: the leader's load manager: load reports, the pure
//     shedDecisions (split bundles over MaxTopicsPerBundle, move a busy
//     bundle off an overloaded broker) and their execution through the
//     owners' admin API.
//   - lookupops.go, topicname.go: HTTP lookup helpers; TopicName (domain,
//     tenant, namespace, local name, partition).
//
// Topics, producers, dispatch and subscriptions:
//   - topic.go: Topic: producers (with exclusive access modes),
//     subscriptions, close; the in/out counters of the stats.
//   - producer.go: PRODUCER and SEND: the produce path into the managed
//     ledger and the SEND_RECEIPT. dedup.go: message deduplication (PIP-6)
//     per producer name, snapshotted into the ledger's properties.
//   - consumer.go: SUBSCRIBE, FLOW, ACK (batch index acks included),
//     REDELIVER, SEEK, UNSUBSCRIBE, GET_LAST_MESSAGE_ID.
//   - subscription.go: Subscription and its dispatcher: reads from the
//     cursor, permits, redelivery and replay, delayed delivery, Exclusive,
//     Failover, Shared; keyshared.go and keyshared_order.go: Key_Shared
//     (hash ranges, sticky and auto-split, per-key order across consumer
//     changes).
//   - compaction.go: topic compaction: the compacted ledger (latest value
//     per key, tombstones), the read_compacted view, status and threshold.
//   - ttl.go: the periodic passes over open topics (message TTL; the
//     backlog-quota and compaction checks use the same loop).
//
// Schemas: schema.go (the schema registry in the metadata store and the
// schema a producer or consumer brings), schemaadmin.go (the admin API's
// schema calls), schemacompat.go (maps the decision of package
// dataplane/schemacompat, the compatibility strategies, to Pulsar's
// IncompatibleSchema error).
//
// Policies and quotas:
//   - resources.go: Resources, the metadata-store records of clusters,
//     tenants, namespaces (Policies) and partitioned topics, with their
//     paths; adminpolicies.go: the raw JSON policy records the admin API
//     edits field by field.
//   - policywatch.go: the watch of namespace policies and each topic's
//     snapshot of them; policyfollow.go: topic-level policies and
//     resource-group records, followed the same way.
//   - ratelimits.go, resourcegroup.go, limits.go, quota.go: rate limits,
//     resource groups, count limits, backlog quotas (see below).
//   - offload.go: tiered-storage policies and the offload trigger.
//
// Replication and migration: replication.go (a replicator per remote
// cluster and topic, shared connections per remote), replsub.go
// (replicated subscriptions), migration.go (the write fence of a planned
// failover, PIP-188).
//
// Admin and reporting: adminops.go (the topic and subscription operations
// of the admin API: create, delete, unload, terminate, reset, skip, peek,
// examine), stats.go (Pulsar's TopicStats and internal stats), usage.go
// and usage_durable.go (billing meters: per-namespace counters, and
// crash-exact durable counters of persistent topics kept on cursors).
//
// # Concurrency
//
// Lock order, outermost first (each is written again where the lock is
// declared):
//
//	Topic.pol.mu (policy changes)  before Topic.mu
//	Topic.replMu, Topic.migMu      before Topic.mu
//	topicCollector.mu              before Topic.mu
//	Service.mu  ->  Topic.mu  ->  Subscription.mu  ->  conn.mu (last; never
//	                                                    held calling into topics)
//	compactor.loadMu -> compactor.mu; topicUsage.outMu -> topicUsage.mu;
//	resourceGroups.mu -> resourceGroup.mu
//
// ownership.mu is taken with Service.mu released and no topic or
// subscription lock held. policyWatch.mu, recordView.mu, usageMeter.mu,
// dedupState.mu and migrationRun.mu are leaves.
//
// Goroutines and their owners (Shutdown stops the Service's and waits for
// them on Service.wg; closing a topic stops its own):
//   - Service: the accept loops and one goroutine per connection (serve);
//     the periodic topic passes (ttl.go); ownership.run with the load
//     manager while leader; the policy watch loop and the record followers;
//     replicators and their reconciliation, compactions, migrations,
//     deduplication loads, replicated-subscription updates and deletions of
//     unreplicated topics (each on Service.wg, cancelled through stopContext
//     when the broker stops).
//   - conn: the reader (serve) owns the producer and consumer maps; the
//     writer drains the outbound queue so no topic waits on a slow socket;
//     keepAlive and, with expiring credentials, authRefresher; all joined
//     on conn.wg before the connection's producers and consumers are
//     released.
//   - Subscription: one dispatcher goroutine (run) per persistent
//     subscription with consumers, stopped and waited for by
//     Subscription.close (stopCh, done).
//   - Topic: the usage out worker (usage_durable.go), which counts the
//     entries acknowledgements passed, runs while they ask for it and is
//     stopped and waited for by the topic's close.
//   - A deduplication snapshot after a SEND runs on its own goroutine,
//     bounded by a 10 s timeout and not joined by Shutdown.
//
// # Separate ideas
//
// Most files share the Topic, Subscription and Service internals and
// belong together. The schema compatibility check is a pure function of
// schema definitions and lives in its own package (dataplane/schemacompat).
// Two more parts could follow: the metadata records and their paths
// (resources.go, adminpolicies.go, topicname.go), which package admin and
// the broker both read and which never touch a loaded topic; and the load
// manager's decisions (shedDecisions in loadmanager.go), a pure function
// of load reports. Compaction, replication, deduplication, usage metering
// and the rate limits reach into Topic and Subscription state under their
// locks and stay here.
//
// # Rate limits and quotas
//
// What the broker enforces, by Pulsar's policy names (namespace policy
// field / topic-level policy / admin REST path segment). A topic-level
// policy (/admin/topic-policies, local scope over global) overrides the
// namespace's; namespace rate policies are maps keyed by cluster and this
// broker's cluster entry applies. Every change applies to loaded topics
// without an unload (policywatch.go, policyfollow.go); buckets are re-rated
// in place.
//
//   - Publish rate: publishMaxMessageRate / publishRate / publishRate
//     (publishThrottlingRateInMsg, publishThrottlingRateInByte, per second,
//     per topic or partition). Enforced with a token bucket
//     (package ratelimit, PIP-322 style: charged after the SEND, the
//     balance may go negative) by pausing the producer connection's reads
//     until the debt is paid (backpressure.go): producers are slowed, never
//     failed. All producers of the connection pause, as in Pulsar.
//   - Dispatch rate: topicDispatchRate / dispatchRate / dispatchRate for
//     the topic (shared by its subscriptions) and subscriptionDispatchRate /
//     subscriptionDispatchRate for each subscription
//     (dispatchThrottlingRateInMsg, dispatchThrottlingRateInByte,
//     ratePeriodInSecond). The dispatcher reads no more entries than the
//     message balance allows and is held while a balance is spent; entries
//     stay in the backlog. relativeToPublishRate is not supported.
//     Non-persistent topics are not dispatch-limited.
//   - Replicator dispatch rate: replicatorDispatchRate paces each
//     replicator of a topic (replication.go) on its own buckets.
//   - Subscribe rate: clusterSubscribeRate / subscribeRate / subscribeRate
//     (subscribeThrottlingRatePerConsumer per ratePeriodInSecond) per
//     consumer identity (client host, consumer name, consumer id, as
//     Pulsar keys it). Over it SUBSCRIBE fails with NotAllowedError
//     "Subscribe limited by subscribe rate limit per consumer." — Pulsar's
//     answer (not TooManyRequests: the Pulsar broker returns NotAllowed,
//     and the Go client retries only its reconnections).
//   - Resource groups: /admin/v2/resourcegroups (publishRateInMsgs,
//     publishRateInBytes, dispatchRateInMsgs, dispatchRateInBytes) and the
//     namespace policy resource_group_name. One publish and one dispatch
//     bucket per group per broker, shared by all topics of its namespaces;
//     the group's rate is per broker (no cross-broker quota rebalancing).
//     Tenant-level resource groups are not supported.
//   - Count limits, refused with Pulsar's errors: max_producers_per_topic /
//     maxProducers (ProducerBusy "Topic reached max producers limit");
//     max_consumers_per_topic / maxConsumers (ConsumerBusy "Topic reached
//     max consumers limit"); max_consumers_per_subscription /
//     maxConsumersPerSubscription (ConsumerBusy "Subscription reached max
//     consumers limit"); max_subscriptions_per_topic /
//     maxSubscriptionsPerTopic (NotAllowed "Exceed the maximum number of
//     subscriptions of the topic: <topic>"); max_topics_per_namespace
//     (persistent topics and partitions; NotAllowed for clients, HTTP 412
//     for the admin API, "Exceed maximum number of topics in namespace.").
//   - Unacknowledged messages: max_unacked_messages_per_consumer /
//     maxUnackedMessagesOnConsumer and max_unacked_messages_per_subscription
//     / maxUnackedMessagesOnSubscription (defaults Config.MaxUnacked..., 50000
//     and 200000 as in Pulsar), for Shared and Key_Shared subscriptions:
//     dispatch to the consumer (or subscription) stops at the limit and
//     resumes at half of it.
//   - Backlog quotas (backlog_quota_map): quota.go.
//
// Not enforced: the broker-wide publish and dispatch rates of Pulsar's
// broker.conf (brokerPublisherThrottlingMaxMessageRate,
// dispatchThrottlingRatePerTopicInMsg, ...) and the max-same-address
// consumer and producer limits.
//
// Without any limit set the produce path pays one atomic load per SEND
// (Topic.rates) and the dispatcher two per round: no allocation and no
// lock is added.
package broker
