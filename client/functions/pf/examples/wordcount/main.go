// Command wordcount counts words in function state and publishes each
// word's new count as "<word>=<count>". It shows the FunctionContext: the
// user configuration ("separator", default a space; "lowercase", default
// false), the message being processed and the counters, which are a
// Magnetar extension (Pulsar's Go SDK has no state).
package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/magnetar-dev/magnetar/client/functions/logutil"
	"github.com/magnetar-dev/magnetar/client/functions/pf"
)

func wordcount(ctx context.Context, in []byte) ([]byte, error) {
	fc, ok := pf.FromContext(ctx)
	if !ok {
		return nil, errors.New("no function context")
	}
	sep, _ := fc.GetUserConfValue("separator").(string)
	if sep == "" {
		sep = " "
	}
	text := string(in)
	if lower, _ := fc.GetUserConfValue("lowercase").(bool); lower {
		text = strings.ToLower(text)
	}
	var out []string
	for _, w := range strings.Split(text, sep) {
		if w = strings.TrimSpace(w); w == "" {
			continue
		}
		if err := fc.IncrCounter(ctx, w, 1); err != nil {
			return nil, err
		}
		n, err := fc.GetCounter(ctx, w)
		if err != nil {
			return nil, err
		}
		out = append(out, fmt.Sprintf("%s=%d", w, n))
	}
	fc.RecordMetric("words", float64(len(out)))
	logutil.Debugf("message %s: %d words", fc.GetCurrentRecord().ID(), len(out))
	if len(out) == 0 {
		return nil, nil
	}
	return []byte(strings.Join(out, " ")), nil
}

func main() {
	pf.Start(wordcount)
}
