package main

import (
	"fmt"
	"sort"
	"strings"
)

// group is a milestone of docs/shared notes §13: a set of upstream tests
// that exercise one area of the broker.
type group struct {
	id       string
	title    string
	excluded string // non-empty: why the group is not run by default
}

// groups in report order. The target is every group that is not excluded:
// all but the tests that need transactions, several brokers or Docker.
var groups = []group{
	{id: "M0", title: "unit (no broker expected)"},
	{id: "M1", title: "core produce/consume"},
	{id: "M2", title: "readers, seek"},
	{id: "M3", title: "subscription types, acks, nack, DLQ, delay, zero-queue"},
	{id: "M4", title: "partitions, multi-topic, regex, namespaces, HTTP lookup"},
	{id: "M5", title: "schema, chunking, encryption, table view"},
	{id: "M6", title: "TLS and authentication (broker run with upstream CI's certificates, tokens and htpasswd)"},
	{id: "M7", title: "transactions", excluded: "needs transactions (and TLS on 8443)"},
	{id: "M8", title: "policies, stats, unload, access modes"},
	{id: "M9", title: "pulsaradmin/pkg/admin"},
	{id: "M10", title: "multi-broker (-tags clustered / extensible_load_manager)", excluded: "needs several brokers, proxy and compose host names"},
	{id: "X", title: "Docker (start their own broker)", excluded: "needs Docker"},
}

func groupByID(id string) (group, bool) {
	for _, g := range groups {
		if g.id == id {
			return g, true
		}
	}
	return group{}, false
}

// parseGroups turns "M1,M2" into a set; "" selects every group that is not
// excluded, "all" every group.
func parseGroups(s string) (map[string]bool, error) {
	set := map[string]bool{}
	s = strings.TrimSpace(s)
	switch s {
	case "":
		for _, g := range groups {
			if g.excluded == "" {
				set[g.id] = true
			}
		}
		return set, nil
	case "all":
		for _, g := range groups {
			set[g.id] = true
		}
		return set, nil
	}
	for _, id := range strings.Split(s, ",") {
		id = strings.ToUpper(strings.TrimSpace(id))
		if id == "" {
			continue
		}
		if _, ok := groupByID(id); !ok {
			return nil, fmt.Errorf("unknown group %q", id)
		}
		set[id] = true
	}
	return set, nil
}

// The packages the runner knows, by test binary.
const (
	pkgPulsar = "pulsar"                // ./pulsar, binary pulsar.test
	pkgAdmin  = "pulsaradmin/pkg/admin" // binary admin.test
)

// classify returns the group of a test of pkg. Every ./pulsar test not
// named in pulsarGroups is unit (M0); every admin test is M9.
func classify(pkg, name string) string {
	if pkg == pkgAdmin {
		return "M9"
	}
	if g, ok := pulsarIndex[name]; ok {
		return g
	}
	return "M0"
}

var pulsarIndex = func() map[string]string {
	idx := map[string]string{}
	ids := make([]string, 0, len(pulsarGroups))
	for id := range pulsarGroups {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		for _, name := range pulsarGroups[id] {
			if prev, dup := idx[name]; dup {
				panic(fmt.Sprintf("compatrun: %s listed in %s and %s", name, prev, id))
			}
			idx[name] = id
		}
	}
	return idx
}()

