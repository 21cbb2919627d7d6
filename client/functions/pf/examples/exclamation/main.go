// Command exclamation is the smallest Go function: it appends "!" to every
// message of its input topics and publishes the result to its output topic.
// It is Pulsar's exclamation example with Magnetar's import path.
package main

import (
	"context"

	"github.com/magnetar-dev/magnetar/client/functions/pf"
)

func exclamation(_ context.Context, in []byte) ([]byte, error) {
	out := make([]byte, 0, len(in)+1)
	return append(append(out, in...), '!'), nil
}

func main() {
	pf.Start(exclamation)
}
