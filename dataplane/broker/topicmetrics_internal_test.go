package broker

import (
	"testing"
	"time"
)

// The rates are over full windows: samples inside a window change nothing.
func TestRateWindow(t *testing.T) {
	t0 := time.Now()
	var w rateWindow
	w.observe(flowSample{at: t0, msgsIn: 100, bytesIn: 1000, msgsOut: 50, bytesOut: 500})
	w.observe(flowSample{at: t0.Add(rateWindowLen / 2), msgsIn: 999, bytesIn: 9999})
	if w.in != 0 || w.out != 0 {
		t.Fatalf("rates inside the first window: in %v out %v", w.in, w.out)
	}
	w.observe(flowSample{at: t0.Add(rateWindowLen), msgsIn: 100 + 200, bytesIn: 1000 + 2000, msgsOut: 50 + 100, bytesOut: 500 + 1000})
	secs := rateWindowLen.Seconds()
	if w.in != 200/secs || w.inBytes != 2000/secs || w.out != 100/secs || w.outBytes != 1000/secs {
		t.Fatalf("rates after a window: %+v", w)
	}
	w.observe(flowSample{at: t0.Add(rateWindowLen + time.Second), msgsIn: 10000})
	if w.in != 200/secs {
		t.Fatalf("a sample inside the next window changed the rate to %v", w.in)
	}
}
