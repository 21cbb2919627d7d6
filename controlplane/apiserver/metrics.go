package apiserver

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/magnetar-dev/magnetar/controlplane/store"
	"github.com/magnetar-dev/magnetar/policy"
)

// metrics are the server's own instruments, beside the RPC metrics of the
// otelgrpc stats handler (rpc.server.call.duration and friends). All are
// exported at /metrics through the OpenTelemetry Prometheus exporter, so
// "magnetar.controlplane.authz.decisions" is scraped as
// magnetar_controlplane_authz_decisions_total, and
// "magnetar.controlplane.http.request.duration" (unit s) as
// magnetar_controlplane_http_request_duration_seconds.
type metrics struct {
	decisions    metric.Int64Counter // by outcome: allow, denied, or the admission code
	authFailures metric.Int64Counter
	usage        metric.Int64Counter // usage records ingested, by outcome: accepted, duplicate, adjusted
	http         httpMetrics         // HTTP requests by method and code (accesslog.go)
}

func newMetrics(m metric.Meter) (*metrics, error) {
	d, err := m.Int64Counter("magnetar.controlplane.authz.decisions",
		metric.WithDescription("Policy decisions on API calls, by outcome (allow, denied, or the admission code)."))
	if err != nil {
		return nil, fmt.Errorf("apiserver: metrics: %w", err)
	}
	a, err := m.Int64Counter("magnetar.controlplane.authn.failures",
		metric.WithDescription("API calls refused because the API key was missing, unknown, revoked or expired."))
	if err != nil {
		return nil, fmt.Errorf("apiserver: metrics: %w", err)
	}
	u, err := m.Int64Counter("magnetar.controlplane.usage.records",
		metric.WithDescription("Usage records ingested, by outcome (accepted, duplicate, adjusted)."))
	if err != nil {
		return nil, fmt.Errorf("apiserver: metrics: %w", err)
	}
	h, err := newHTTPMetrics(m)
	if err != nil {
		return nil, fmt.Errorf("apiserver: metrics: %w", err)
	}
	return &metrics{decisions: d, authFailures: a, usage: u, http: h}, nil
}

func (m *metrics) usageIngested(ctx context.Context, changes []store.UsageChange) {
	var n [3]int64
	for _, ch := range changes {
		switch {
		case !ch.Apply:
			n[1]++
		case ch.Adjustment:
			n[2]++
		default:
			n[0]++
		}
	}
	for i, outcome := range []string{"accepted", "duplicate", "adjusted"} {
		if n[i] > 0 {
			m.usage.Add(ctx, n[i], metric.WithAttributes(attribute.String("outcome", outcome)))
		}
	}
}

func (m *metrics) decision(ctx context.Context, d policy.Decision) {
	outcome := "allow"
	switch {
	case d.Denied:
		outcome = "denied"
	case !d.Allow:
		outcome = d.Code
	}
	m.decisions.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", outcome)))
}
