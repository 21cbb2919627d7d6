package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/bench/internal/machine"
	"github.com/magnetar-dev/magnetar/dataplane/auth"
)

// TestSecureServer starts system magnetar-secure and checks that its
// adapter publishes and receives over pulsar+ssl:// with its token, and
// that the server really enforces what the variant is meant to cost: a
// client without a token is refused, and so is a token of a role without
// a grant. System magnetar-tls publishes and receives over pulsar+ssl://
// without a token.
func TestSecureServer(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, tlsOnly := range []bool{false, true} {
		m := &magnetarSystem{root: root, secure: &secureSetup{tlsOnly: tlsOnly}}
		t.Run(m.name(), func(t *testing.T) { testSecureServer(t, m) })
	}
}

func testSecureServer(t *testing.T, m *magnetarSystem) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	if err := m.prepare(ctx, dir); err != nil {
		t.Fatal(err)
	}
	srv, err := m.start(ctx, dir, durFsync)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()

	acked, received := make(chan error, 1), make(chan []byte, 1)
	a := srv.newAdapter()
	defer a.teardown(ctx)
	if err := a.setup(ctx, topicSpec{name: "secure", partitions: 2, durability: durFsync}, func(_ []byte, err error) { acked <- err }); err != nil {
		t.Fatal(err)
	}
	if err := a.subscribe(ctx, subscription{}, func(p []byte) { received <- p }); err != nil {
		t.Fatal(err)
	}
	if err := a.publish(ctx, newPayload(64, randomFiller(64), time.Now().UnixNano())); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []func() error{
		func() error { return <-acked },
		func() error { <-received; return nil },
	} {
		if err := ch(); err != nil {
			t.Fatal(err)
		}
	}

	ms := srv.(*magnetarServer)
	if !strings.HasPrefix(ms.clientOptions().URL, "pulsar+ssl://") {
		t.Fatalf("client URL %s", ms.clientOptions().URL)
	}
	if m.secure.tlsOnly {
		return
	}
	key, err := auth.ReadSecretKey(m.secure.secretFile)
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := auth.Mint(key, auth.MintOptions{Subject: "stranger"})
	if err != nil {
		t.Fatal(err)
	}
	for name, authn := range map[string]pulsar.Authentication{"no token": nil, "a role without a grant": pulsar.NewAuthenticationToken(stranger)} {
		o := ms.clientOptions()
		o.Authentication, o.OperationTimeout, o.ConnectionTimeout = authn, 5*time.Second, 5*time.Second
		c, err := pulsar.NewClient(o)
		if err != nil {
			t.Fatal(err)
		}
		p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/default/refused"})
		if err == nil {
			p.Close()
			t.Errorf("%s: a producer was created on the secure server", name)
		}
		c.Close()
	}
}

// TestSecurityFloor checks the W2 security section on made-up rounds: the
// TLS crypto is the TLS copy's CPU per GB minus the plain copy's, and the
// CPU-bound ceiling is plain text's CPU per GB over that plus the crypto.
func TestSecurityFloor(t *testing.T) {
	round := func(msgs, cpuServer, cpuGen float64) runResult {
		return runResult{acked: uint64(msgs), ackBytes: uint64(msgs * 1e3), elapsed: time.Second, hasUsage: true,
			usage: machine.ProcUsage{CPUSeconds: cpuServer}, generator: machine.ProcUsage{CPUSeconds: cpuGen}}
	}
	plain := cellKey{"W2", durFsync, 0, "magnetar", 0}
	tlsKey := cellKey{"W2", durFsync, 0, "magnetar-tls", 0}
	res := &results{cells: map[cellKey][]runResult{
		// 1 GB/s at 0.8 + 1.2 CPU-s: 2 s/GB.
		plain:  {round(1e6, 0.8, 1.2), round(1e6, 0.8, 1.2)},
		tlsKey: {round(0.6e6, 0.7, 1.1), round(0.7e6, 0.8, 1.2)},
	}, failed: map[string]error{}, unsupported: map[cellKey]bool{}}
	res.limits.copyPlain = machine.CopyCost{Bytes: 1e9, Elapsed: time.Second, CPUSeconds: 0.2}
	res.limits.copyTLS = machine.CopyCost{Bytes: 1e9, Elapsed: time.Second, CPUSeconds: 1.2}
	s := securityFloor(options{systems: []string{"magnetar", "magnetar-tls"}}, res)
	if len(s.t.Rows) != 2 {
		t.Fatalf("rows %v, want plain and TLS", s.t.Rows)
	}
	if !strings.Contains(s.title, "(1.00 s/GB") {
		t.Errorf("title %q: want the crypto's 1.00 s/GB", s.title)
	}
	got := s.t.Rows[1]
	if got[0] != "magnetar-tls" || got[3] != "0.67" {
		t.Errorf("TLS row %v: want the ceiling 2/(2+1) = 0.67", got)
	}
	if !strings.HasPrefix(got[2], "0.65 [0.60–0.70]") {
		t.Errorf("TLS row ratio %q, want 0.65 [0.60–0.70]", got[2])
	}
	if s.t.Rows[0][2] != "" || s.t.Rows[0][3] != "" {
		t.Errorf("plain row %v: no ratio or ceiling against itself", s.t.Rows[0])
	}
}
