package apiserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/encoding/protojson"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/issuer"
	"github.com/magnetar-dev/magnetar/controlplane/store"
)

// Server is the control-plane API server. See the package doc.
type Server struct {
	cfg     Config
	log     *slog.Logger
	store   store.Store
	authz   Authorizer
	metrics *metrics
	changed *notifier
	issuer  *issuer.Issuer
	revoked *revocations // the issuer's revocation list
	// repl is the replication monitor's memory (replmonitor.go).
	repl *replState
	// inflight maps the token of each HTTP request being served to its
	// *httpRequest (accesslog.go).
	inflight sync.Map

	lis     net.Listener
	inproc  *bufconn.Listener
	grpc    *grpc.Server
	gwConn  *grpc.ClientConn
	http    *http.Server
	tp      *sdktrace.TracerProvider // owned; nil when the caller gave one
	mp      *sdkmetric.MeterProvider
	promReg *prometheus.Registry

	stopping chan struct{} // closed by Shutdown: long-polls return
	stopOnce sync.Once
	served   chan struct{} // closed when Serve returns
	serveMu  sync.Mutex
	serving  bool
}

// New validates cfg, bootstraps the operator key if the store has none,
// binds the listener and builds the servers. Serve starts serving.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, log: cfg.Logger, store: cfg.Store, authz: cfg.Authorizer,
		changed: newNotifier(), repl: newReplState(), stopping: make(chan struct{}), served: make(chan struct{}),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.bootstrap(ctx, cfg.BootstrapKeyFile); err != nil {
		return nil, err
	}

	// Telemetry: RPC spans and metrics from otelgrpc, metrics exported to
	// /metrics by the OpenTelemetry Prometheus exporter into a registry of
	// this server's own (several servers may share a process in tests).
	s.promReg = prometheus.NewRegistry()
	s.promReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exp, err := otelprom.New(otelprom.WithRegisterer(s.promReg))
	if err != nil {
		return nil, fmt.Errorf("apiserver: prometheus exporter: %w", err)
	}
	s.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	var tp trace.TracerProvider = cfg.TracerProvider
	if tp == nil {
		s.tp = sdktrace.NewTracerProvider()
		tp = s.tp
	}
	if s.metrics, err = newMetrics(s.mp.Meter("github.com/magnetar-dev/magnetar/controlplane/apiserver")); err != nil {
		return nil, err
	}

	s.grpc = grpc.NewServer(
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithMeterProvider(s.mp))),
		grpc.ChainUnaryInterceptor(s.logInterceptor, s.authInterceptor),
	)
	cpv1.RegisterOrganizationsServer(s.grpc, organizations{s: s})
	cpv1.RegisterUsersServer(s.grpc, users{s: s})
	cpv1.RegisterServiceAccountsServer(s.grpc, serviceAccounts{s: s})
	cpv1.RegisterRoleBindingsServer(s.grpc, roleBindings{s: s})
	cpv1.RegisterAuditEventsServer(s.grpc, auditEvents{s: s})
	cpv1.RegisterRegionsServer(s.grpc, regions{s: s})
	cpv1.RegisterClustersServer(s.grpc, clusters{s: s})
	cpv1.RegisterOperationsServer(s.grpc, operations{s: s})
	cpv1.RegisterRegionAgentServer(s.grpc, regionAgent{s: s})
	cpv1.RegisterTenantsServer(s.grpc, tenants{s: s})
	cpv1.RegisterNamespacesServer(s.grpc, namespaces{s: s})
	cpv1.RegisterTopicsServer(s.grpc, topics{s: s})
	cpv1.RegisterFunctionsServer(s.grpc, functionsSvc{s: s})
	cpv1.RegisterSourcesServer(s.grpc, sourcesSvc{s: s})
	cpv1.RegisterSinksServer(s.grpc, sinksSvc{s: s})
	cpv1.RegisterBillingServer(s.grpc, billingSvc{s: s})
	cpv1.RegisterPriceBooksServer(s.grpc, priceBooks{s: s})
	cpv1.RegisterBudgetsServer(s.grpc, budgets{s: s})
	cpv1.RegisterReplicationGroupsServer(s.grpc, replicationGroups{s: s})

	// The gateway is a gRPC client of s.grpc over an in-process pipe, so
	// REST calls take the same interceptors as gRPC calls.
	s.inproc = bufconn.Listen(1 << 20)
	s.gwConn, err = grpc.NewClient("passthrough:///in-process",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return s.inproc.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	)
	if err != nil {
		return nil, fmt.Errorf("apiserver: gateway connection: %w", err)
	}
	// Unknown JSON fields are refused (INVALID_ARGUMENT naming the field)
	// rather than dropped, as grpc-gateway's default marshaler does.
	gw := runtime.NewServeMux(runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.HTTPBodyMarshaler{
		Marshaler: bodyMarshaler{&runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}},
	}), runtime.WithRoutingErrorHandler(routingError), runtime.WithMetadata(gatewayMetadata))
	for _, reg := range []func(context.Context, *runtime.ServeMux, *grpc.ClientConn) error{
		cpv1.RegisterOrganizationsHandler, cpv1.RegisterUsersHandler, cpv1.RegisterServiceAccountsHandler,
		cpv1.RegisterRoleBindingsHandler, cpv1.RegisterAuditEventsHandler, cpv1.RegisterRegionsHandler,
		cpv1.RegisterClustersHandler, cpv1.RegisterOperationsHandler, cpv1.RegisterRegionAgentHandler,
		cpv1.RegisterTenantsHandler, cpv1.RegisterNamespacesHandler, cpv1.RegisterTopicsHandler,
		cpv1.RegisterBillingHandler, cpv1.RegisterPriceBooksHandler, cpv1.RegisterBudgetsHandler,
		cpv1.RegisterReplicationGroupsHandler, cpv1.RegisterFunctionsHandler, cpv1.RegisterSourcesHandler, cpv1.RegisterSinksHandler,
	} {
		if err := reg(context.Background(), gw, s.gwConn); err != nil {
			s.gwConn.Close()
			return nil, fmt.Errorf("apiserver: gateway: %w", err)
		}
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(cpv1.OpenAPI)
	})
	mux.HandleFunc("GET /v3/openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(cpv1.OpenAPI3)
	})
	mux.HandleFunc("GET /healthz", s.healthz)
	s.registerOAuth(mux)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.promReg, promhttp.HandlerOpts{}))
	mux.Handle("/", s.authBeforeBody(limitBody(gw)))
	rest := s.observeHTTP(mux)

	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	s.http = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
				s.grpc.ServeHTTP(w, r)
				return
			}
			rest.ServeHTTP(w, r)
		}),
		Protocols:         protocols,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.lis, err = net.Listen("tcp", cfg.Listen)
	if err != nil {
		s.gwConn.Close()
		return nil, fmt.Errorf("apiserver: listen: %w", err)
	}
	s.issuer, err = issuer.New(issuer.Config{Store: cfg.Store, URL: issuerURL(cfg.IssuerURL, s.lis.Addr()),
		Alg: cfg.SigningAlg, TokenTTL: cfg.AccessTokenTTL, Rotation: cfg.SigningKeyRotation, Grace: cfg.SigningKeyGrace})
	if err == nil {
		_, err = s.issuer.JWKS(ctx) // the first start makes the signing key
	}
	if err == nil {
		iss := s.issuer
		s.revoked = newRevocations(cfg.Store, func() time.Duration { return iss.TokenTTL() + revocationSkew })
	}
	if err != nil {
		s.lis.Close()
		s.gwConn.Close()
		return nil, fmt.Errorf("apiserver: %w", err)
	}
	return s, nil
}

