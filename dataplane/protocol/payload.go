package protocol

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-dev/magnetar/api/pulsarwire"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checksummedHeaderSize is magic u16 + crc u32 + metadataSize u32.
const checksummedHeaderSize = 2 + 4 + 4

// SplitBrokerEntryMetadata splits an optional broker entry metadata block off
// the front of headers and payload. Without one it returns nil and b
// unchanged. rest aliases b.
func SplitBrokerEntryMetadata(b []byte) (bem *pulsarwire.BrokerEntryMetadata, rest []byte, err error) {
	if len(b) < 2 || binary.BigEndian.Uint16(b) != MagicBrokerEntryMetadata {
		return nil, b, nil
	}
	if len(b) < 6 {
		return nil, nil, fmt.Errorf("%w: broker entry metadata size cut off", ErrBadMetadata)
	}
	n := binary.BigEndian.Uint32(b[2:6])
	if uint64(n) > uint64(len(b)-6) {
		return nil, nil, fmt.Errorf("%w: broker entry metadata of %d bytes in %d", ErrBadMetadata, n, len(b)-6)
	}
	bem = new(pulsarwire.BrokerEntryMetadata)
	if err := proto.Unmarshal(b[6:6+n], bem); err != nil {
		return nil, nil, fmt.Errorf("%w: broker entry metadata: %w", ErrBadMetadata, err)
	}
	return bem, b[6+n:], nil
}

// skipBrokerEntryMetadata is SplitBrokerEntryMetadata without decoding.
func skipBrokerEntryMetadata(b []byte) ([]byte, error) {
	if len(b) < 2 || binary.BigEndian.Uint16(b) != MagicBrokerEntryMetadata {
		return b, nil
	}
	if len(b) < 6 {
		return nil, fmt.Errorf("%w: broker entry metadata size cut off", ErrBadMetadata)
	}
	n := binary.BigEndian.Uint32(b[2:6])
	if uint64(n) > uint64(len(b)-6) {
		return nil, fmt.Errorf("%w: broker entry metadata of %d bytes in %d", ErrBadMetadata, n, len(b)-6)
	}
	return b[6+n:], nil
}

// VerifyChecksum checks the magic number and CRC32C of headers and payload
// (a broker entry metadata block in front is skipped). It returns an error
// wrapping ErrBadMagic, ErrChecksum or ErrBadMetadata (too short).
func VerifyChecksum(b []byte) error {
	b, err := skipBrokerEntryMetadata(b)
	if err != nil {
		return err
	}
	_, err = verify(b)
	return err
}

// verify checks magic and checksum of b (starting at the magic) and returns
// the bytes after the checksum: [metadataSize][metadata][payload].
func verify(b []byte) ([]byte, error) {
	if len(b) < checksummedHeaderSize {
		return nil, fmt.Errorf("%w: headers of %d bytes, need at least %d", ErrBadMetadata, len(b), checksummedHeaderSize)
	}
	if m := binary.BigEndian.Uint16(b); m != MagicChecksum {
		return nil, fmt.Errorf("%w: %#04x", ErrBadMagic, m)
	}
	want := binary.BigEndian.Uint32(b[2:6])
	if got := crc32.Checksum(b[6:], castagnoli); got != want {
		return nil, fmt.Errorf("%w: computed %#08x, frame says %#08x", ErrChecksum, got, want)
	}
	return b[6:], nil
}

// ParseHeadersAndPayload verifies and decodes a message's headers and
// payload: an optional broker entry metadata block (skipped), the magic
// number, the CRC32C, and the MessageMetadata. payload aliases b. Errors wrap
// ErrBadMagic, ErrChecksum or ErrBadMetadata.
func ParseHeadersAndPayload(b []byte) (meta *pulsarwire.MessageMetadata, payload []byte, err error) {
	meta = new(pulsarwire.MessageMetadata)
	payload, err = ParseHeadersAndPayloadInto(b, meta)
	if err != nil {
		return nil, nil, err
	}
	return meta, payload, nil
}

// ParseHeadersAndPayloadInto is ParseHeadersAndPayload decoding into meta,
// which is reset first, to save an allocation in loops.
func ParseHeadersAndPayloadInto(b []byte, meta *pulsarwire.MessageMetadata) (payload []byte, err error) {
	b, err = skipBrokerEntryMetadata(b)
	if err != nil {
		return nil, err
	}
	b, err = verify(b)
	if err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(b)
	b = b[4:]
	if uint64(n) > uint64(len(b)) {
		return nil, fmt.Errorf("%w: metadata of %d bytes in %d", ErrBadMetadata, n, len(b))
	}
	proto.Reset(meta)
	if err := proto.Unmarshal(b[:n], meta); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadMetadata, err)
	}
	return b[n:], nil
}

// AppendHeadersAndPayload appends [0x0e01][crc32c][metadataSize][meta]
// [payload] to dst and returns the extended slice: the bytes a producer puts
// after a SEND command and the broker stores as an entry. Required fields of
// meta are not checked.
func AppendHeadersAndPayload(dst []byte, meta *pulsarwire.MessageMetadata, payload []byte) ([]byte, error) {
	start := len(dst)
	dst = binary.BigEndian.AppendUint16(dst, MagicChecksum)
	dst = append(dst, 0, 0, 0, 0) // checksum, filled in below
	size := proto.MarshalOptions{AllowPartial: true}.Size(meta)
	dst = binary.BigEndian.AppendUint32(dst, uint32(size))
	var err error
	dst, err = proto.MarshalOptions{AllowPartial: true, UseCachedSize: true}.MarshalAppend(dst, meta)
	if err != nil {
		return dst[:start], fmt.Errorf("protocol: encoding message metadata: %w", err)
	}
	dst = append(dst, payload...)
	binary.BigEndian.PutUint32(dst[start+2:], crc32.Checksum(dst[start+6:], castagnoli))
	return dst, nil
}

// AppendBrokerEntryMetadata appends [0x0e02][size][bem] to dst.
func AppendBrokerEntryMetadata(dst []byte, bem *pulsarwire.BrokerEntryMetadata) ([]byte, error) {
	start := len(dst)
	dst = binary.BigEndian.AppendUint16(dst, MagicBrokerEntryMetadata)
	dst = binary.BigEndian.AppendUint32(dst, uint32(proto.Size(bem)))
	dst, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(dst, bem)
	if err != nil {
		return dst[:start], fmt.Errorf("protocol: encoding broker entry metadata: %w", err)
	}
	return dst, nil
}

// NumMessages returns how many messages an entry with this metadata holds:
// num_messages_in_batch when present, else 1.
func NumMessages(meta *pulsarwire.MessageMetadata) int {
	if meta.NumMessagesInBatch != nil {
		return int(meta.GetNumMessagesInBatch())
	}
	return 1
}

// IsBatch reports whether an entry with this metadata is a batch, which is
// exactly when num_messages_in_batch is present (even if 1).
func IsBatch(meta *pulsarwire.MessageMetadata) bool {
	return meta.NumMessagesInBatch != nil
}
