package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/magnetar-dev/magnetar/bench/internal/proc"
	"github.com/magnetar-dev/magnetar/bench/internal/pulsarpeer"
	"github.com/magnetar-dev/magnetar/dataplane/functions/javainstance"
	"github.com/magnetar-dev/magnetar/internal/freeport"
)

// server is one running standalone with its functions worker.
type server struct {
	brokerURL, webURL string
	pid               int           // the broker (and worker) process; instances are its descendants
	readyAfter        time.Duration // start to health and functions API answering
	stop              func() error
	logTail           func() string
}

// system starts fresh standalones of one kind.
type system interface {
	name() string
	// start runs a standalone with its data in dir (fresh) and waits
	// until its functions API answers.
	start(ctx context.Context, dir string) (*server, error)
}

// magnetarSystem is `magnetar standalone` built from this repository:
// broker, bookie, metadata store and functions worker in one process (the
// worker is on by default), the Java instance from the functions home.
type magnetarSystem struct {
	bin      string
	javaHome string // the functions home (--functions-java-home)
}

func (m *magnetarSystem) name() string { return "magnetar" }

func (m *magnetarSystem) start(ctx context.Context, dir string) (*server, error) {
	addrs, err := freeport.Addrs(3)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	p, err := proc.Start(dir, "magnetar.log", m.bin, "standalone", "--data-dir", filepath.Join(dir, "data"),
		"--broker-addr", addrs[0], "--http-addr", addrs[1], "--bookie-addr", addrs[2],
		"--functions-java-home", m.javaHome)
	if err != nil {
		return nil, err
	}
	web := "http://" + addrs[1]
	for _, path := range []string{"/admin/v2/brokers/health", "/admin/v3/functions/public/default"} {
		if err := p.WaitReady(ctx, func(ctx context.Context) error { return httpGet(ctx, web+path) }); err != nil {
			p.Stop()
			return nil, err
		}
	}
	return &server{brokerURL: "pulsar://" + addrs[0], webURL: web, pid: p.Pid(), readyAfter: time.Since(t0),
		stop: p.Stop, logTail: p.LogTail}, nil
}

// pulsarSystem is the real Apache Pulsar 4.2.4 standalone with its
// in-broker functions worker (pulsarpeer): process runtime, the same Java
// instance (pathing jar, instance class path, log4j2 configuration) as
// Magnetar's worker.
type pulsarSystem struct {
	home     pulsarpeer.Home
	fnHome   *javainstance.Home
	heapArgs []string // nil: pulsarpeer.DefaultHeapArgs
	// jvmArgs is what the last standalone ran with (for the report).
	jvmArgs string
}

func (p *pulsarSystem) name() string { return "pulsar" }

func (p *pulsarSystem) start(ctx context.Context, dir string) (*server, error) {
	s, err := pulsarpeer.Start(ctx, pulsarpeer.Config{
		Home:     p.home,
		Dir:      dir,
		HeapArgs: p.heapArgs,
		Functions: &pulsarpeer.Functions{
			JavaInstanceJar:     p.fnHome.InstanceJar,
			InstanceClasspath:   p.fnHome.InstanceClasspath,
			InstanceLog4jConfig: p.fnHome.Log4jConfig,
		},
	})
	if err != nil {
		return nil, err
	}
	p.jvmArgs = s.HeapFlags()
	return &server{brokerURL: s.BrokerURL, webURL: s.WebURL, pid: s.Pid(), readyAfter: s.ReadyAfter,
		stop: s.Stop, logTail: func() string { return s.LogTail(15) }}, nil
}

func httpGet(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// shortErr keeps the first line of an error (server log tails are long).
func shortErr(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
