package protocol

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-dev/magnetar/api/pulsarwire"
)

func TestPayloadSize(t *testing.T) {
	meta := &pulsarwire.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(7), PublishTime: proto.Uint64(1),
		Properties: []*pulsarwire.KeyValue{{Key: proto.String("k"), Value: proto.String("a longer value")}}}
	for _, n := range []int{0, 1, 100, 65536} {
		b, err := AppendHeadersAndPayload(nil, meta, make([]byte, n))
		if err != nil {
			t.Fatal(err)
		}
		if got := PayloadSize(b); got != n {
			t.Errorf("payload of %d bytes: PayloadSize = %d", n, got)
		}
		withBEM, err := AppendBrokerEntryMetadata(nil, &pulsarwire.BrokerEntryMetadata{Index: proto.Uint64(3)})
		if err != nil {
			t.Fatal(err)
		}
		if got := PayloadSize(append(withBEM, b...)); got != n {
			t.Errorf("with broker entry metadata, payload of %d bytes: PayloadSize = %d", n, got)
		}
	}
	for _, bad := range [][]byte{nil, {0x0e}, {0x0e, 0x01, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}} {
		if got := PayloadSize(bad); got != len(bad) {
			t.Errorf("PayloadSize(%x) = %d, want len %d", bad, got, len(bad))
		}
	}
}
