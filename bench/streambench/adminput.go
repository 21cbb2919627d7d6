package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"
)

// putClient sends W5's admin PUTs over keep-alive HTTP/1.1 connections, one
// request at a time on each (no pipelining), which is what pulsar-admin's
// HTTP client does. It exists because the load generator shares the
// machine's two cores with the server: net/http's Transport runs a reader
// and a writer goroutine per connection and hands every request and
// response between them over channels, which cost the generator about half
// a core at 9k creations a second.
// Here the caller's goroutine writes the request and reads the response
// itself. The server sees the same requests either way, but for the
// User-Agent and Accept-Encoding headers net/http adds.
type putClient struct {
	addr    string
	timeout time.Duration // per request, from its write to the end of its response
	idle    chan *putConn
	redials atomic.Int64 // reused connections found closed by the server
}

type putConn struct {
	c   net.Conn
	br  *bufio.Reader
	req []byte
}

func newPutClient(addr string, conns int) *putClient {
	return &putClient{addr: addr, timeout: time.Minute, idle: make(chan *putConn, conns)}
}

// put sends PUT path with an empty body and returns an error unless the
// answer is 2xx. A connection the server closed while it was idle is
// redialed once.
func (p *putClient) put(ctx context.Context, path string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var pc *putConn
	select {
	case pc = <-p.idle:
	default:
	}
	reused := pc != nil
	if !reused {
		var err error
		if pc, err = p.dial(ctx); err != nil {
			return err
		}
	}
	status, keep, err := pc.roundTrip(ctx, p.addr, path, time.Now().Add(p.timeout))
	if err != nil && reused && errors.Is(err, errIdleClosed) {
		pc.c.Close()
		p.redials.Add(1)
		if pc, err = p.dial(ctx); err != nil {
			return err
		}
		status, keep, err = pc.roundTrip(ctx, p.addr, path, time.Now().Add(p.timeout))
	}
	if err != nil || !keep {
		pc.c.Close()
	} else {
		select {
		case p.idle <- pc:
		default:
			pc.c.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("streambench: PUT %s: %w", path, err)
	}
	if status/100 != 2 {
		return fmt.Errorf("streambench: PUT %s: %d %s", path, status, http.StatusText(status))
	}
	return nil
}

// close closes the idle connections.
func (p *putClient) close() {
	for {
		select {
		case pc := <-p.idle:
			pc.c.Close()
		default:
			return
		}
	}
}

func (p *putClient) dial(ctx context.Context) (*putConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, fmt.Errorf("streambench: %w", err)
	}
	return &putConn{c: c, br: bufio.NewReaderSize(c, 4096)}, nil
}

// errIdleClosed is a reused connection that answered nothing at all: the
// server had closed it while it was idle.
var errIdleClosed = errors.New("connection closed before any answer")

// roundTrip writes one request and reads its response, discarding the
// body, until deadline or the end of ctx. keep reports whether the
// connection can carry another request.
func (pc *putConn) roundTrip(ctx context.Context, host, path string, deadline time.Time) (status int, keep bool, err error) {
	if err := pc.c.SetDeadline(deadline); err != nil {
		return 0, false, err
	}
	stop := context.AfterFunc(ctx, func() { pc.c.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() && err == nil { // ended just as the answer came: do not reuse
			keep = false
		}
		if ctx.Err() != nil && err != nil {
			err = ctx.Err()
		}
	}()
	pc.req = append(pc.req[:0], "PUT "...)
	pc.req = append(pc.req, path...)
	pc.req = append(pc.req, " HTTP/1.1\r\nHost: "...)
	pc.req = append(pc.req, host...)
	pc.req = append(pc.req, "\r\nContent-Length: 0\r\n\r\n"...)
	if _, err := pc.c.Write(pc.req); err != nil {
		return 0, false, err
	}
	if _, err := pc.br.Peek(1); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) {
			return 0, false, errIdleClosed
		}
		return 0, false, err
	}
	resp, err := http.ReadResponse(pc.br, nil)
	if err != nil {
		return 0, false, err
	}
	if err := resp.Body.Close(); err != nil { // reads the rest of the body
		return 0, false, err
	}
	return resp.StatusCode, !resp.Close, nil
}
