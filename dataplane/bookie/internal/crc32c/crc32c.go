// Package crc32c computes CRC-32C (Castagnoli) for the bookie's formats.
//
// It exists for one reason: hash/crc32.Update dispatches through a function
// value, so escape analysis cannot prove that its argument does not escape,
// and a header built in a stack array and checksummed with it is moved to
// the heap: one allocation per entry on every hop of the add path. Headers
// go through Small, a table loop whose argument stays on the stack; payloads
// (already on the heap) through Update, which uses the CPU's CRC
// instruction.
package crc32c

import "hash/crc32"

var table = crc32.MakeTable(crc32.Castagnoli)

// Small returns the CRC-32C of p appended to data whose CRC-32C is crc (0
// for none), one byte at a time: meant for headers of a few dozen bytes,
// which it does not make escape.
func Small(crc uint32, p []byte) uint32 {
	crc = ^crc
	for _, b := range p {
		crc = table[byte(crc)^b] ^ crc>>8
	}
	return ^crc
}

// Update is crc32.Update with the Castagnoli table, for large buffers.
func Update(crc uint32, p []byte) uint32 { return crc32.Update(crc, table, p) }

// Checksum is crc32.Checksum with the Castagnoli table, for large buffers.
func Checksum(p []byte) uint32 { return crc32.Checksum(p, table) }
