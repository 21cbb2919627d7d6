package protocol

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-dev/magnetar/api/pulsarwire"
)

// errNilCommand is returned for a nil command.
var errNilCommand = errors.New("protocol: nil command")

// WriteCommand writes a simple command frame to w. It does not flush. The
// command must not change while it is written. Required fields are checked,
// so a command the peer could not decode is refused here.
func WriteCommand(w *bufio.Writer, cmd *pulsarwire.BaseCommand) error {
	return writeFrame(w, cmd, nil, nil)
}

// WritePayloadCommand writes a SEND or MESSAGE frame: the command, then a
// broker entry metadata block when brokerEntryMeta is not nil, then
// headersAndPayload unchanged (for a MESSAGE, the stored entry as the
// producer sent it; it must start with the 0x0e01 magic). It does not flush.
func WritePayloadCommand(w *bufio.Writer, cmd *pulsarwire.BaseCommand, brokerEntryMeta *pulsarwire.BrokerEntryMetadata, headersAndPayload []byte) error {
	return writeFrame(w, cmd, brokerEntryMeta, headersAndPayload)
}

func writeFrame(w *bufio.Writer, cmd *pulsarwire.BaseCommand, bem *pulsarwire.BrokerEntryMetadata, hp []byte) error {
	if cmd == nil {
		return errNilCommand
	}
	if err := proto.CheckInitialized(cmd); err != nil {
		return fmt.Errorf("protocol: encoding %v: %w", cmd.GetType(), err)
	}
	cmdSize := proto.Size(cmd)
	bemSize := 0
	if bem != nil {
		bemSize = proto.Size(bem)
	}
	total := uint64(4 + cmdSize + len(hp))
	if bem != nil {
		total += uint64(6 + bemSize)
	}
	if total > math.MaxUint32 {
		return fmt.Errorf("%w: frame of %d bytes", ErrFrameTooLarge, total)
	}

	// Encode the headers into the writer's free space to avoid a copy when
	// they fit; otherwise append grows a new slice.
	buf := w.AvailableBuffer()
	buf = binary.BigEndian.AppendUint32(buf, uint32(total))
	buf = binary.BigEndian.AppendUint32(buf, uint32(cmdSize))
	opts := proto.MarshalOptions{AllowPartial: true, UseCachedSize: true}
	buf, err := opts.MarshalAppend(buf, cmd)
	if err != nil {
		return fmt.Errorf("protocol: encoding %v: %w", cmd.GetType(), err)
	}
	if bem != nil {
		buf = binary.BigEndian.AppendUint16(buf, MagicBrokerEntryMetadata)
		buf = binary.BigEndian.AppendUint32(buf, uint32(bemSize))
		if buf, err = opts.MarshalAppend(buf, bem); err != nil {
			return fmt.Errorf("protocol: encoding broker entry metadata: %w", err)
		}
	}
	if _, err := w.Write(buf); err != nil {
		return err
	}
	if len(hp) > 0 {
		if _, err := w.Write(hp); err != nil {
			return err
		}
	}
	return nil
}

// Marshal returns a whole frame as bytes (WriteCommand or WritePayloadCommand
// into a buffer). Meant for tests, tools and one-off writes.
func Marshal(cmd *pulsarwire.BaseCommand, brokerEntryMeta *pulsarwire.BrokerEntryMetadata, headersAndPayload []byte) ([]byte, error) {
	var sb sliceWriter
	w := bufio.NewWriterSize(&sb, 512)
	if err := writeFrame(w, cmd, brokerEntryMeta, headersAndPayload); err != nil {
		return nil, err
	}
	if err := w.Flush(); err != nil {
		return nil, err
	}
	return sb.b, nil
}

type sliceWriter struct{ b []byte }

func (s *sliceWriter) Write(p []byte) (int, error) {
	s.b = append(s.b, p...)
	return len(p), nil
}

// WriteSendReceipt writes the SEND_RECEIPT frame of NewSendReceipt with the
// same arguments, byte for byte, without building the command: the broker
// answers every stored message with one, so this path allocates nothing.
// It does not flush.
func WriteSendReceipt(w *bufio.Writer, producerID, sequenceID, highestSequenceID, ledgerID, entryID uint64) error {
	_, err := w.Write(AppendSendReceipt(w.AvailableBuffer(), producerID, sequenceID, highestSequenceID, ledgerID, entryID))
	return err
}

// AppendSendReceipt appends the frame WriteSendReceipt writes to dst. Fields
// are encoded in field-number order, as the protobuf runtime marshals them.
func AppendSendReceipt(dst []byte, producerID, sequenceID, highestSequenceID, ledgerID, entryID uint64) []byte {
	// MessageIdData{ledgerId: 1, entryId: 2}
	idSize := 1 + protowire.SizeVarint(ledgerID) + 1 + protowire.SizeVarint(entryID)
	// CommandSendReceipt{producer_id: 1, sequence_id: 2, message_id: 3,
	// highest_sequence_id: 4 (only when not 0)}
	rSize := 1 + protowire.SizeVarint(producerID) + 1 + protowire.SizeVarint(sequenceID) +
		1 + protowire.SizeVarint(uint64(idSize)) + idSize
	if highestSequenceID != 0 {
		rSize += 1 + protowire.SizeVarint(highestSequenceID)
	}
	// BaseCommand{type: 1, send_receipt: 7}
	typ := uint64(pulsarwire.BaseCommand_SEND_RECEIPT)
	cmdSize := 1 + protowire.SizeVarint(typ) + 1 + protowire.SizeVarint(uint64(rSize)) + rSize

	dst = binary.BigEndian.AppendUint32(dst, uint32(4+cmdSize))
	dst = binary.BigEndian.AppendUint32(dst, uint32(cmdSize))
	dst = protowire.AppendTag(dst, 1, protowire.VarintType)
	dst = protowire.AppendVarint(dst, typ)
	dst = protowire.AppendTag(dst, 7, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(rSize))
	dst = protowire.AppendTag(dst, 1, protowire.VarintType)
	dst = protowire.AppendVarint(dst, producerID)
	dst = protowire.AppendTag(dst, 2, protowire.VarintType)
	dst = protowire.AppendVarint(dst, sequenceID)
	dst = protowire.AppendTag(dst, 3, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(idSize))
	dst = protowire.AppendTag(dst, 1, protowire.VarintType)
	dst = protowire.AppendVarint(dst, ledgerID)
	dst = protowire.AppendTag(dst, 2, protowire.VarintType)
	dst = protowire.AppendVarint(dst, entryID)
	if highestSequenceID != 0 {
		dst = protowire.AppendTag(dst, 4, protowire.VarintType)
		dst = protowire.AppendVarint(dst, highestSequenceID)
	}
	return dst
}
