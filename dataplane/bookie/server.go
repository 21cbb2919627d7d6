package bookie

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// Server is a bookie: it serves the wire protocol over TCP, storing entries
// into a storage.Storage, and (with a metadata store) checks its instance
// cookie and registers itself as available.
type Server struct {
	cfg     Config
	metrics *serverMetrics
	st      storage.Storage
	md      metadata.Store
	log     *slog.Logger

	ln net.Listener

	mu       sync.Mutex
	started  bool
	stopped  bool
	conns    map[*serverConn]struct{}
	nextConn uint64

	sessionID atomic.Int64 // of the current registration session, for tests
	instance  string       // cookie instance id, set by Start

	stopping   chan struct{}   // closed by Shutdown
	stopCtx    context.Context // canceled by Shutdown, for background metadata calls
	stopCancel context.CancelFunc
	wg         sync.WaitGroup
}

// New returns a server storing into st. md may be nil for a bookie that
// runs without metadata (no cookie check, no registration; tests and
// tools). The server does not own st or md: the caller closes them after
// Shutdown.
func New(cfg Config, st storage.Storage, md metadata.Store) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if st == nil {
		return nil, fmt.Errorf("%w: nil storage", ErrConfig)
	}
	if md != nil && cfg.DataDir == "" {
		return nil, fmt.Errorf("%w: a data dir is required for the instance cookie", ErrConfig)
	}
	stopCtx, stopCancel := context.WithCancel(context.Background())
	return &Server{
		stopCtx:    stopCtx,
		stopCancel: stopCancel,
		cfg:        cfg,
		st:         st,
		md:         md,
		log:        cfg.Logger,
		conns:      make(map[*serverConn]struct{}),
		stopping:   make(chan struct{}),
		metrics:    newServerMetrics(),
	}, nil
}

// Start listens, checks the instance cookie, registers the bookie as
// available and starts serving. ctx bounds the metadata calls of the
// start; the server runs until Shutdown. On error nothing is left running.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.started || s.stopped {
		s.mu.Unlock()
		return ErrStarted
	}
	s.started = true
	s.mu.Unlock()

	ln, err := net.Listen("tcp", s.cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("bookie: listen on %s: %w", s.cfg.ListenAddr, err)
	}
	if s.cfg.AdvertisedAddr == "" {
		s.cfg.AdvertisedAddr = ln.Addr().String()
	}
	if s.cfg.ID == "" {
		s.cfg.ID = s.cfg.AdvertisedAddr
	}
	if s.md != nil {
		if err := CheckCookie(ctx, s.md, s.cfg.ID, s.cfg.DataDir); err != nil {
			ln.Close()
			return err
		}
		if c, ok, err := readCookieFile(filepath.Join(s.cfg.DataDir, CookieFile)); err == nil && ok {
			s.instance = c.InstanceID
		}
		reg, err := s.newRegistrar(ctx)
		if err != nil {
			ln.Close()
			return err
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			reg.run()
		}()
	}
	s.ln = ln
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.acceptLoop()
	}()
	s.log.Info("bookie started", slog.String("id", s.cfg.ID), slog.String("addr", ln.Addr().String()),
		slog.String("advertised", s.cfg.AdvertisedAddr))
	return nil
}

// Addr returns the listener's address (nil before Start).
func (s *Server) Addr() net.Addr {
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// ID returns the bookie id (final after Start).
func (s *Server) ID() string { return s.cfg.ID }

// Shutdown stops accepting connections, withdraws the registration, stops
// reading requests, waits (until ctx is done) for in-flight requests to be
// answered, then closes every connection and waits for all goroutines. It
// returns ctx's error if it had to cut connections short.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil
	}
	s.stopped = true
	conns := make([]*serverConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	close(s.stopping)
	s.stopCancel()
	if s.ln != nil {
		s.ln.Close()
	}
	for _, c := range conns {
		c.drain()
	}
	var err error
	for _, c := range conns {
		select {
		case <-c.finished:
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err != nil {
			break
		}
	}
	if err != nil {
		for _, c := range conns {
			c.kill()
		}
	}
	s.wg.Wait()
	s.log.Info("bookie stopped", slog.String("id", s.cfg.ID))
	return err
}

func (s *Server) acceptLoop() {
	var backoff time.Duration
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.stopping:
				return
			default:
			}
			// Out of file descriptors and the like: back off and retry.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Error("bookie accept failed", slog.Any("err", err), slog.Duration("retry_in", backoff))
			t := time.NewTimer(backoff)
			select {
			case <-s.stopping:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		backoff = 0
		if s.cfg.TLS != nil {
			nc = tls.Server(nc, s.cfg.TLS) // handshaken by the connection's reader
		}
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			nc.Close()
			return
		}
		s.nextConn++
		c := newServerConn(s, nc, s.nextConn)
		s.conns[c] = struct{}{}
		s.wg.Add(2)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			c.readLoop()
		}()
		go func() {
			defer s.wg.Done()
			c.writeLoop()
		}()
	}
}

func (s *Server) removeConn(c *serverConn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}
