package protocol

import "encoding/binary"

// PayloadSize is the length of the payload of a message's headers and
// payload b (what AppendHeadersAndPayload wrote, with or without a broker
// entry metadata block in front; Pulsar's frames always carry the checksum), without decoding the metadata or checking
// the checksum. For a batch it is the batch's payload (its messages with
// their single-message metadata). Malformed input yields len(b).
func PayloadSize(b []byte) int {
	rest, err := skipBrokerEntryMetadata(b)
	if err != nil || len(rest) < checksummedHeaderSize {
		return len(b)
	}
	if binary.BigEndian.Uint16(rest) != MagicChecksum {
		return len(b)
	}
	after := rest[6:] // after magic and checksum: [metadataSize][metadata][payload]
	n := binary.BigEndian.Uint32(after)
	if uint64(n) > uint64(len(after)-4) {
		return len(b)
	}
	return len(after) - 4 - int(n)
}
