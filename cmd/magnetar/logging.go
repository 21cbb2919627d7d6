package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// logFlags adds --log-level and --log-format to root: every subcommand's
// components log through slog's default logger, which they set before the
// subcommand runs (to stderr).
func logFlags(root *cobra.Command) {
	var level, format string
	root.PersistentFlags().StringVar(&level, "log-level", "info", "least severe log level written: debug, info, warn or error")
	root.PersistentFlags().StringVar(&format, "log-format", "text", "log line format: text (key=value) or json")
	prev := root.PersistentPreRunE
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		h, err := logHandler(os.Stderr, level, format)
		if err != nil {
			return err
		}
		slog.SetDefault(slog.New(h))
		if prev != nil {
			return prev(cmd, args)
		}
		return nil
	}
}

// logHandler is the slog handler writing to w at level in format.
func logHandler(w io.Writer, level, format string) (slog.Handler, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch strings.ToLower(format) {
	case "text":
		return slog.NewTextHandler(w, opts), nil
	case "json":
		return slog.NewJSONHandler(w, opts), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}
