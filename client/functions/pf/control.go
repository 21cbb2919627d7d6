package pf

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/types/known/emptypb"

	pb "github.com/magnetar-dev/magnetar/api/pulsarfunctions"
)

// controlServer serves InstanceControl, the service the worker calls for
// status, metrics and health.
type controlServer struct {
	pb.UnimplementedInstanceControlServer
	i *instance
}

var _ pb.InstanceControlServer = (*controlServer)(nil)

func (s *controlServer) GetFunctionStatus(context.Context, *emptypb.Empty) (*pb.FunctionStatus, error) {
	return s.i.stats.status(s.i.cfg.InstanceID), nil
}

// GetAndResetMetrics returns the metrics and starts a new one-minute window.
func (s *controlServer) GetAndResetMetrics(context.Context, *emptypb.Empty) (*pb.MetricsData, error) {
	m := s.i.stats.metrics()
	s.i.stats.resetWindow()
	return m, nil
}

// ResetMetrics starts a new one-minute window; the totals since start stay.
func (s *controlServer) ResetMetrics(context.Context, *emptypb.Empty) (*emptypb.Empty, error) {
	s.i.stats.resetWindow()
	return &emptypb.Empty{}, nil
}

func (s *controlServer) GetMetrics(context.Context, *emptypb.Empty) (*pb.MetricsData, error) {
	return s.i.stats.metrics(), nil
}

// HealthCheck records that the worker is still watching.
func (s *controlServer) HealthCheck(context.Context, *emptypb.Empty) (*pb.HealthCheckResult, error) {
	s.i.lastHealth.Store(time.Now().UnixNano())
	return &pb.HealthCheckResult{Success: true}, nil
}

// metricsHandler serves reg's series on / and /metrics, as Pulsar's
// instances do.
func metricsHandler(reg *prometheus.Registry) http.Handler {
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.Handle("/metrics", h)
	return mux
}
