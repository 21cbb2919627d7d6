package sqlstore

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"

	"github.com/magnetar-dev/magnetar/controlplane/store"
)

// Page tokens are base64url (no padding) of 17 bytes:
//
//	[0]     version, 1
//	[1:9]   the last returned Seq, big-endian
//	[9:17]  the first 8 bytes of SHA-256 over the query's identity
//
// The identity is the query's fields except the page size (AIP-158 lets a
// client change the page size between pages), each length-prefixed. A token
// presented with a different query, or not issued by this package, is
// store.ErrInvalidPageToken.
const (
	tokenVersion = 1
	tokenLen     = 17
)

func queryHash(fields ...string) [8]byte {
	h := sha256.New()
	var n [4]byte
	for _, f := range fields {
		binary.BigEndian.PutUint32(n[:], uint32(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	var sum [sha256.Size]byte
	var out [8]byte
	copy(out[:], h.Sum(sum[:0]))
	return out
}

func encodeToken(lastSeq int64, hash [8]byte) string {
	var b [tokenLen]byte
	b[0] = tokenVersion
	binary.BigEndian.PutUint64(b[1:9], uint64(lastSeq))
	copy(b[9:], hash[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// decodeToken returns the Seq after which the next page starts; 0 for "".
func decodeToken(tok string, hash [8]byte) (int64, error) {
	if tok == "" {
		return 0, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) != tokenLen || b[0] != tokenVersion {
		return 0, store.ErrInvalidPageToken
	}
	if [8]byte(b[9:]) != hash {
		return 0, fmt.Errorf("%w: it was issued for a different query", store.ErrInvalidPageToken)
	}
	seq := int64(binary.BigEndian.Uint64(b[1:9]))
	if seq <= 0 {
		return 0, store.ErrInvalidPageToken
	}
	return seq, nil
}

// Page sizes (store.ListQuery).
const (
	defaultPageSize = 50
	maxPageSize     = 1000
	// Changes: limit <= 0 means defaultChangesLimit; larger values are
	// lowered to maxChangesLimit.
	defaultChangesLimit = 1000
	maxChangesLimit     = 10000
)

func pageSize(n int) (int, error) {
	switch {
	case n < 0:
		return 0, fmt.Errorf("%w: negative page size %d", store.ErrInvalidArgument, n)
	case n == 0:
		return defaultPageSize, nil
	case n > maxPageSize:
		return maxPageSize, nil
	}
	return n, nil
}
