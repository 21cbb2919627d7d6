package protocol

import (
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-dev/magnetar/api/pulsarwire"
)

// SingleMessage is one message of a batch.
type SingleMessage struct {
	Meta *pulsarwire.SingleMessageMetadata
	// Payload aliases the batch payload passed to ParseBatch.
	Payload []byte
}

// ParseBatch splits the payload of a batch entry into its messages. It needs
// an uncompressed payload: with a compression other than NONE it returns
// ErrCompressed (counts and keys the broker needs are in meta, or can be
// skipped). A non-batch entry yields ErrNotBatch; a payload that does not
// hold exactly num_messages_in_batch well-formed messages yields ErrBadBatch.
func ParseBatch(meta *pulsarwire.MessageMetadata, payload []byte) ([]SingleMessage, error) {
	if !IsBatch(meta) {
		return nil, ErrNotBatch
	}
	if c := meta.GetCompression(); c != pulsarwire.CompressionType_NONE {
		return nil, fmt.Errorf("%w: %v", ErrCompressed, c)
	}
	n := int(meta.GetNumMessagesInBatch())
	if n < 0 {
		return nil, fmt.Errorf("%w: %d messages", ErrBadBatch, n)
	}
	// Each message takes at least 4 bytes of size prefix plus a
	// payload_size field, so a hostile count cannot force a big allocation.
	out := make([]SingleMessage, 0, min(n, len(payload)/6+1))
	for i := 0; len(payload) > 0; i++ {
		if i == n {
			return nil, fmt.Errorf("%w: %d trailing bytes after %d messages", ErrBadBatch, len(payload), n)
		}
		if len(payload) < 4 {
			return nil, fmt.Errorf("%w: message %d: metadata size cut off", ErrBadBatch, i)
		}
		size := binary.BigEndian.Uint32(payload)
		payload = payload[4:]
		if uint64(size) > uint64(len(payload)) {
			return nil, fmt.Errorf("%w: message %d: metadata of %d bytes in %d", ErrBadBatch, i, size, len(payload))
		}
		smm := new(pulsarwire.SingleMessageMetadata)
		if err := proto.Unmarshal(payload[:size], smm); err != nil {
			return nil, fmt.Errorf("%w: message %d: %w", ErrBadBatch, i, err)
		}
		payload = payload[size:]
		ps := smm.GetPayloadSize()
		if ps < 0 || int64(ps) > int64(len(payload)) {
			return nil, fmt.Errorf("%w: message %d: payload of %d bytes in %d", ErrBadBatch, i, ps, len(payload))
		}
		out = append(out, SingleMessage{Meta: smm, Payload: payload[:ps:ps]})
		payload = payload[ps:]
	}
	if len(out) != n {
		return nil, fmt.Errorf("%w: %d messages, metadata says %d", ErrBadBatch, len(out), n)
	}
	return out, nil
}

// AppendBatchMessage appends one message of a batch payload,
// [size u32][smm][payload], to dst. smm.payload_size is set to len(payload).
func AppendBatchMessage(dst []byte, smm *pulsarwire.SingleMessageMetadata, payload []byte) ([]byte, error) {
	smm.PayloadSize = proto.Int32(int32(len(payload)))
	start := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, uint32(proto.Size(smm)))
	dst, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(dst, smm)
	if err != nil {
		return dst[:start], fmt.Errorf("protocol: encoding single message metadata: %w", err)
	}
	return append(dst, payload...), nil
}
