package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestLogHandler(t *testing.T) {
	var buf bytes.Buffer
	h, err := logHandler(&buf, "warn", "json")
	if err != nil {
		t.Fatal(err)
	}
	l := slog.New(h)
	l.Info("dropped")
	l.Warn("kept", "n", 1)
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil || m["msg"] != "kept" || m["n"] != 1.0 || strings.Contains(buf.String(), "dropped") {
		t.Fatalf("json at warn: %q (%v)", buf.String(), err)
	}
	buf.Reset()
	if h, err = logHandler(&buf, "DEBUG", "text"); err != nil {
		t.Fatal(err)
	}
	slog.New(h).Debug("shown", "k", "v")
	if !strings.Contains(buf.String(), "level=DEBUG msg=shown k=v") {
		t.Fatalf("text at debug: %q", buf.String())
	}
	if _, err := logHandler(&buf, "loud", "text"); err == nil || !strings.Contains(err.Error(), "--log-level") {
		t.Fatalf("bad level: %v", err)
	}
	if _, err := logHandler(&buf, "info", "xml"); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Fatalf("bad format: %v", err)
	}
}

// The flags are on the root command, so every subcommand has them, and set
// slog's default logger before the subcommand runs.
func TestLogFlagsSetDefault(t *testing.T) {
	defer slog.SetDefault(slog.Default())
	root := &cobra.Command{Use: "magnetar", SilenceUsage: true, SilenceErrors: true}
	logFlags(root)
	var debug bool
	var handler slog.Handler
	root.AddCommand(&cobra.Command{Use: "sub", RunE: func(*cobra.Command, []string) error {
		debug = slog.Default().Enabled(context.Background(), slog.LevelDebug)
		handler = slog.Default().Handler()
		return nil
	}})
	root.SetArgs([]string{"sub", "--log-level", "debug", "--log-format", "json"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if _, isJSON := handler.(*slog.JSONHandler); !debug || !isJSON {
		t.Fatalf("default logger: debug %v, handler %T", debug, handler)
	}
	root.SetArgs([]string{"sub", "--log-format", "yaml"})
	if err := root.Execute(); err == nil {
		t.Fatal("--log-format yaml accepted")
	}
}