// pulsarGroups names the ./pulsar tests of each milestone (notes §13; the
// grouping is a heuristic, the names are exact for pulsar-client-go v0.19.0).
var pulsarGroups = map[string][]string{
	"M1": {
		"TestAckWithMessageID", "TestAutoCloseIdleConnection", "TestBatchMessageFlushing",
		"TestBatchMessageReceive", "TestBatchSendMessagesWithMetadata", "TestBatchingDisabled",
		"TestClientWithSlog", "TestConcurrentFlushInProducer", "TestConsumerBatchIndexAckDisabled",
		"TestConsumerCompression", "TestConsumerCompressionWithBatches", "TestConsumerEventTime",
		"TestConsumerFlow", "TestConsumerForceUnSubscribe", "TestConsumerMemoryLimit",
		"TestConsumerMultiCompressions", "TestConsumerName", "TestConsumerNegativeReceiverQueueSize",
		"TestConsumerReceiveErrAfterClose", "TestConsumerSubscriptionEarliestPosition", "TestConsumerUnSubscribe",
		"TestConsumerWithAutoScaledQueueReceive", "TestConsumerWithoutEventTime", "TestDisableReplication",
		"TestEventTime", "TestExactlyOnceWithProducerNameSpecified", "TestFailPendingMessageWithClose",
		"TestFlushInProducer", "TestLookupConsumer", "TestMaxBatchSize", "TestMaxMessageSize",
		"TestMemLimitContextCancel", "TestMemLimitRejectProducerMessages", "TestMultiConsumerMemoryLimit",
		"TestNoBatchSendMessagesWithMetadata", "TestProducerAsyncSend", "TestProducerCompression",
		"TestProducerConsumer", "TestProducerDuplicateNameOnSameTopic", "TestProducerFlushDisableBatching",
		"TestProducerLastSequenceID", "TestProducerName", "TestProducerReturnsErrorOnFlushWhenClosed",
		"TestProducerSendAfterClose", "TestProducerSendWithContext", "TestProducerWithBackoffPolicy",
		"TestProducerWithInterceptors", "TestProducerWithMaxConnectionsPerBroker",
		"TestSelectConnectionForSameProducer", "TestSendAsyncWithContextCancel",
		"TestSendBufferRetainWhenConnectionStuck", "TestSendConcurrently", "TestSimpleProducer",
	},
	"M2": {
		"TestConsumerSeek", "TestConsumerSeekByTime", "TestReader", "TestReaderConfigChunk",
		"TestReaderConfigSubscribeName", "TestReaderEmptyPayloadNonemptyPropsNonBatch", "TestReaderHasNext",
		"TestReaderHasNextAgainstEmptyTopic", "TestReaderHasNextFailed", "TestReaderHasNextRetryFailed",
		"TestReaderLatestInclusiveHasNext", "TestReaderNextReturnsOnClosedConsumer",
		"TestReaderOnLatestWithBatching", "TestReaderOnSpecificMessage", "TestReaderOnSpecificMessageWithBatching",
		"TestReaderOnSpecificMessageWithCustomMessageID", "TestReaderReadFromLatest", "TestReaderSeek",
		"TestReaderWithBackoffPolicy", "TestReaderWithSeekByID", "TestReaderWithSeekByTime",
	},
	"M3": {
		"TestAckIDList", "TestAckWithResponse", "TestBatchDelayMessage", "TestBatchIndexAck", "TestConsumerAck",
		"TestConsumerAckCumulativeOnSharedSubShouldFailed", "TestConsumerBatchCumulativeAck",
		"TestConsumerKeyShared", "TestConsumerKeySharedWithDelayedMessages",
		"TestConsumerKeySharedWithOrderingKey", "TestConsumerNack", "TestConsumerNoBatchCumulativeAck",
		"TestConsumerNonDurable", "TestConsumerReceiveTimeout", "TestConsumerWithBackoffPolicy",
		"TestConsumerWithInterceptors", "TestCumulativeAckWithResponse", "TestDLQ", "TestDLQMultiTopics",
		"TestDLQWithProducerOptions", "TestDeadLetterTopicWithInitialSubscription", "TestDelayAbsolute",
		"TestDelayRelative", "TestGetDeliveryCount", "TestKeyBasedBatchProducerConsumerKeyShared",
		"TestMultipleConsumer", "TestNegativeAckPrecisionBitCnt", "TestNormalZeroQueueConsumer",
		"TestOrderingOfKeyBasedBatchProducerConsumerKeyShared", "TestRLQMultiTopics",
		"TestSelectConnectionForSameConsumer", "TestWithDeadLetterTopicDeadLetterTopicProducerName",
		"TestWithoutDeadLetterTopicDeadLetterTopicProducerName", "TestZeroQueueConsumer_AckCumulativeConsumer",
		"TestZeroQueueConsumer_Chan", "TestZeroQueueConsumer_Nack", "TestZeroQueueConsumer_Seek",
		"TestZeroQueueConsumer_SeekByTime",
	},
	"M4": {
		"TestConsumerAddTopicPartitions", "TestConsumerGetLastMessageIDs",
		"TestConsumerSeekByTimeOnPartitionedTopic", "TestConsumerShared", "TestFlushInPartitionedProducer",
		"TestHTTPTopicPartitions", "TestMessageRouter", "TestMultiTopicAckIDList",
		"TestMultiTopicAckIDListTimeout", "TestMultiTopicConsumerForceUnsubscribe",
		"TestMultiTopicConsumerReceive", "TestMultiTopicConsumerUnsubscribe", "TestMultiTopicGetLastMessageIDs",
		"TestNamespaceTopics", "TestNamespaceTopicsNamespaceDoesNotExit", "TestNamespaceTopicsWebURL",
		"TestNonPersistentTopic", "TestPartitionConsumerGetLastMessageIDs",
		"TestPartitionTopic_ActiveConsumerChanged", "TestPartitionTopicsConsumerPubSub",
		"TestPartitionUpdateFailed", "TestPartitionZeroQueueConsumer", "TestRLQ", "TestRLQSpecifiedPartitionTopic",
		"TestRLQWithCustomProperties", "TestRLQWithCustomPropertiesEventTime",
		"TestReaderGetLastMessageIDOnMultiTopics", "TestReaderOnPartitionedTopic", "TestRegexConsumer",
		"TestRegexConsumerDiscover", "TestRegexConsumerReconsumeLater", "TestRegexTopicGetLastMessageIDs",
		"TestRetryWithMultipleHttpHosts", "TestRoundRobinRouterPartitionedProducer",
		"TestSpecifiedPartitionZeroQueueConsumer", "TestTopicPartitions", "TestZeroQueueConsumerGetLastMessageIDs",
	},
	"M5": {
		"TestAvailablePermitsLeak", "TestAvroSchema", "TestBatchMessageReceiveWithCompressionAndRSAEcnryption",
		"TestBatchProducerConsumerRSAEncryptionWithCompression", "TestBytesSchema", "TestChunkAckAndNAck",
		"TestChunkBlockIfQueueFull", "TestChunkMultiTopicConsumerReceive", "TestChunkSize",
		"TestConsumerCompressionWithRSAEncryption", "TestConsumerEncryptionWithoutKeyReader", "TestDoubleSchema",
		"TestEncryptDecryptRedeliveryOnFailure", "TestExpireIncompleteChunks", "TestFailedSchemaEncode",
		"TestFloatSchema", "TestForEachAndListenJSONSchema", "TestHTTPLookupAvroSchema",
		"TestHTTPLookupJsonSchema", "TestInt16Schema", "TestInt32Schema", "TestInt64Schema", "TestInt8Schema",
		"TestJsonSchema", "TestLargeMessage", "TestMaxPendingChunkMessages",
		"TestMemLimitRejectProducerMessagesWithChunking", "TestMemLimitRejectProducerMessagesWithSchema",
		"TestMultipleSchemaOfKeyBasedBatchProducerConsumer", "TestMultipleSchemaProducerConsumer",
		"TestPartitionTopicsConsumerPubSubEncryption", "TestProducerConsumerRSAEncryption",
		"TestProducerConsumerRSAEncryptionWithCompression",
		"TestProducerConsumerRedeliveryOfFailedEncryptedMessages", "TestProducerReaderRSAEncryption",
		"TestProducerWithRSAEncryption", "TestProducerWithSchemaAndConsumerSchemaNotFound",
		"TestProducuerSendFailOnInvalidKey", "TestProtoNativeSchema", "TestProtoSchema", "TestPublishNilValue",
		"TestRSAEncryptionFailure", "TestReaderGetLastMessageID", "TestReaderWithSchema",
		"TestResendChunkMessages", "TestResendChunkWithAckHoleMessages", "TestSeekChunkMessages",
		"TestStringSchema", "TestTableView", "TestTableViewSchemas",
	},
	// M6 holds the negative tests too (a wrong CA, a host name the
	// certificate does not name, a client without credentials): only the
	// broker's TLS listener gives them the error they are about, while a
	// broker without one refuses the connection, which satisfies their
	// assert.Error as well. TestHTTPOAuth2AuthFailed's client fails to get
	// a token before it sends a request.
	"M6": {
		"TestHTTPBasicAuth", "TestHTTPOAuth2Auth", "TestHTTPOAuth2AuthFailed", "TestHTTPSAuth",
		"TestHTTPSAuthError", "TestHTTPSAuthWithCertSupplier", "TestHTTPSBasicAuth", "TestHTTPSConnection",
		"TestHTTPSConnectionCAError", "TestHTTPSConnectionHostNameVerification",
		"TestHTTPSConnectionHostNameVerificationError", "TestHTTPSInsecureConnection", "TestHTTPSOAuth2Auth",
		"TestHTTPSTokenAuthFromFile", "TestHTTPTokenAuth", "TestHTTPTokenAuthFromFile",
		"TestHTTPTokenAuthWithSupplier", "TestOAuth2Auth", "TestServiceUrlTLSWithTLSTransportWithBasicAuth",
		"TestTLSAuth", "TestTLSAuthError", "TestTLSAuthWithCertSupplier", "TestTLSConnection",
		"TestTLSConnectionCAError", "TestTLSConnectionHostNameVerification",
		"TestTLSConnectionHostNameVerificationError", "TestTLSInsecureConnection", "TestTokenAuth",
		"TestTokenAuthFromFile", "TestTokenAuthWithClientVersion", "TestTokenAuthWithSupplier",
		"TestWebServiceUrlTLSWithTLSTransportWithBasicAuth",
	},
	"M7": {
		"TestTxn_AckAndSend", "TestTxn_AckChunkMessage", "TestTxn_ConnReconnect", "TestTxn_ConsumeAndProduce",
		"TestTxn_ImplCommitOrAbort", "TestTxn_RegisterOpAndEndOp", "TestTxn_RegisterTopic", "TestTxn_TCClient",
		"TestTxn_TransactionAbort",
	},
	"M8": {
		"TestAckResponseNotBlocked", "TestChunkWithReconnection", "TestChunksEnqueueFailed", "TestClientVersion",
		"TestConsumerMetadata", "TestExclusiveProducer", "TestProducerMetadata",
		"TestProducerReconnectWhenBacklogQuotaExceed", "TestSendContextExpired", "TestSendTimeout",
		"TestTopicTermination", "TestUnloadTopicBeforeConsume", "TestWaitForExclusiveProducer",
	},
	"X": {
		"TestConsumerKeepReconnectingAndThenCallClose", "TestProducerKeepReconnectingAndThenCallClose",
		"TestReconnectConsumer", "TestReconnectedBrokerSendPermits", "TestSendAsyncCouldTimeoutWhileReconnecting",
	},
}
