package pulsarpeer

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Version is the Apache Pulsar version the home holds.
const Version = "4.2.4"

// EnvHome names the environment variable that overrides DefaultHomeDir.
const EnvHome = "MAGNETAR_PULSAR_HOME"

// MainClass is the standalone's entry point, in pulsar-broker-4.2.4.jar.
const MainClass = "org.apache.pulsar.PulsarStandaloneStarter"

//go:embed setup.sh
var setupScript []byte

//go:embed pom.xml
var setupPom []byte

// ErrNoHome is wrapped when a Pulsar home is missing or incomplete.
var ErrNoHome = errors.New("pulsarpeer: no Pulsar home")

// Home is a laid-out Pulsar home (setup.sh).
type Home struct {
	Dir string // the home
	Lib string // Dir/lib: every runtime jar
}

// DefaultHomeDir returns $MAGNETAR_PULSAR_HOME if set, else
// $HOME/.cache/magnetar/pulsar-4.2.4 (setup.sh's default).
func DefaultHomeDir() string {
	if d := os.Getenv(EnvHome); d != "" {
		return d
	}
	h, err := os.UserHomeDir()
	if err != nil || h == "" {
		h = "."
	}
	return filepath.Join(h, ".cache", "magnetar", "pulsar-"+Version)
}

// Locate checks the home in dir (DefaultHomeDir when empty) without
// running Maven: VERSION written and lib/ holding as many jars as it says.
func Locate(dir string) (Home, error) {
	if dir == "" {
		dir = DefaultHomeDir()
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Home{}, fmt.Errorf("%w: %v", ErrNoHome, err)
	}
	h := Home{Dir: abs, Lib: filepath.Join(abs, "lib")}
	b, err := os.ReadFile(filepath.Join(abs, "VERSION"))
	if err != nil {
		return Home{}, fmt.Errorf("%w: %s has no VERSION (run bench/internal/pulsarpeer/setup.sh): %v", ErrNoHome, abs, err)
	}
	want := -1
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "jars="); ok {
			want, _ = strconv.Atoi(v)
		}
	}
	jars, _ := filepath.Glob(filepath.Join(h.Lib, "*.jar"))
	if want <= 0 || len(jars) != want {
		return Home{}, fmt.Errorf("%w: %s: lib/ holds %d jars, VERSION says %d", ErrNoHome, abs, len(jars), want)
	}
	if _, err := os.Stat(filepath.Join(h.Lib, "pulsar-broker-"+Version+".jar")); err != nil {
		return Home{}, fmt.Errorf("%w: %s: %v", ErrNoHome, abs, err)
	}
	return h, nil
}

// Setup lays out the home in dir (DefaultHomeDir when empty) with the
// embedded setup.sh and pom.xml, which it writes to a temporary directory
// first, so it works from any working directory. It is fast when the home
// is already there (no Maven run). Maven's progress and errors go to
// progress.
func Setup(ctx context.Context, dir string, progress io.Writer) (Home, error) {
	if dir == "" {
		dir = DefaultHomeDir()
	}
	tmp, err := os.MkdirTemp("", "pulsarpeer-setup-")
	if err != nil {
		return Home{}, fmt.Errorf("pulsarpeer: %w", err)
	}
	defer os.RemoveAll(tmp)
	script := filepath.Join(tmp, "setup.sh")
	if err := os.WriteFile(script, setupScript, 0o755); err != nil {
		return Home{}, fmt.Errorf("pulsarpeer: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "pom.xml"), setupPom, 0o644); err != nil {
		return Home{}, fmt.Errorf("pulsarpeer: %w", err)
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script, dir)
	cmd.Stdout, cmd.Stderr = &out, progress
	if err := cmd.Run(); err != nil {
		return Home{}, fmt.Errorf("pulsarpeer: setup.sh: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return Locate(lines[len(lines)-1])
}
