package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/magnetar-dev/magnetar/bench/internal/latency"
)

// newClient connects the load generator to a server.
func newClient(url string) (pulsar.Client, error) {
	return pulsar.NewClient(pulsar.ClientOptions{
		URL:              url,
		OperationTimeout: 60 * time.Second,
		Logger:           plog.DefaultNopLogger(),
	})
}

// pipe is one function's input producer and output consumer. Messages are
// UTF-8 strings under a STRING schema on both topics (ExclamationFunction
// is a Function<String, String>; the Python one gets str).
type pipe struct {
	producer pulsar.Producer
	consumer pulsar.Consumer
}

// producerBatchDelay is the load generator's batching delay: short, so a
// message waits for its batch at most 1 ms at the moderate rate; at full
// throughput batches fill before it.
const producerBatchDelay = time.Millisecond

// openPipe subscribes to out (from the earliest message, before the
// function exists, so no output is missed) and creates a producer on in.
func openPipe(cl pulsar.Client, in, out string) (*pipe, error) {
	c, err := cl.Subscribe(pulsar.ConsumerOptions{
		Topic: out, SubscriptionName: "bench", Type: pulsar.Exclusive,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
		Schema:                      pulsar.NewStringSchema(nil),
		ReceiverQueueSize:           1000,
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", out, err)
	}
	p, err := cl.CreateProducer(pulsar.ProducerOptions{
		Topic: in, Schema: pulsar.NewStringSchema(nil),
		BatchingMaxPublishDelay: producerBatchDelay, MaxPendingMessages: 2000,
	})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("producer %s: %w", in, err)
	}
	return &pipe{producer: p, consumer: c}, nil
}

func (p *pipe) close() {
	p.producer.Close()
	p.consumer.Close()
}

// payload builds a message of size bytes (at least the header): the
// sequence number and the scheduled send time in Unix nanoseconds, then
// padding. The function's output is the same text with "!" appended.
func payload(seq int64, sched time.Time, size int) []byte {
	b := make([]byte, 0, max(size, 40))
	b = strconv.AppendInt(b, seq, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, sched.UnixNano(), 10)
	b = append(b, ' ')
	for len(b) < size {
		b = append(b, 'x')
	}
	return b
}

// parsePayload reads the sequence number and scheduled time back from an
// output (a probe or any other message: ok false).
func parsePayload(b []byte) (seq, schedNanos int64, ok bool) {
	var fields [2]int64
	start, k := 0, 0
	for i := 0; i < len(b) && k < 2; i++ {
		if b[i] == ' ' {
			v, err := strconv.ParseInt(string(b[start:i]), 10, 64)
			if err != nil {
				return 0, 0, false
			}
			fields[k] = v
			k++
			start = i + 1
		}
	}
	if k < 2 {
		return 0, 0, false
	}
	return fields[0], fields[1], true
}

// firstOutput waits for the consumer's first message (the probe's output)
// and acknowledges it.
func (p *pipe) firstOutput(ctx context.Context) (time.Time, error) {
	msg, err := p.consumer.Receive(ctx)
	if err != nil {
		return time.Time{}, err
	}
	at := time.Now()
	p.consumer.Ack(msg)
	return at, nil
}

// sendProbe publishes one input and waits for its acknowledgement.
func (p *pipe) sendProbe(ctx context.Context) error {
	_, err := p.producer.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("probe")})
	return err
}

// receiver counts outputs with sequence numbers in [lo, hi) once each.
type receiver struct {
	lo, hi   int64
	seen     []bool
	unique   atomic.Int64
	dups     int64
	last     time.Time
	hist     *latency.Histogram // nil: latency not recorded
	done     chan struct{}      // closed when every sequence number arrived
	finished sync.WaitGroup
}

func newReceiver(lo, hi int64, withLatency bool) *receiver {
	r := &receiver{lo: lo, hi: hi, seen: make([]bool, hi-lo), done: make(chan struct{})}
	if withLatency {
		r.hist = latency.NewHistogram()
	}
	return r
}

