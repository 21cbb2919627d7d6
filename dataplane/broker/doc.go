// Package broker is a Pulsar broker: it serves the Pulsar binary protocol
// (conn.go), owns the topics loaded on it (topic.go), their producers,
// subscriptions and dispatchers (producer.go, subscription.go), bundle
// ownership and load management (ownership.go, loadmanager.go), and the
// tenant, namespace and topic metadata in the metadata store
// (resources.go, adminpolicies.go, resourcegroup.go) that the admin REST
// API (package admin) edits, the write fence of a planned failover
// (migration.go, PIP-188) and topic compaction with the read_compacted
// view (compaction.go). cmd/magnetar and package standalone build a
// Service with New and run it with Start and Shutdown.
//
// Concurrency: each connection's reader goroutine owns its producer and
// consumer maps and a writer goroutine its socket writes; each persistent
// subscription runs one dispatcher goroutine; the Service owns the
// background passes and the policy watches and waits for them in Shutdown.
// Lock orders are written where the locks are declared (Service, Topic,
// policywatch.go, ratelimits.go).
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
