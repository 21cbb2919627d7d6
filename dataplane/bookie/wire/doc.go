// Package wire is the framed, pipelined protocol between ledger clients and
// bookies: the frame format, its encoder and decoder, the status codes, and
// the client side (Conn, Pool). The bookie server (package bookie) uses the
// codec directly; the ledger client uses Conn through a Pool.
//
// # Frame format
//
// All integers are big-endian. A frame is:
//
//	offset  size  field
//	0       4     length: bytes after this field (12 + len(body) + 4)
//	4       1     version: ProtocolVersion (1); others are rejected
//	5       1     op: request op, or request op | 0x80 in a response
//	6       2     flags: per op (below); unknown bits are rejected
//	8       8     request id: chosen by the client, echoed in the response
//	16      n     body: per op (below)
//	16+n    4     CRC32C (Castagnoli) of bytes [4, 16+n): version..body
//
// A frame is at least MinFrameSize (20) bytes and at most the configured
// maximum, length prefix included (DefaultMaxFrameSize, 6 MiB: a 5 MiB
// entry plus headroom). The length is checked before anything is
// allocated.
//
// # Requests
//
//	op                 flags              body
//	0x01 HANDSHAKE     0                  (empty)
//	0x02 ADD           bit0 recovery      ledger i64, entry i64, lac i64, checksum u32, payload (rest)
//	0x03 READ          bit0 fence ledger  ledger i64, entry i64
//	0x04 READ_LAC      0                  ledger i64
//	0x05 FENCE         0                  ledger i64
//	0x06 DELETE_LEDGER 0                  ledger i64
//
// The ADD checksum is Checksum(ledger, entry, lac, payload); the bookie
// verifies it before storing and returns it with every READ.
//
// # Responses
//
// A response's op is the request's op | 0x80, its flags are 0 and its body
// starts with a status u16. A status other than StatusOK is followed only by
// a UTF-8 message (the rest of the body, at most MaxMessageLen bytes). With
// StatusOK:
//
//	HANDSHAKE      version u8, bookie id (rest, at most 255 bytes)
//	ADD            ledger i64, entry i64
//	READ           ledger i64, entry i64, lac i64, checksum u32, payload (rest)
//	READ_LAC       lac i64, last entry i64
//	FENCE          lac i64 (-1: the bookie holds no entry of the ledger)
//	DELETE_LEDGER  (nothing)
//
// Op 0xFF (OpError | 0x80) answers a request with an unknown op (with its
// request id), or reports a connection-level error with request id 0 (bad
// length, bad CRC, unknown version, oversize frame): the server sends it and
// closes the connection. Status codes map 1:1 to this package's sentinel
// errors (statusTable in status.go); an unknown status decodes as
// ErrUnsupported.
//
// # Connection
//
// The client's first frame is HANDSHAKE (version in the frame header); the
// bookie answers with its protocol version and id, or closes the connection.
// Then requests are pipelined: the client may send any number before
// reading, and responses come back in any order (an ADD is answered when its
// entry is durable). A malformed frame makes the server reply with an error
// frame and close that connection only.
//
// # TLS
//
// With TLS (ClientConfig.TLS on the client, bookie.Config.TLS on the
// server) the same frames run inside a TLS session on the same port: the
// connection starts with the TLS handshake, then the HANDSHAKE frame. A
// bookie serves either plain TCP or TLS, never both: a plain client's
// first frame gets a TLS alert and a closed connection, a TLS client's
// ClientHello gets an error frame (its length field is over any frame
// size) and a closed connection.
//
// # Buffers and concurrency
//
// FrameReader reuses one buffer: a decoded frame's Body, and a decoded
// request's or response's Payload, alias it until the next ReadFrame.
// FrameWriter encodes into a bufio.Writer without allocating; the owner
// flushes. Neither is safe for concurrent use.
//
// Conn and Pool are safe for concurrent use. A Conn owns three goroutines
// (reader, writer, timeout sweeper) that end when it breaks or closes; Add
// callbacks run on them and must not block. Requests are written in call
// order by the writer goroutine, which flushes when its queue drains, so a
// burst of pipelined adds costs few syscalls. Read returns a payload the
// caller owns, after verifying the entry checksum.
package wire
