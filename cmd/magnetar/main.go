// Command magnetar is the one Magnetar binary. Each subcommand lives in its
// own file, parses flags into a component's Config, starts it with New, waits
// for a signal and shuts it down; no logic lives here.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "magnetar:", err)
		os.Exit(1)
	}
}

// newRootCommand builds the magnetar command with every subcommand.
func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "magnetar",
		Short:         "Magnetar: Apache Pulsar rebuilt in Go, run as a multi-region service",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pprofFlag(root)
	logFlags(root)
	root.Version = versionString() // --version; see version.go
	root.SetVersionTemplate("{{.Version}}\n")
	for _, add := range subcommands {
		root.AddCommand(add())
	}
	plainBoolFlags(root)
	return root
}

// subcommands is filled by the init functions of the subcommand files.
var subcommands []func() *cobra.Command

// signalContext is canceled on SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
