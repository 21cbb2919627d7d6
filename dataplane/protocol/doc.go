// Package protocol is the framing codec of the Apache Pulsar binary protocol
// as the Magnetar broker speaks it: reading and writing frames, the message
// header block (checksum, MessageMetadata, optional broker entry metadata),
// batch payloads, builders for common commands, and the one table between
// broker errors and the protocol's ServerError codes. The message types
// themselves are generated in api/pulsarwire.
//
// It is pure: no sockets, goroutines or clocks; the broker's connection
// handler (one goroutine per connection reading, one writing) owns the
// io.Reader / bufio.Writer it passes in.
//
// # Frame format
//
// All integers are big-endian. A simple command is
//
//	[totalSize u32][cmdSize u32][BaseCommand: cmdSize bytes]
//
// where totalSize counts every byte after itself (cmdSize + 4 for a simple
// command). SEND (client to broker) and MESSAGE (broker to client) are
// followed, inside the same totalSize, by the message's headers and payload:
//
//	[totalSize u32][cmdSize u32][BaseCommand]
//	  ([0x0e02 u16][brokerEntryMetadataSize u32][BrokerEntryMetadata])   MESSAGE only, optional
//	  [0x0e01 u16][crc32c u32][metadataSize u32][MessageMetadata][payload]
//
// The CRC32C (Castagnoli) covers metadataSize through the end of the payload.
// The broker entry metadata block is sent only to clients that announced
// FeatureFlags.supports_broker_entry_metadata, and is never covered by the
// checksum. In this package "headers and payload" means the bytes from the
// first magic number to the end of the frame: for SEND they are exactly what
// the broker stores as the ledger entry, and WritePayloadCommand forwards a
// stored entry unchanged in a MESSAGE.
//
// A batch entry (MessageMetadata.num_messages_in_batch present, even when 1)
// has as payload, once decompressed, a sequence of
//
//	[singleMetadataSize u32][SingleMessageMetadata][payload_size bytes]
//
// # Limits and errors
//
// Reader rejects a frame whose totalSize exceeds its maximum
// (DefaultMaxFrameSize: the 5 MiB default max message size plus 10 KiB of
// headroom, as clients apply it) before allocating anything for it. Every
// malformed input yields an error wrapping one of this package's sentinels
// (ErrFrameTooLarge, ErrTruncatedFrame, ErrMalformedFrame, ErrBadCommand,
// ErrBadMagic, ErrChecksum, ErrBadMetadata, ErrBadBatch, ErrCompressed);
// decoding never panics. After a Reader error other than a clean io.EOF the
// stream position is unknown and the connection must be closed.
//
// # Buffers and ownership
//
// Reader reads through its own bufio.Reader. A command is decoded straight
// from that buffer (protobuf decoding copies strings and bytes, so nothing
// aliases it). HeadersAndPayload is always a fresh slice the caller owns: it
// stays valid after later reads and can be kept as a ledger entry without a
// copy. ReadFrame returns a fresh BaseCommand; ReadFrameInto reuses the
// caller's (proto.Reset), which then must not be kept past the next call;
// it decodes a SEND of the usual shape without allocating, into storage of
// the Reader that is likewise valid only until the next call.
// WriteSendReceipt encodes the broker's per-message answer straight into the
// writer's buffer.
// ParseHeadersAndPayload returns a payload that aliases its input. Neither
// Reader nor the write helpers are safe for concurrent use; the error
// sentinels and tables are read-only.
package protocol
