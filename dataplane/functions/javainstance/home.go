package javainstance

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// EnvHome names the environment variable that overrides DefaultDir.
const EnvHome = "MAGNETAR_FUNCTIONS_HOME"

// Names inside a functions home (see the package documentation).
const (
	InstanceJarName       = "java-instance.jar"
	InstanceClasspathName = "instance-classpath.txt"
	Log4jConfigName       = "java_instance_log4j2.xml"
	ConnectorsDirName     = "connectors"
	ExamplesDirName       = "examples"
	VersionName           = "VERSION"
)

// SetupScript is the script that lays out a functions home, relative to the
// repository root; errors name it.
const SetupScript = "dataplane/functions/javainstance/setup.sh"

// ErrIncomplete is wrapped by Locate's errors when the home is missing,
// incomplete or points at files that are gone.
var ErrIncomplete = errors.New("javainstance: functions home incomplete")

// Home is a validated functions home. Every path is absolute.
type Home struct {
	// Dir is the home directory.
	Dir string
	// InstanceJar is the pathing jar passed to java -cp.
	InstanceJar string
	// InstanceClasspath is the content of instance-classpath.txt: the
	// colon-separated instance class path, the value of
	// -Dpulsar.functions.instance.classpath.
	InstanceClasspath string
	// Log4jConfig is the file passed as -Dlog4j.configurationFile.
	Log4jConfig string
	// ConnectorsDir holds the connector NARs.
	ConnectorsDir string
	// ExamplesDir holds pulsar-functions-api-examples.
	ExamplesDir string
}

// DefaultDir returns $MAGNETAR_FUNCTIONS_HOME if set, else
// $HOME/.cache/magnetar/functions-4.2.4 (setup.sh's default).
func DefaultDir() string {
	if d := os.Getenv(EnvHome); d != "" {
		return d
	}
	h, err := os.UserHomeDir()
	if err != nil || h == "" {
		h = "."
	}
	return filepath.Join(h, ".cache", "magnetar", "functions-4.2.4")
}

// Locate validates the functions home in dir (DefaultDir when dir is empty)
// and returns its paths. It checks that every file of the layout is there,
// that VERSION was written, and that every jar of the instance class path
// still exists. Errors wrap ErrIncomplete and say to run setup.sh.
func Locate(dir string) (*Home, error) {
	if dir == "" {
		dir = DefaultDir()
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("javainstance: functions home %q: %w", dir, err)
	}
	incomplete := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s; lay it out with: %s=%s %s",
			ErrIncomplete, abs, fmt.Sprintf(format, args...), EnvHome, abs, SetupScript)
	}

	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return nil, incomplete("no such directory")
	}
	if err := isFile(filepath.Join(abs, VersionName)); err != nil {
		return nil, incomplete("no %s (setup did not finish)", VersionName)
	}
	h := &Home{
		Dir:           abs,
		InstanceJar:   filepath.Join(abs, InstanceJarName),
		Log4jConfig:   filepath.Join(abs, Log4jConfigName),
		ConnectorsDir: filepath.Join(abs, ConnectorsDirName),
		ExamplesDir:   filepath.Join(abs, ExamplesDirName),
	}
	for _, f := range []string{h.InstanceJar, h.Log4jConfig} {
		if err := isFile(f); err != nil {
			return nil, incomplete("%s", err)
		}
	}
	for _, d := range []string{h.ConnectorsDir, h.ExamplesDir} {
		if err := isDirOfFiles(d); err != nil {
			return nil, incomplete("%s", err)
		}
	}

	raw, err := os.ReadFile(filepath.Join(abs, InstanceClasspathName))
	if err != nil {
		return nil, incomplete("no %s", InstanceClasspathName)
	}
	cp := strings.TrimSpace(string(raw))
	if cp == "" || strings.ContainsAny(cp, "\n\r") {
		return nil, incomplete("%s must hold one non-empty line", InstanceClasspathName)
	}
	for _, jar := range strings.Split(cp, string(os.PathListSeparator)) {
		if !filepath.IsAbs(jar) {
			return nil, incomplete("%s: %q is not an absolute path", InstanceClasspathName, jar)
		}
		if err := isFile(jar); err != nil {
			return nil, incomplete("instance class path: %s", err)
		}
	}
	h.InstanceClasspath = cp
	return h, nil
}

// isFile reports whether p (after symlinks) is a regular file.
func isFile(p string) error {
	fi, err := os.Stat(p)
	switch {
	case err != nil:
		return fmt.Errorf("%s is missing", p)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file", p)
	}
	return nil
}

// isDirOfFiles reports whether d is a directory whose entries (after
// symlinks) all exist: a dangling link means ~/.m2 lost the file.
func isDirOfFiles(d string) error {
	entries, err := os.ReadDir(d)
	if err != nil {
		return fmt.Errorf("%s is not a readable directory", d)
	}
	for _, e := range entries {
		if err := isFile(filepath.Join(d, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
