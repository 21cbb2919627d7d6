package protocol_test

import (
	"bytes"
	"compress/zlib"
	"errors"
	"testing"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-dev/magnetar/api/pulsarwire"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
)

func compressWith(t *testing.T, c pulsarwire.CompressionType, plain []byte) []byte {
	t.Helper()
	switch c {
	case pulsarwire.CompressionType_LZ4:
		out := make([]byte, lz4.CompressBlockBound(len(plain)))
		n, err := lz4.CompressBlock(plain, out, nil)
		if err != nil {
			t.Fatal(err)
		}
		return out[:n]
	case pulsarwire.CompressionType_ZLIB:
		var b bytes.Buffer
		w := zlib.NewWriter(&b)
		w.Write(plain)
		w.Close()
		return b.Bytes()
	case pulsarwire.CompressionType_ZSTD:
		enc, err := zstd.NewWriter(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer enc.Close()
		return enc.EncodeAll(plain, nil)
	case pulsarwire.CompressionType_SNAPPY:
		return snappy.Encode(nil, plain)
	}
	return plain
}

func TestDecompress(t *testing.T) {
	plain := bytes.Repeat([]byte("compacted topics keep the latest value of each key. "), 40)
	for _, c := range []pulsarwire.CompressionType{
		pulsarwire.CompressionType_NONE, pulsarwire.CompressionType_LZ4, pulsarwire.CompressionType_ZLIB,
		pulsarwire.CompressionType_ZSTD, pulsarwire.CompressionType_SNAPPY,
	} {
		t.Run(c.String(), func(t *testing.T) {
			meta := &pulsarwire.MessageMetadata{Compression: c.Enum(), UncompressedSize: proto.Uint32(uint32(len(plain)))}
			got, err := protocol.Decompress(meta, compressWith(t, c, plain))
			if err != nil || !bytes.Equal(got, plain) {
				t.Fatalf("Decompress: %d bytes, %v", len(got), err)
			}
			if c == pulsarwire.CompressionType_NONE {
				return
			}
			meta.UncompressedSize = proto.Uint32(uint32(len(plain) - 1))
			if _, err := protocol.Decompress(meta, compressWith(t, c, plain)); !errors.Is(err, protocol.ErrBadBatch) {
				t.Fatalf("wrong uncompressed_size: %v", err)
			}
			meta.UncompressedSize = proto.Uint32(uint32(len(plain)))
			if _, err := protocol.Decompress(meta, []byte("not compressed at all")); !errors.Is(err, protocol.ErrBadBatch) {
				t.Fatalf("garbage: %v", err)
			}
			meta.UncompressedSize = proto.Uint32(protocol.MaxUncompressedSize + 1)
			if _, err := protocol.Decompress(meta, compressWith(t, c, plain)); !errors.Is(err, protocol.ErrBadBatch) {
				t.Fatalf("oversized: %v", err)
			}
		})
	}
	meta := &pulsarwire.MessageMetadata{Compression: pulsarwire.CompressionType(42).Enum()}
	if _, err := protocol.Decompress(meta, plain); !errors.Is(err, protocol.ErrCompressed) {
		t.Fatalf("unknown codec: %v", err)
	}
}
