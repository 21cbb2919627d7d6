// Command misbehave is a test function for the integration tests: it logs
// every message, fails on payloads starting with "fail", panics on "panic",
// publishes payloads starting with "side" to the topic named by the user
// configuration key "side" (returning no output), and echoes the rest with
// the user configuration's "suffix" appended, recording a metric.
package main

import (
	"bytes"
	"context"
	"errors"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/client/functions/logutil"
	"github.com/magnetar-dev/magnetar/client/functions/pf"
)

func handle(ctx context.Context, in []byte) ([]byte, error) {
	fc, ok := pf.FromContext(ctx)
	if !ok {
		return nil, errors.New("no function context")
	}
	logutil.Infof("got %s", in)
	switch {
	case bytes.HasPrefix(in, []byte("fail")):
		return nil, errors.New("refusing " + string(in))
	case bytes.HasPrefix(in, []byte("panic")):
		panic("asked to panic")
	case bytes.HasPrefix(in, []byte("side")):
		side, _ := fc.GetUserConfValue("side").(string)
		p := fc.NewOutputMessage(side)
		if p == nil {
			return nil, errors.New("no producer for " + side)
		}
		_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: in})
		return nil, err
	}
	fc.RecordMetric("len", float64(len(in)))
	suffix, _ := fc.GetUserConfValue("suffix").(string)
	return append(append([]byte(nil), in...), suffix...), nil
}

func main() {
	pf.Start(handle)
}
