package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/magnetar-dev/magnetar/dataplane/brokernode"
	"github.com/magnetar-dev/magnetar/dataplane/functions/worker"
)

// functionsFlags configure the function worker a broker or standalone
// runs (Pulsar's functionsWorkerEnabled, on by default here).
type functionsFlags struct {
	enabled        bool
	dir            string
	javaHome       string
	maxPackageSize int64
	tokenFile      string
}

func (ff *functionsFlags) register(f *pflag.FlagSet, dirDefault string) {
	f.BoolVar(&ff.enabled, "functions-worker", true, "run a Pulsar Functions worker in the broker (functions, sources and sinks on /admin/v3)")
	f.StringVar(&ff.dir, "functions-dir", dirDefault, "the function worker's package cache, instance logs and extracted connectors")
	f.StringVar(&ff.javaHome, "functions-java-home", "", "the Java instance's home written by dataplane/functions/javainstance/setup.sh (default $MAGNETAR_FUNCTIONS_HOME, else ~/.cache/magnetar/functions-4.2.4); without one Java functions and connectors are refused")
	f.Int64Var(&ff.maxPackageSize, "functions-max-package-size", 256<<20, "largest function or connector package accepted, in bytes")
	f.StringVar(&ff.tokenFile, "functions-instance-token-file", "", "a file holding the token function instances authenticate to the brokers with, when the cluster requires authentication, read at every authentication so it can be renewed (Pulsar's worker passes its own client credentials the same way)")
}

// instanceTokenFile checks --functions-instance-token-file ("" when not set):
// instances read it at every authentication, so it may be renewed.
func (ff *functionsFlags) instanceTokenFile() (string, error) {
	if ff.tokenFile == "" {
		return "", nil
	}
	abs, err := filepath.Abs(ff.tokenFile)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(abs); err != nil {
		return "", fmt.Errorf("--functions-instance-token-file: %w", err)
	}
	return abs, nil
}

// brokerConfig returns the broker's worker configuration (nil when off).
func (ff *functionsFlags) brokerConfig(brokerAddr string) (*brokernode.FunctionsConfig, error) {
	if !ff.enabled {
		return nil, nil
	}
	tokFile, err := ff.instanceTokenFile()
	if err != nil {
		return nil, err
	}
	dir := ff.dir
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "magnetar-functions", strings.NewReplacer(":", "_", "/", "_").Replace(brokerAddr))
	}
	rt, connectors, err := worker.ResolveRuntimes(dir, ff.javaHome)
	if err != nil {
		slog.Info("functions: runtimes not available on this broker (their functions are refused with a 400 that says why)", "missing", err)
	}
	return &brokernode.FunctionsConfig{DataDir: dir, Runtimes: rt, ConnectorsDir: connectors,
		MaxPackageSize: ff.maxPackageSize, InstanceTokenFile: tokFile}, nil
}
