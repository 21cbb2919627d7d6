package e2e

import (
	"reflect"
	"testing"
	"time"
)

// TestClientOutputParse feeds the harness every kind of line the Java and
// Python clients print, and lines it must not accept.
func TestClientOutputParse(t *testing.T) {
	at := time.Unix(100, 0)
	p := &clientProc{}
	for _, l := range []string{
		"URL 1700000000123 pulsar://127.0.0.1:6650",
		"READY",
		"ACK 0 1:0:-1",
		"ACK 1 (1,1,-1,-1)",
		"ERR 2 org.apache.pulsar.client.api.PulsarClientException$TimeoutException: send timed out",
		"MSG j1-000000 1:0:-1 -",
		"MSG j1-000001 1:1:-1 east",
		"MSG x-y-000007 (1,2,-1,-1) ?",
		"MSG hello 1:3:-1 -",
		"DONE 3 2 1",
		"ACK x 1:0:-1",
		"MSG only-two 1:0:-1",
		"URL soon pulsar://x",
		"DONE 1 2",
		"[main] INFO a log line on the wrong stream",
	} {
		p.parse(l, at)
	}
	if !p.ready {
		t.Error("READY not recorded")
	}
	if want := []URLChange{{URL: "pulsar://127.0.0.1:6650", At: at, JavaAt: time.UnixMilli(1700000000123)}}; !reflect.DeepEqual(p.urls, want) {
		t.Errorf("urls %+v, want %+v", p.urls, want)
	}
	if want := []ClientAck{{0, "1:0:-1", at}, {1, "(1,1,-1,-1)", at}}; !reflect.DeepEqual(p.acks, want) {
		t.Errorf("acks %+v, want %+v", p.acks, want)
	}
	if len(p.sendErrs) != 1 || p.sendErrs[0].Seq != 2 || p.sendErrs[0].Err != "org.apache.pulsar.client.api.PulsarClientException$TimeoutException: send timed out" {
		t.Errorf("send errors %+v", p.sendErrs)
	}
	wantMsgs := []ClientMessage{
		{Payload: "j1-000000", Producer: "j1", Seq: 0, MsgID: "1:0:-1", At: at},
		{Payload: "j1-000001", Producer: "j1", Seq: 1, MsgID: "1:1:-1", ReplicatedFrom: "east", At: at},
		{Payload: "x-y-000007", Producer: "x-y", Seq: 7, MsgID: "(1,2,-1,-1)", ReplicatedFrom: "?", At: at},
		{Payload: "hello", Seq: -1, MsgID: "1:3:-1", At: at},
	}
	if !reflect.DeepEqual(p.msgs, wantMsgs) {
		t.Errorf("messages %+v, want %+v", p.msgs, wantMsgs)
	}
	if p.done == nil || *p.done != (ClientDone{3, 2, 1}) {
		t.Errorf("done %+v", p.done)
	}
	if len(p.bad) != 5 {
		t.Errorf("%d lines refused, want 5: %q", len(p.bad), p.bad)
	}
}

func TestCheckClientOrder(t *testing.T) {
	m := func(prod string, seq int) ClientMessage {
		return ClientMessage{Payload: javaPayload(prod, seq), Producer: prod, Seq: seq}
	}
	for _, tc := range []struct {
		name           string
		msgs           []ClientMessage
		dups, reorders int
	}{
		{"in order", []ClientMessage{m("a", 0), m("a", 1), m("a", 2)}, 0, 0},
		{"producers interleaved", []ClientMessage{m("a", 0), m("b", 0), m("a", 1), m("b", 1)}, 0, 0},
		{"redelivered after a switch", []ClientMessage{m("a", 0), m("a", 1), m("a", 2), m("a", 1), m("a", 2), m("a", 3)}, 2, 0},
		{"gap filled late", []ClientMessage{m("a", 0), m("a", 2), m("a", 1)}, 0, 1},
		{"one producer reordered, the other not", []ClientMessage{m("a", 1), m("b", 5), m("a", 0), m("b", 6)}, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := checkClientOrder(tc.msgs)
			if o.dups != tc.dups || o.outOfOrder != tc.reorders {
				t.Errorf("dups %d, out of order %d; want %d, %d", o.dups, o.outOfOrder, tc.dups, tc.reorders)
			}
		})
	}
}
