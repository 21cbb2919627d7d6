package broker_test

import (
	"context"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
)

func contextWithTimeout(e *env, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(e.ctx, d)
}

func createPartitioned(e *env, topic string, n int) error {
	tn, err := broker.ParseTopicName(topic)
	if err != nil {
		return err
	}
	return e.sa.Broker().Resources().CreatePartitioned(e.ctx, tn, n, nil)
}
