package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/spf13/cobra"
)

// pprofFlag adds --pprof-addr to root: every subcommand can then serve Go's
// profiles (/debug/pprof/) on a listener of their own, off by default and
// apart from the admin API, for profiling a running server under a
// benchmark's load. Bind it to loopback: profiles expose internals and
// cost CPU while taken.
func pprofFlag(root *cobra.Command) {
	var addr string
	root.PersistentFlags().StringVar(&addr, "pprof-addr", "", "serve Go profiles (/debug/pprof/) on this address (off when empty; keep it on loopback)")
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if addr == "" {
			return nil
		}
		srv, ln, err := servePprof(addr)
		if err != nil {
			return err
		}
		go func() { // lives as long as the process
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				fmt.Fprintln(os.Stderr, "magnetar: pprof server:", err)
			}
		}()
		fmt.Fprintf(os.Stderr, "magnetar: profiles on http://%s/debug/pprof/\n", ln.Addr())
		return nil
	}
}

// servePprof listens on addr and returns the profile server to run on it.
func servePprof(addr string) (*http.Server, net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, ln, nil
}
