package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

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
