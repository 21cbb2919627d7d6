package ledger

import (
	"fmt"
	"strings"
)

// Metadata-store layout (see doc.go).
const (
	infoRoot   = "/managed-ledgers"        // /managed-ledgers/<esc(name)> -> mlInfo JSON
	cursorRoot = "/managed-ledger-cursors" // /managed-ledger-cursors/<esc(name)>/<esc(cursor)> -> cursorInfo JSON
)

// escapeName maps a name to one key segment: bytes in [A-Za-z0-9._-] are
// kept, every other byte (including '/' and '%') becomes %XX with upper-case
// hex. The mapping is injective, so distinct names never share a key.
func escapeName(s string) string { return escapedKey("", s) }

// escapedKey returns prefix followed by escapeName(name), or by
// "/"+escapeName(name) when prefix is not empty, built in one allocation:
// every topic creation builds its managed ledger's key.
func escapedKey(prefix, name string) string {
	n := len(prefix)
	if prefix != "" {
		n++
	}
	for i := 0; i < len(name); i++ {
		if keptInName(name[i]) {
			n++
		} else {
			n += 3
		}
	}
	var b strings.Builder
	b.Grow(n)
	if prefix != "" {
		b.WriteString(prefix)
		b.WriteByte('/')
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if keptInName(c) {
			b.WriteByte(c)
			continue
		}
		const hex = "0123456789ABCDEF"
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xf])
	}
	return b.String()
}

func keptInName(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// unescapeName inverts escapeName.
func unescapeName(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("%w: bad escape in %q", ErrInvalidArgument, s)
		}
		var v byte
		for _, h := range []byte{s[i+1], s[i+2]} {
			v <<= 4
			switch {
			case h >= '0' && h <= '9':
				v |= h - '0'
			case h >= 'A' && h <= 'F':
				v |= h - 'A' + 10
			default:
				return "", fmt.Errorf("%w: bad escape in %q", ErrInvalidArgument, s)
			}
		}
		b.WriteByte(v)
		i += 2
	}
	return b.String(), nil
}

func checkName(kind, name string) error {
	if name == "" || len(name) > 1024 {
		return fmt.Errorf("%w: %s name must be 1..1024 bytes", ErrInvalidArgument, kind)
	}
	return nil
}

func infoKey(name string) string        { return escapedKey(infoRoot, name) }
func cursorsParent(name string) string  { return escapedKey(cursorRoot, name) }
func cursorKey(name, cur string) string { return escapedKey(cursorsParent(name), cur) }

// mlInfo is the JSON record of a managed ledger.
type mlInfo struct {
	Ledgers            []LedgerInfo      `json:"ledgers"`
	TerminatedPosition *Position         `json:"terminatedPosition,omitempty"`
	Properties         map[string]string `json:"properties,omitempty"`
	// Created is when the record was created, Unix ms (the topic's
	// creation time in its stats); absent from records of earlier
	// versions.
	Created int64 `json:"createdMs,omitempty"`
}

// ackRange is a run of individually acknowledged entries of one ledger,
// From..To inclusive.
type ackRange struct {
	LedgerID int64 `json:"ledgerId"`
	From     int64 `json:"from"`
	To       int64 `json:"to"`
}

// batchAck records the acknowledged indexes of a partly acknowledged batch
// entry: bit i of Acked (word i/64, bit i%64) is set when index i is.
type batchAck struct {
	Pos   Position `json:"pos"`
	Size  int      `json:"size"`
	Acked []uint64 `json:"acked"`
}

// cursorInfo is the JSON record of a durable cursor.
type cursorInfo struct {
	MarkDelete          Position          `json:"markDelete"`
	IndividuallyDeleted []ackRange        `json:"individuallyDeleted,omitempty"`
	BatchAcks           []batchAck        `json:"batchAcks,omitempty"`
	Properties          map[string]string `json:"properties,omitempty"`
	LastActive          int64             `json:"lastActive"` // Unix milliseconds
}