// run receives until every sequence number arrived or ctx ends; read the
// receiver's fields after wait.
func (r *receiver) run(ctx context.Context, c pulsar.Consumer) {
	r.finished.Add(1)
	go func() { // owned by r: ends with ctx or when done
		defer r.finished.Done()
		for {
			msg, err := c.Receive(ctx)
			if err != nil {
				return
			}
			now := time.Now()
			c.Ack(msg)
			seq, sched, ok := parsePayload(msg.Payload())
			if !ok || seq < r.lo || seq >= r.hi {
				continue
			}
			if r.seen[seq-r.lo] {
				r.dups++
				continue
			}
			r.seen[seq-r.lo] = true
			r.last = now
			if r.hist != nil {
				r.hist.Record(now.Sub(time.Unix(0, sched)))
			}
			if r.unique.Add(1) == r.hi-r.lo {
				close(r.done)
				return
			}
		}
	}()
}

func (r *receiver) wait() { r.finished.Wait() }

// throughputResult is one closed-loop run: n messages sent with a bounded
// window, every output received (or the limit reached).
type throughputResult struct {
	sent, received int64
	elapsed        time.Duration // first send to last output received
	sendErrors     int64
}

func (t throughputResult) rate() float64 {
	if t.elapsed <= 0 {
		return 0
	}
	return float64(t.received) / t.elapsed.Seconds()
}

// throughput sends n messages of size bytes with at most window
// unacknowledged, numbered from base, and waits for their outputs until
// limit.
func (p *pipe) throughput(ctx context.Context, base int64, n, size, window int, limit time.Duration) throughputResult {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	rcv := newReceiver(base, base+int64(n), false)
	rcv.run(ctx, p.consumer)
	sem := make(chan struct{}, window)
	var sendErrors atomic.Int64
	start := time.Now()
	var sent int64
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		p.producer.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload(base+int64(i), start, size)},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				if err != nil {
					sendErrors.Add(1)
				}
				<-sem
			})
		sent++
	}
	select {
	case <-rcv.done:
	case <-ctx.Done():
	}
	cancel()
	rcv.wait()
	res := throughputResult{sent: sent, received: rcv.unique.Load(), sendErrors: sendErrors.Load()}
	if !rcv.last.IsZero() {
		res.elapsed = rcv.last.Sub(start)
	}
	return res
}

// latencyResult is one open-loop run at a fixed rate.
type latencyResult struct {
	scheduled, received int64
	hist                *latency.Histogram
	sendErrors          int64
	duration            time.Duration // the sending part
}

// openLoop publishes at rate msg/s for d, each message carrying its
// scheduled send time (latency counts from it: a system that stalls cannot
// hide its queueing), numbered from base, then waits up to drain for the
// last outputs.
func (p *pipe) openLoop(ctx context.Context, base int64, rate int, d time.Duration, size int, drain time.Duration) (latencyResult, error) {
	total := int64(float64(rate) * d.Seconds())
	if total <= 0 {
		return latencyResult{}, errors.New("openLoop: no messages at this rate and duration")
	}
	rctx, rcancel := context.WithTimeout(ctx, d+drain+5*time.Second)
	defer rcancel()
	rcv := newReceiver(base, base+total, true)
	rcv.run(rctx, p.consumer)
	var sendErrors atomic.Int64
	interval := time.Second / time.Duration(rate)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	var next int64
	for next < total {
		due := min(total, int64(time.Since(start)/interval)+1)
		for ; next < due; next++ {
			sched := start.Add(time.Duration(next) * interval)
			p.producer.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload(base+next, sched, size)},
				func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					if err != nil {
						sendErrors.Add(1)
					}
				})
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return latencyResult{}, ctx.Err()
		}
	}
	sending := time.Since(start)
	t := time.NewTimer(drain)
	defer t.Stop()
	select {
	case <-rcv.done:
	case <-t.C:
	case <-ctx.Done():
	}
	rcancel()
	rcv.wait()
	return latencyResult{scheduled: total, received: rcv.unique.Load(), hist: rcv.hist,
		sendErrors: sendErrors.Load(), duration: sending}, nil
}
