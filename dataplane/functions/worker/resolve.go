package worker

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"

	"github.com/magnetar-dev/magnetar/dataplane/functions/javainstance"
	"github.com/magnetar-dev/magnetar/dataplane/functions/pyinstance"
)

// ResolveRuntimes finds the instance runtimes a worker can offer: Pulsar's
// Java instance in javaHome (the directory javainstance's setup.sh
// writes), with its connectors directory, and
// our Python instance, extracted under dataDir when python3 is on PATH.
// (javaHome "" is javainstance.DefaultDir.)
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
	return pyinstance.Extract(filepath.Join(dataDir, "python"))
}

func resolveJava(home string) (*JavaRuntime, string, error) {
	h, err := javainstance.Locate(home)
	if err != nil {
		return nil, "", fmt.Errorf("java functions and connectors: %w", err)
	}
	if _, err := exec.LookPath("java"); err != nil {
		return nil, "", fmt.Errorf("java functions and connectors: java not on PATH")
	}
	return &JavaRuntime{InstanceJar: h.InstanceJar, Classpath: h.InstanceClasspath, Log4jConfig: h.Log4jConfig}, h.ConnectorsDir, nil
}
