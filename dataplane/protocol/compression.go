package protocol

import (
	"bytes"
	"compress/zlib"
	"fmt"
	"io"
	"sync"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/magnetar-dev/magnetar/api/pulsarwire"
)

// MaxUncompressedSize bounds the payload Decompress produces, so that a
// hostile uncompressed_size cannot force a large allocation.
const MaxUncompressedSize = 64 << 20

var zstdDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(MaxUncompressedSize))
})

// Decompress returns the payload of an entry with metadata meta
// uncompressed: the payload itself without compression, else the codec's
// output, which must be uncompressed_size bytes. The codecs are those of
// Pulsar's clients: LZ4 raw blocks, zlib streams, zstd frames and Snappy
// blocks. It fails with ErrCompressed for an unknown codec and ErrBadBatch
// for a payload that does not decompress.
func Decompress(meta *pulsarwire.MessageMetadata, payload []byte) ([]byte, error) {
	c := meta.GetCompression()
	if c == pulsarwire.CompressionType_NONE {
		return payload, nil
	}
	size := int(meta.GetUncompressedSize())
	if size > MaxUncompressedSize {
		return nil, fmt.Errorf("%w: uncompressed size %d", ErrBadBatch, size)
	}
	var out []byte
	var err error
	switch c {
	case pulsarwire.CompressionType_LZ4:
		out = make([]byte, size)
		var n int
		n, err = lz4.UncompressBlock(payload, out)
		out = out[:max(n, 0)]
	case pulsarwire.CompressionType_ZLIB:
		var r io.ReadCloser
		if r, err = zlib.NewReader(bytes.NewReader(payload)); err == nil {
			out, err = io.ReadAll(io.LimitReader(r, int64(size)+1))
			r.Close()
		}
	case pulsarwire.CompressionType_ZSTD:
		var d *zstd.Decoder
		if d, err = zstdDecoder(); err == nil {
			out, err = d.DecodeAll(payload, make([]byte, 0, size))
		}
	case pulsarwire.CompressionType_SNAPPY:
		var n int
		if n, err = snappy.DecodedLen(payload); err == nil && n != size {
			err = fmt.Errorf("snappy length %d", n)
		}
		if err == nil {
			out, err = snappy.Decode(make([]byte, size), payload)
		}
	default:
		return nil, fmt.Errorf("%w: %v", ErrCompressed, c)
	}
	if err == nil && len(out) != size {
		err = fmt.Errorf("%d bytes, uncompressed_size %d", len(out), size)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v payload: %v", ErrBadBatch, c, err)
	}
	return out, nil
}
