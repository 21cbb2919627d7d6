// Package tcpproxy is a TCP proxy for tests and benchmarks: placed between
// two components, it can cut the link (drop every connection and refuse new
// ones) and add latency in both directions without capping throughput.
// Every method is safe for concurrent use.
package tcpproxy

import (
	"net"
	"sync"
	"time"
)

// Proxy is a TCP proxy placed between two components so a test can cut or
// slow the link: Cut drops every open connection and refuses new ones until
// Restore; SetDelay holds each chunk for d in both directions.
type Proxy struct {
	addr   string
	target string

	mu    sync.Mutex
	ln    net.Listener
	cut   bool
	delay time.Duration
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// Start listens on a free loopback port and forwards to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{addr: ln.Addr().String(), ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept(ln)
	return p, nil
}

// Addr is the proxy's address.
func (p *Proxy) Addr() string { return p.addr }

// Down drops every connection and stops listening, as a host that went
// away: connections to the address are refused until Up.
func (p *Proxy) Down() {
	p.mu.Lock()
	ln := p.ln
	p.ln = nil
	p.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	p.Cut()
}

// Up listens on the proxy's address again after Down and lets connections
// through.
func (p *Proxy) Up() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		ln, err := net.Listen("tcp", p.addr)
		if err != nil {
			return err
		}
		p.ln = ln
		p.wg.Add(1)
		go p.accept(ln)
	}
	p.cut = false
	return nil
}

// Cut drops every connection and refuses new ones.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

// Restore lets connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// SetDelay holds every chunk for d.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Close stops the proxy and waits for its goroutines.
func (p *Proxy) Close() {
	p.Down()
	p.wg.Wait()
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			in.Close()
			continue
		}
		p.mu.Unlock()
		out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			in.Close()
			out.Close()
			continue
		}
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		dst.Close()
		src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	// The reader stamps each chunk with the time it may be delivered and
	// queues it; the writer delivers at that time. Chunks in flight overlap,
	// so a delay adds latency without capping throughput (a link's
	// bandwidth-delay product, bounded by the queue).
	type chunk struct {
		b   []byte
		due time.Time
	}
	q := make(chan chunk, 1024)
	written := make(chan struct{})
	go func() {
		defer close(written)
		for c := range q {
			if d := time.Until(c.due); d > 0 {
				time.Sleep(d) // the link's latency, not test synchronization
			}
			if _, err := dst.Write(c.b); err != nil {
				src.Close()
				for range q {
				}
				return
			}
		}
	}()
	defer func() {
		close(q)
		<-written // deliver what was read before closing both sides
	}()
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			d := p.delay
			p.mu.Unlock()
			q <- chunk{b: buf[:n], due: time.Now().Add(d)}
		}
		if err != nil {
			return // EOF or a cut: close both sides
		}
	}
}
