package protocol

import (
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-dev/magnetar/api/pulsarwire"
)

// Builders of the commands a broker sends most. Each returns a new
// BaseCommand with its type set.

// NewConnected answers CONNECT. maxMessageSize <= 0 leaves the field unset
// (clients then assume DefaultMaxMessageSize).
func NewConnected(serverVersion string, protocolVersion, maxMessageSize int32, flags *pulsarwire.FeatureFlags) *pulsarwire.BaseCommand {
	c := &pulsarwire.CommandConnected{
		ServerVersion:   proto.String(serverVersion),
		ProtocolVersion: proto.Int32(protocolVersion),
		FeatureFlags:    flags,
	}
	if maxMessageSize > 0 {
		c.MaxMessageSize = proto.Int32(maxMessageSize)
	}
	return &pulsarwire.BaseCommand{Type: pulsarwire.BaseCommand_CONNECTED.Enum(), Connected: c}
}

// NewPing returns a PING.
func NewPing() *pulsarwire.BaseCommand {
	return &pulsarwire.BaseCommand{Type: pulsarwire.BaseCommand_PING.Enum(), Ping: &pulsarwire.CommandPing{}}
}

// NewPong returns a PONG.
func NewPong() *pulsarwire.BaseCommand {
	return &pulsarwire.BaseCommand{Type: pulsarwire.BaseCommand_PONG.Enum(), Pong: &pulsarwire.CommandPong{}}
}

// NewSuccess answers a request with SUCCESS.
func NewSuccess(requestID uint64) *pulsarwire.BaseCommand {
	return &pulsarwire.BaseCommand{
		Type:    pulsarwire.BaseCommand_SUCCESS.Enum(),
		Success: &pulsarwire.CommandSuccess{RequestId: proto.Uint64(requestID)},
	}
}

// NewError answers a request with ERROR.
func NewError(requestID uint64, code pulsarwire.ServerError, msg string) *pulsarwire.BaseCommand {
	return &pulsarwire.BaseCommand{
		Type: pulsarwire.BaseCommand_ERROR.Enum(),
		Error: &pulsarwire.CommandError{
			RequestId: proto.Uint64(requestID),
			Error:     code.Enum(),
			Message:   proto.String(msg),
		},
	}
}

// NewErrorFrom answers a request with ERROR for err, through ServerErrorOf.
func NewErrorFrom(requestID uint64, err error) *pulsarwire.BaseCommand {
	code, msg := ServerErrorOf(err)
	return NewError(requestID, code, msg)
}

// NewSendError fails one SEND.
func NewSendError(producerID, sequenceID uint64, code pulsarwire.ServerError, msg string) *pulsarwire.BaseCommand {
	return &pulsarwire.BaseCommand{
		Type: pulsarwire.BaseCommand_SEND_ERROR.Enum(),
		SendError: &pulsarwire.CommandSendError{
			ProducerId: proto.Uint64(producerID),
			SequenceId: proto.Uint64(sequenceID),
			Error:      code.Enum(),
			Message:    proto.String(msg),
		},
	}
}

// NewSendReceipt acknowledges a SEND stored as (ledgerID, entryID).
// highestSequenceID is echoed from the SEND (0 when it had none).
func NewSendReceipt(producerID, sequenceID, highestSequenceID, ledgerID, entryID uint64) *pulsarwire.BaseCommand {
	r := &pulsarwire.CommandSendReceipt{
		ProducerId: proto.Uint64(producerID),
		SequenceId: proto.Uint64(sequenceID),
		MessageId: &pulsarwire.MessageIdData{
			LedgerId: proto.Uint64(ledgerID),
			EntryId:  proto.Uint64(entryID),
		},
	}
	if highestSequenceID != 0 {
		r.HighestSequenceId = proto.Uint64(highestSequenceID)
	}
	return &pulsarwire.BaseCommand{Type: pulsarwire.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: r}
}

// NewProducerSuccess answers PRODUCER. lastSequenceID is -1 for a producer
// with no stored messages; ready=false keeps the client waiting for a later
// PRODUCER_SUCCESS (WaitForExclusive).
func NewProducerSuccess(requestID uint64, producerName string, lastSequenceID int64, schemaVersion []byte, topicEpoch *uint64, ready bool) *pulsarwire.BaseCommand {
	return &pulsarwire.BaseCommand{
		Type: pulsarwire.BaseCommand_PRODUCER_SUCCESS.Enum(),
		ProducerSuccess: &pulsarwire.CommandProducerSuccess{
			RequestId:      proto.Uint64(requestID),
			ProducerName:   proto.String(producerName),
			LastSequenceId: proto.Int64(lastSequenceID),
			SchemaVersion:  schemaVersion,
			TopicEpoch:     topicEpoch,
			ProducerReady:  proto.Bool(ready),
		},
	}
}

