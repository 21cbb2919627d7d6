package bookie

import (
	"encoding/binary"
	"fmt"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
)

// entryDataHeader is the size of the prefix the server stores before each
// payload: LAC (int64) and checksum (uint32), big-endian.
const entryDataHeader = 8 + 4

// encodeEntryData builds the opaque storage data of one entry in a new
// buffer (the storage may keep it).
func encodeEntryData(lac int64, checksum uint32, payload []byte) []byte {
	b := make([]byte, entryDataHeader+len(payload))
	binary.BigEndian.PutUint64(b, uint64(lac))
	binary.BigEndian.PutUint32(b[8:], checksum)
	copy(b[entryDataHeader:], payload)
	return b
}

// decodeEntryData splits stored data; payload aliases data.
func decodeEntryData(data []byte) (lac int64, checksum uint32, payload []byte, err error) {
	if len(data) < entryDataHeader {
		return 0, 0, nil, fmt.Errorf("%w: stored entry of %d bytes", wire.ErrIO, len(data))
	}
	return int64(binary.BigEndian.Uint64(data)), binary.BigEndian.Uint32(data[8:]), data[entryDataHeader:], nil
}
