package broker

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/magnetar-dev/magnetar/dataplane/auth"
)

// TestNoteDeniedRateLimitsItsLog: every refusal is counted; the log takes
// denialLogBurst lines per window and the next window's first line counts
// those left out.
func TestNoteDeniedRateLimitsItsLog(t *testing.T) {
	var buf bytes.Buffer
	s := &Service{log: slog.New(slog.NewTextHandler(&buf, nil))}
	s.metrics = newMetrics(s)
	de := &auth.DeniedError{Reasons: []string{"no grant"}, Role: "app", Action: auth.ActionProduce, Resource: "persistent://t/ns/x"}
	for range denialLogBurst + 5 {
		s.NoteDenied("binary", de)
	}
	var m dto.Metric
	if err := s.metrics.authzDenials.WithLabelValues("binary", "produce").Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != denialLogBurst+5 {
		t.Fatalf("counted %v denials, want %d", got, denialLogBurst+5)
	}
	if n := strings.Count(buf.String(), "broker authorization denied"); n != denialLogBurst {
		t.Fatalf("logged %d lines, want %d:\n%s", n, denialLogBurst, buf.String())
	}
	if !strings.Contains(buf.String(), `role=app action=produce resource=persistent://t/ns/x reasons="[no grant]"`) {
		t.Fatalf("log line lacks the request:\n%s", buf.String())
	}
	buf.Reset()
	s.denialLog.windowStart = s.denialLog.windowStart.Add(-denialLogWindow) // the window has passed
	s.NoteDenied("admin", de)
	if !strings.Contains(buf.String(), "surface=admin") || !strings.Contains(buf.String(), "denials_not_logged_before=5") {
		t.Fatalf("next window's line: %s", buf.String())
	}
}