// NewMessage is the command of a MESSAGE frame; the stored entry follows it
// (WritePayloadCommand). ackSet may be nil.
func NewMessage(consumerID uint64, id *pulsarwire.MessageIdData, redeliveryCount uint32, ackSet []int64, consumerEpoch *uint64) *pulsarwire.BaseCommand {
	m := &pulsarwire.CommandMessage{
		ConsumerId:    proto.Uint64(consumerID),
		MessageId:     id,
		AckSet:        ackSet,
		ConsumerEpoch: consumerEpoch,
	}
	if redeliveryCount != 0 {
		m.RedeliveryCount = proto.Uint32(redeliveryCount)
	}
	return &pulsarwire.BaseCommand{Type: pulsarwire.BaseCommand_MESSAGE.Enum(), Message: m}
}

// NewCloseProducer tells a client to drop a producer; a non-empty
// assignedURL (and assignedURLTLS) sends it straight to the new owner.
func NewCloseProducer(producerID, requestID uint64, assignedURL, assignedURLTLS string) *pulsarwire.BaseCommand {
	c := &pulsarwire.CommandCloseProducer{
		ProducerId: proto.Uint64(producerID),
		RequestId:  proto.Uint64(requestID),
	}
	if assignedURL != "" {
		c.AssignedBrokerServiceUrl = proto.String(assignedURL)
	}
	if assignedURLTLS != "" {
		c.AssignedBrokerServiceUrlTls = proto.String(assignedURLTLS)
	}
	return &pulsarwire.BaseCommand{Type: pulsarwire.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: c}
}

// NewCloseConsumer tells a client to drop a consumer (and resubscribe).
func NewCloseConsumer(consumerID, requestID uint64, assignedURL, assignedURLTLS string) *pulsarwire.BaseCommand {
	c := &pulsarwire.CommandCloseConsumer{
		ConsumerId: proto.Uint64(consumerID),
		RequestId:  proto.Uint64(requestID),
	}
	if assignedURL != "" {
		c.AssignedBrokerServiceUrl = proto.String(assignedURL)
	}
	if assignedURLTLS != "" {
		c.AssignedBrokerServiceUrlTls = proto.String(assignedURLTLS)
	}
	return &pulsarwire.BaseCommand{Type: pulsarwire.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: c}
}

// NewActiveConsumerChange tells a Failover consumer whether it is active.
func NewActiveConsumerChange(consumerID uint64, active bool) *pulsarwire.BaseCommand {
	return &pulsarwire.BaseCommand{
		Type: pulsarwire.BaseCommand_ACTIVE_CONSUMER_CHANGE.Enum(),
		ActiveConsumerChange: &pulsarwire.CommandActiveConsumerChange{
			ConsumerId: proto.Uint64(consumerID),
			IsActive:   proto.Bool(active),
		},
	}
}

// NewAckResponse answers an ACK that carried a request_id. A nil err means
// success (no error field, which is how clients recognise success).
func NewAckResponse(consumerID, requestID uint64, txnMost, txnLeast uint64, err error) *pulsarwire.BaseCommand {
	r := &pulsarwire.CommandAckResponse{
		ConsumerId: proto.Uint64(consumerID),
		RequestId:  proto.Uint64(requestID),
	}
	if txnMost != 0 || txnLeast != 0 {
		r.TxnidMostBits = proto.Uint64(txnMost)
		r.TxnidLeastBits = proto.Uint64(txnLeast)
	}
	if err != nil {
		code, msg := ServerErrorOf(err)
		r.Error = code.Enum()
		r.Message = proto.String(msg)
	}
	return &pulsarwire.BaseCommand{Type: pulsarwire.BaseCommand_ACK_RESPONSE.Enum(), AckResponse: r}
}

// NewTopicMigrated tells a client that the topic of its producer or
// consumer (resourceID) moved to another cluster, reached at brokerURL or
// brokerURLTLS (PIP-188): the client looks the topic up there when it
// reconnects.
func NewTopicMigrated(resourceID uint64, consumer bool, brokerURL, brokerURLTLS string) *pulsarwire.BaseCommand {
	typ := pulsarwire.CommandTopicMigrated_Producer
	if consumer {
		typ = pulsarwire.CommandTopicMigrated_Consumer
	}
	c := &pulsarwire.CommandTopicMigrated{ResourceId: proto.Uint64(resourceID), ResourceType: typ.Enum()}
	if brokerURL != "" {
		c.BrokerServiceUrl = proto.String(brokerURL)
	}
	if brokerURLTLS != "" {
		c.BrokerServiceUrlTls = proto.String(brokerURLTLS)
	}
	return &pulsarwire.BaseCommand{Type: pulsarwire.BaseCommand_TOPIC_MIGRATED.Enum(), TopicMigrated: c}
}
