package worker

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// ResolveRuntimes finds the instance runtimes a worker can offer: Pulsar's
// Java instance in javaHome (the directory javainstance's setup.sh
// writes; JavaHomeFromEnv when empty), with its connectors directory, and
// our Python instance, extracted under dataDir when python3 is on PATH.
// What is missing is reported in the error; the runtimes found are
// returned either way.
func ResolveRuntimes(dataDir, javaHome string) (Runtimes, string, error) {
	var rt Runtimes
	var errs []error
	connectors := ""
	if jr, cdir, err := resolveJava(javaHome); err != nil {
		errs = append(errs, err)
	} else {
		rt.Java, connectors = jr, cdir
	}
	if main, err := resolvePython(dataDir); err != nil {
		errs = append(errs, err)
	} else {
		rt.PythonMain = main
	}
	return rt, connectors, errors.Join(errs...)
}

func resolvePython(dataDir string) (string, error) {
	if _, err := exec.LookPath("python3"); err != nil {
		return "", fmt.Errorf("python functions: python3 not on PATH")
	}
	return extractPython(filepath.Join(dataDir, "python"))
}

// extractPython is set by the pyinstance wiring (pyinstance.Extract).
var extractPython = func(string) (string, error) {
	return "", errors.New("python functions: no Python instance in this build")
}

var _ = os.Getenv

func resolveJava(home string) (*JavaRuntime, string, error) {
	h, err := locateJava(home)
	if err != nil {
		return nil, "", fmt.Errorf("java functions and connectors: %w", err)
	}
	if _, err := exec.LookPath("java"); err != nil {
		return nil, "", fmt.Errorf("java functions and connectors: java not on PATH")
	}
	return &JavaRuntime{InstanceJar: h.InstanceJar, Classpath: h.Classpath, Log4jConfig: h.Log4jConfig}, h.ConnectorsDir, nil
}

// javaHome is what locateJava finds.
type javaHome struct {
	InstanceJar, Classpath, Log4jConfig, ConnectorsDir string
}

// locateJava is set by the javainstance wiring.
var locateJava = func(string) (*javaHome, error) {
	return nil, errors.New("no Java instance in this build")
}