// issuerURL is the configured issuer URL, else http:// and the bound
// address (loopback for an unspecified host).
func issuerURL(configured string, addr net.Addr) string {
	if configured != "" {
		return configured
	}
	if ta, ok := addr.(*net.TCPAddr); ok && ta.IP.IsUnspecified() {
		return "http://" + net.JoinHostPort("127.0.0.1", fmt.Sprint(ta.Port))
	}
	return "http://" + addr.String()
}

// IssuerURL is the OAuth2 / OIDC issuer identifier of this server's tokens.
func (s *Server) IssuerURL() string { return s.issuer.URL() }

// Addr is the bound listen address.
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

// Serve serves until ctx ends or Shutdown is called, then returns nil once
// everything it started has stopped. It may be called once.
func (s *Server) Serve(ctx context.Context) error {
	s.serveMu.Lock()
	if s.serving {
		s.serveMu.Unlock()
		return errors.New("apiserver: Serve called twice")
	}
	s.serving = true
	s.serveMu.Unlock()
	defer close(s.served)

	var wg sync.WaitGroup
	defer wg.Wait()
	mctx, stopMonitor := context.WithCancel(context.Background())
	defer stopMonitor()
	wg.Add(3)
	go func() { // replication monitor; stopped when Serve returns or Shutdown begins
		defer wg.Done()
		go func() {
			select {
			case <-s.stopping:
				stopMonitor()
			case <-mctx.Done():
			}
		}()
		s.monitor(mctx)
	}()
	go func() { // in-process gRPC for the gateway; stopped by Shutdown
		defer wg.Done()
		s.grpc.Serve(s.inproc)
	}()
	go func() { // ctx watcher; ends when ctx ends or Shutdown begins
		defer wg.Done()
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s.shutdown(sctx)
		case <-s.stopping:
		}
	}()
	s.log.Info("apiserver: serving", "addr", s.lis.Addr().String())
	err := s.http.Serve(s.lis)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	if err != nil {
		s.shutdown(context.Background())
	}
	return err
}

// Shutdown stops accepting calls, ends long-polls, waits for calls in
// flight (until ctx ends) and for Serve to return.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.shutdown(ctx)
	s.serveMu.Lock()
	serving := s.serving
	s.serveMu.Unlock()
	if serving {
		select {
		case <-s.served:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

func (s *Server) shutdown(ctx context.Context) error {
	var err error
	s.stopOnce.Do(func() {
		close(s.stopping)
		err = s.http.Shutdown(ctx)
		s.lis.Close()
		s.gwConn.Close()
		s.grpc.Stop()
		if s.tp != nil {
			s.tp.Shutdown(ctx)
		}
		s.mp.Shutdown(ctx)
	})
	return err
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	if _, err := s.store.Revision(r.Context()); err != nil {
		http.Error(w, "store unavailable", http.StatusServiceUnavailable)
		return
	}
	w.Write([]byte("ok\n"))
}
