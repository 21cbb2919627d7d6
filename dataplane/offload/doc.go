// Package offload is tiered storage on S3: it copies closed bookie ledgers
// of a managed ledger to an object store and reads them back
// (Apache Pulsar's tiered storage, PIP-17). S3 implements ledger.Offloader
// with the AWS SDK for Go v2, for AWS S3 and S3-compatible servers.
//
// The managed ledger (package ledger) decides what to offload and when
// (OffloadPolicy: threshold, age, deletion lag; manual OffloadPrefix),
// records each copy in its metadata record by compare-and-set, deletes the
// bookie copy after the deletion lag, and routes reads of a ledger whose
// bookie copy is gone here. This package only moves bytes: Offload,
// ReadOffloaded, DeleteOffloaded. It is safe for concurrent use; Close
// stops its read-ahead goroutines (the only goroutines it owns besides the
// one uploading parts inside an Offload call, which that call waits for).
//
// # Objects
//
// A ledger's copy is two objects in the bucket, named after the copy's
// uid (written to the record before the copy starts) and the ledger id:
//
//	<prefix><uid>-ledger-<id>          data object, by multipart upload
//	<prefix><uid>-ledger-<id>-index    index object, written once the data object is complete
//
// A copy whose index object exists is complete; only then does the record
// mark it complete, so a reader never meets a partial copy. A failed or
// interrupted copy leaves at most an unfinished multipart upload and
// possibly the data object: DeleteOffloaded aborts every multipart upload
// of the data key and deletes both objects (the managed ledger does this
// when it finds an unfinished copy in its record, at the next pass after
// an open). A bucket lifecycle rule that expires incomplete multipart
// uploads is still advisable for uploads a lost record no longer names.
//
// # Data object
//
// A sequence of blocks, one multipart part each. A block ends with the
// entry that brings it to MaxBlockSize or more, so every block but the last
// is at least MaxBlockSize (S3's minimum part is 5 MiB; the default block
// is 64 MiB, as Pulsar's) and at most one entry more. All integers are
// big-endian. A block:
//
//	offset size
//	0      4    magic 0x4D474F42 ("MGOB")
//	4      2    format version (1)
//	6      2    header length (32)
//	8      4    block length, header included
//	12     4    entry count
//	16     8    first entry id
//	24     4    reserved (0)
//	28     4    CRC32C (Castagnoli) of bytes 0..27
//	32     ...  entries
//
// and each entry, ids consecutive from the block's first:
//
//	0      4    payload length n
//	4      8    entry id
//	12     4    CRC32C of the payload
//	16     n    payload (the bookie entry's data)
//
// There is no padding between entries or blocks.
//
// # Index object
//
//	0      4    magic 0x4D474F49 ("MGOI")
//	4      2    format version (1)
//	6      2    header length (44)
//	8      8    ledger id
//	16     8    entry count E
//	24     8    data object length
//	32     4    configured block size
//	36     4    block count B
//	40     4    metadata length M
//	44     M    ledger metadata, JSON object of strings (managed ledger, entries, size, close time)
//	...    24*B blocks: first entry id (8), part number (4), offset in the data object (8), length (4)
//	...    8*E  offset in the data object of each entry's record
//	...    4    CRC32C of everything before
//
// Blocks are contiguous from offset 0 and cover the whole data object;
// entry offsets strictly increase. decodeIndex checks all of it.
//
// # Reads
//
// ReadOffloaded locates entries first..last through the index (cached,
// up to 256 ledgers) and reads the byte span with range GETs of
// ReadBufferSize (default 1 MiB), aligned to multiples of that size so
// that neighbouring reads share them. The buffers are kept in an LRU cache
// of CacheSize bytes, shared by every ledger; concurrent reads of one
// buffer share one GET. When a read starts where the previous read of the
// same object ended, the next ReadAhead buffers are fetched in the
// background. Each entry's id and CRC32C are checked before it is
// returned.
//
// # Failures
//
// Every request is tried up to Attempts times, each attempt bounded by
// RequestTimeout, with exponential backoff from RetryBackoff: transport
// errors (refused, reset or cut connections, timeouts) and 5xx/408/429
// answers are retried, other client errors are not. A part that fails is
// uploaded again within the same multipart upload (the upload resumes; the
// parts already sent stay); a copy that still fails is aborted and the
// managed ledger tries again later with a new uid.
package offload
