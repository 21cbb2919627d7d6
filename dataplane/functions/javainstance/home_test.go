package javainstance

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeHome lays out a complete functions home in a temporary directory, with
// two fake jars on the instance class path, and returns its path.
func fakeHome(t *testing.T) string {
	t.Helper()
	repo := t.TempDir() // stands in for ~/.m2
	var jars []string
	for _, name := range []string{"a.jar", "b.jar"} {
		p := filepath.Join(repo, name)
		write(t, p, "jar")
		jars = append(jars, p)
	}
	nar := filepath.Join(repo, "pulsar-io-data-generator-4.0.8.jar")
	write(t, nar, "nar")

	dir := t.TempDir()
	write(t, filepath.Join(dir, InstanceJarName), "pathing jar")
	write(t, filepath.Join(dir, InstanceClasspathName), strings.Join(jars, ":")+"\n")
	write(t, filepath.Join(dir, Log4jConfigName), "<Configuration/>")
	must(t, os.MkdirAll(filepath.Join(dir, ConnectorsDirName), 0o755))
	must(t, os.Symlink(nar, filepath.Join(dir, ConnectorsDirName, "pulsar-io-data-generator-4.0.8.nar")))
	write(t, filepath.Join(dir, ExamplesDirName, "pulsar-functions-api-examples-4.0.8.jar"), "jar")
	write(t, filepath.Join(dir, VersionName), "pulsar-functions-runtime=4.2.4\n")
	return dir
}

func write(t *testing.T, p, content string) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(t, os.WriteFile(p, []byte(content), 0o644))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestLocateComplete(t *testing.T) {
	dir := fakeHome(t)
	h, err := Locate(dir)
	if err != nil {
		t.Fatalf("Locate: %v", err)
	}
	if h.Dir != dir {
		t.Errorf("Dir = %q, want %q", h.Dir, dir)
	}
	if want := filepath.Join(dir, InstanceJarName); h.InstanceJar != want {
		t.Errorf("InstanceJar = %q, want %q", h.InstanceJar, want)
	}
	if want := filepath.Join(dir, Log4jConfigName); h.Log4jConfig != want {
		t.Errorf("Log4jConfig = %q, want %q", h.Log4jConfig, want)
	}
	if want := filepath.Join(dir, ConnectorsDirName); h.ConnectorsDir != want {
		t.Errorf("ConnectorsDir = %q, want %q", h.ConnectorsDir, want)
	}
	if want := filepath.Join(dir, ExamplesDirName); h.ExamplesDir != want {
		t.Errorf("ExamplesDir = %q, want %q", h.ExamplesDir, want)
	}
	if parts := strings.Split(h.InstanceClasspath, ":"); len(parts) != 2 || !strings.HasSuffix(parts[1], "b.jar") {
		t.Errorf("InstanceClasspath = %q, want the two jars without a newline", h.InstanceClasspath)
	}
}

func TestLocateIncomplete(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   string
	}{
		{"no home", func(t *testing.T, dir string) { must(t, os.RemoveAll(dir)) }, "no such directory"},
		{"no VERSION", func(t *testing.T, dir string) { must(t, os.Remove(filepath.Join(dir, VersionName))) }, "no VERSION"},
		{"no pathing jar", func(t *testing.T, dir string) { must(t, os.Remove(filepath.Join(dir, InstanceJarName))) }, InstanceJarName},
		{"no log4j config", func(t *testing.T, dir string) { must(t, os.Remove(filepath.Join(dir, Log4jConfigName))) }, Log4jConfigName},
		{"no examples", func(t *testing.T, dir string) { must(t, os.RemoveAll(filepath.Join(dir, ExamplesDirName))) }, ExamplesDirName},
		{"dangling connector", func(t *testing.T, dir string) {
			nar, err := os.Readlink(filepath.Join(dir, ConnectorsDirName, "pulsar-io-data-generator-4.0.8.nar"))
			must(t, err)
			must(t, os.Remove(nar))
		}, "pulsar-io-data-generator-4.0.8.nar is missing"},
		{"empty class path", func(t *testing.T, dir string) { write(t, filepath.Join(dir, InstanceClasspathName), "\n") }, "one non-empty line"},
		{"relative class path entry", func(t *testing.T, dir string) { write(t, filepath.Join(dir, InstanceClasspathName), "lib/x.jar\n") }, "not an absolute path"},
		{"jar gone from the class path", func(t *testing.T, dir string) {
			raw, err := os.ReadFile(filepath.Join(dir, InstanceClasspathName))
			must(t, err)
			must(t, os.Remove(strings.Split(strings.TrimSpace(string(raw)), ":")[0]))
		}, "a.jar is missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := fakeHome(t)
			tc.damage(t, dir)
			_, err := Locate(dir)
			if err == nil {
				t.Fatal("Locate succeeded on a broken home")
			}
			if !errors.Is(err, ErrIncomplete) {
				t.Errorf("error %v does not wrap ErrIncomplete", err)
			}
			for _, want := range []string{tc.want, "setup.sh"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}

func TestDefaultDir(t *testing.T) {
	t.Setenv(EnvHome, "/opt/functions")
	if got := DefaultDir(); got != "/opt/functions" {
		t.Errorf("DefaultDir with $%s = %q", EnvHome, got)
	}
	t.Setenv(EnvHome, "")
	t.Setenv("HOME", "/home/u")
	if got, want := DefaultDir(), "/home/u/.cache/magnetar/functions-4.2.4"; got != want {
		t.Errorf("DefaultDir = %q, want %q", got, want)
	}
}

// TestLocateEmptyDirUsesDefault checks that Locate("") reads DefaultDir.
func TestLocateEmptyDirUsesDefault(t *testing.T) {
	dir := fakeHome(t)
	t.Setenv(EnvHome, dir)
	h, err := Locate("")
	if err != nil {
		t.Fatalf("Locate(\"\"): %v", err)
	}
	if h.Dir != dir {
		t.Errorf("Dir = %q, want %q", h.Dir, dir)
	}
}
