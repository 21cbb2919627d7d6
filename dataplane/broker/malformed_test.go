package broker_test

import (
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestMalformedFramesCloseOnlyThatConnection sends broken frames on raw
// connections; each is closed, the broker keeps serving a real client, and
// messages acknowledged before are still delivered.
func TestMalformedFramesCloseOnlyThatConnection(t *testing.T) {
	e := newEnv(t)
	p := e.producer(pulsar.ProducerOptions{Topic: "survivor", DisableBatching: true})
	c := e.consumer(pulsar.ConsumerOptions{Topic: "survivor", SubscriptionName: "s"})
	e.send(p, msg("before"))

	addr := strings.TrimPrefix(e.sa.ServiceURL(), "pulsar://")
	frame := func(total, cmd uint32, body []byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, total)
		b = binary.BigEndian.AppendUint32(b, cmd)
		return append(b, body...)
	}
	cases := map[string][]byte{
		"garbage command":   frame(8, 4, []byte{0xff, 0xff, 0xff, 0xff}),
		"oversized frame":   frame(1<<30, 4, nil),
		"cmd size > total":  frame(4, 100, nil),
		"random bytes":      []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		"truncated command": frame(8, 4, []byte{0x08, 0x12, 0x92, 0x01, 0x00, 0x00, 0x00, 0x00}[:4]),
	}
	for name, raw := range cases {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		nc.Write(raw)
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = io.Copy(io.Discard, nc) // returns when the broker closes
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("%s: broker did not close the connection", name)
		}
		nc.Close()
	}
	e.send(p, msg("after"))
	for _, want := range []string{"before", "after"} {
		if m := e.receive(c); string(m.Payload()) != want {
			t.Fatalf("got %q, want %q", m.Payload(), want)
		}
	}
}
