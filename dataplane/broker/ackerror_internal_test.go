package broker

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
)

// TestAckErrorSaysWhatFailed: an acknowledgement the cursor refuses is
// answered with the acknowledgement, the subscription and the reason, and
// a code the client can act on, never a bare "internal error".
func TestAckErrorSaysWhatFailed(t *testing.T) {
	tn, err := ParseTopicName("persistent://public/default/acks")
	if err != nil {
		t.Fatal(err)
	}
	s := &Subscription{name: "sub", topic: &Topic{name: tn}}
	pos := ledger.Position{LedgerID: 7, EntryID: 3}
	for _, tc := range []struct {
		err  error
		want *protocol.Error
	}{
		{fmt.Errorf("%w: \"public/default/persistent/acks\"", ledger.ErrClosed), protocol.ErrServiceNotReady},
		{fmt.Errorf("%w: batch index 9 of 4", ledger.ErrInvalidArgument), protocol.ErrNotAllowed},
		{errors.New("disk on fire"), protocol.ErrUnknown},
		{protocol.ErrNotAllowed.WithMessage("cumulative ack is not allowed on Shared subscriptions"), protocol.ErrNotAllowed},
	} {
		got := s.ackError(pos, tc.err)
		code, msg := protocol.ServerErrorOf(got)
		if code != tc.want.Code {
			t.Errorf("%v: code %v, want %v", tc.err, code, tc.want.Code)
		}
		if msg == protocol.ErrUnknown.Message {
			t.Errorf("%v: told the client only %q", tc.err, msg)
		}
		if _, isProto := tc.err.(*protocol.Error); !isProto && (!strings.Contains(msg, "7:3") || !strings.Contains(msg, "subscription sub")) {
			t.Errorf("%v: message %q does not name the acknowledgement and subscription", tc.err, msg)
		}
	}
}
