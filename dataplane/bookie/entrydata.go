package bookie

import (
	"encoding/binary"
	"fmt"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
)

// entryDataHeader is the size of the prefix the server stores before each
// payload: LAC (int64) and checksum (uint32), big-endian.
const entryDataHeader = 8 + 4

// appendEntryData appends the opaque storage data of one entry to dst.
// The storage copies what AddEntry is given, so the server encodes every
// entry of a connection into one reused buffer.
func appendEntryData(dst []byte, lac int64, checksum uint32, payload []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(lac))
	dst = binary.BigEndian.AppendUint32(dst, checksum)
	return append(dst, payload...)
}

// decodeEntryData splits stored data; payload aliases data.
func decodeEntryData(data []byte) (lac int64, checksum uint32, payload []byte, err error) {
	if len(data) < entryDataHeader {
		return 0, 0, nil, fmt.Errorf("%w: stored entry of %d bytes", wire.ErrIO, len(data))
	}
	return int64(binary.BigEndian.Uint64(data)), binary.BigEndian.Uint32(data[8:]), data[entryDataHeader:], nil
}
