package machine

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/magnetar-dev/magnetar/internal/pki"
)

// CopyCost is what LoopbackCopy measured.
type CopyCost struct {
	Bytes      int64 // frame bytes received in the measured interval
	Elapsed    time.Duration
	CPUSeconds float64 // this process's CPU time in the interval: both ends
	// Cipher is the negotiated TLS version and cipher suite ("" in plain
	// text).
	Cipher string
}

// BytesPerSec is the copy's throughput.
func (c CopyCost) BytesPerSec() float64 {
	if c.Elapsed <= 0 {
		return 0
	}
	return float64(c.Bytes) / c.Elapsed.Seconds()
}

// CPUSecondsPerGB is the CPU time both ends took per 10^9 bytes moved.
func (c CopyCost) CPUSecondsPerGB() float64 {
	if c.Bytes <= 0 {
		return 0
	}
	return c.CPUSeconds / (float64(c.Bytes) / 1e9)
}

// copyWarmup is excluded from a LoopbackCopy's measurement: the TLS
// writer's first 128 KiB go in small records, and the socket buffers grow.
const copyWarmup = 200 * time.Millisecond

// LoopbackCopy streams frames of frameSize bytes (after a 4-byte length)
// from one goroutine to another over one loopback TCP connection, as fast
// as the reader takes them, for dur after a short warm-up, in plain text or
// (withTLS) over TLS as crypto/tls negotiates it by default at both ends:
// TLS 1.3, AES-128-GCM where the CPU has AES instructions, a P-256
// certificate made for the run. The writer writes each frame with one
// Write, as the Pulsar Go client writes a batch; the reader reads it
// through a 64 KiB bufio.Reader into one buffer, as the broker's protocol
// reader does. CPUSeconds is this process's own (/proc/self/stat) over the
// measured interval: the writer, the reader and the kernel's loopback
// work on their behalf, so callers run it with nothing else of theirs
// running. The difference between the TLS and the plain copy's CPU per GB
// is what encrypting and decrypting a byte stream costs this machine.
func LoopbackCopy(ctx context.Context, frameSize int, withTLS bool, dur time.Duration) (CopyCost, error) {
	var srvConf, cliConf *tls.Config
	if withTLS {
		var err error
		if srvConf, cliConf, err = copyTLSConfigs(); err != nil {
			return CopyCost{}, err
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return CopyCost{}, fmt.Errorf("machine: %w", err)
	}
	defer l.Close()
	var received atomic.Int64
	readDone := make(chan error, 1)
	go func() { // the reader; ends at the writer's close
		readDone <- copyReader(l, srvConf, frameSize, &received)
	}()
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		l.Close()
		<-readDone
		return CopyCost{}, fmt.Errorf("machine: %w", err)
	}
	var c net.Conn = nc
	var cost CopyCost
	if cliConf != nil {
		tc := tls.Client(nc, cliConf)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			<-readDone
			return CopyCost{}, fmt.Errorf("machine: TLS handshake: %w", err)
		}
		st := tc.ConnectionState()
		cost.Cipher = tls.VersionName(st.Version) + " " + tls.CipherSuiteName(st.CipherSuite)
		c = tc
	}
	frame := make([]byte, 4+frameSize)
	binary.BigEndian.PutUint32(frame, uint32(frameSize))
	rand.Read(frame[4:])
	var stop atomic.Bool
	writeDone := make(chan error, 1)
	go func() { // the writer; stops between frames when told
		for !stop.Load() {
			if _, err := c.Write(frame); err != nil {
				writeDone <- err
				return
			}
		}
		writeDone <- nil
	}()

	self := os.Getpid()
	measured := func() (CopyCost, error) {
		if !wait(ctx, copyWarmup) {
			return CopyCost{}, ctx.Err()
		}
		u0, err := ReadProc(self)
		if err != nil {
			return CopyCost{}, err
		}
		b0, t0 := received.Load(), time.Now()
		if !wait(ctx, dur) {
			return CopyCost{}, ctx.Err()
		}
		u1, err := ReadProc(self)
		if err != nil {
			return CopyCost{}, err
		}
		return CopyCost{Bytes: received.Load() - b0, Elapsed: time.Since(t0), CPUSeconds: u1.Sub(u0).CPUSeconds}, nil
	}
	m, merr := measured()
	stop.Store(true)
	werr := <-writeDone
	c.Close() // the reader sees the end of the stream after the last frame
	rerr := <-readDone
	if err := errors.Join(merr, werr, rerr); err != nil {
		return CopyCost{}, fmt.Errorf("machine: loopback copy: %w", err)
	}
	m.Cipher = cost.Cipher
	return m, nil
}

// copyReader accepts one connection on l and reads length-prefixed frames
// until the end of the stream, counting their bytes into received.
func copyReader(l net.Listener, conf *tls.Config, frameSize int, received *atomic.Int64) error {
	c, err := l.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	if conf != nil {
		c = tls.Server(c, conf)
	}
	br := bufio.NewReaderSize(c, 64<<10)
	var hdr [4]byte
	buf := make([]byte, frameSize)
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		n := int(binary.BigEndian.Uint32(hdr[:]))
		if n > len(buf) {
			return fmt.Errorf("frame of %d bytes, expected at most %d", n, len(buf))
		}
		if _, err := io.ReadFull(br, buf[:n]); err != nil {
			return err
		}
		received.Add(int64(n))
	}
}

// copyTLSConfigs makes a CA and a certificate for 127.0.0.1 and the
// server's and client's configurations with crypto/tls's defaults.
func copyTLSConfigs() (srv, cli *tls.Config, err error) {
	ca, err := pki.Create("machine loopback copy", time.Hour)
	if err != nil {
		return nil, nil, err
	}
	leaf, err := ca.Issue("127.0.0.1", []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		return nil, nil, err
	}
	cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("machine: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return &tls.Config{Certificates: []tls.Certificate{cert}},
		&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}, nil
}

// wait waits for d or until ctx ends; it reports whether d passed.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
