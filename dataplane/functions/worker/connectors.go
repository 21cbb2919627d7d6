package worker

import (
	"archive/zip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// Connector is a builtin connector: a NAR of the connectors directory
// and what its META-INF/services/pulsar-io.yaml declares.
type Connector struct {
	Name              string `json:"name" yaml:"name"`
	Description       string `json:"description,omitempty" yaml:"description"`
	SourceClass       string `json:"sourceClass,omitempty" yaml:"sourceClass"`
	SinkClass         string `json:"sinkClass,omitempty" yaml:"sinkClass"`
	SourceConfigClass string `json:"sourceConfigClass,omitempty" yaml:"sourceConfigClass"`
	SinkConfigClass   string `json:"sinkConfigClass,omitempty" yaml:"sinkConfigClass"`
	// Path is the NAR on this worker.
	Path string `json:"-" yaml:"-"`
}

const connectorDescriptor = "META-INF/services/pulsar-io.yaml"

// ScanConnectors reads every *.nar of dir ("" or absent: none).
func ScanConnectors(dir string) (map[string]Connector, error) {
	out := map[string]Connector{}
	if dir == "" {
		return out, nil
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*.nar"))
	if err != nil {
		return out, err
	}
	var errs []error
	for _, p := range paths {
		c, err := ReadConnector(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[c.Name] = c
	}
	return out, errors.Join(errs...)
}

// ReadConnector reads a NAR's connector descriptor.
func ReadConnector(path string) (Connector, error) {
	zr, err := zip.OpenReader(path)
	if err != nil {
		return Connector{}, fmt.Errorf("connector %s: %w", path, err)
	}
	defer zr.Close()
	f, err := zr.Open(connectorDescriptor)
	if err != nil {
		return Connector{}, fmt.Errorf("connector %s: no %s", path, connectorDescriptor)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return Connector{}, err
	}
	var c Connector
	if err := yaml.Unmarshal(b, &c); err != nil {
		return Connector{}, fmt.Errorf("connector %s: %s: %w", path, connectorDescriptor, err)
	}
	if c.Name == "" {
		return Connector{}, fmt.Errorf("connector %s: %s names no connector", path, connectorDescriptor)
	}
	c.Path, err = filepath.Abs(path)
	return c, err
}

// classInArchive reports whether a jar or NAR holds class cls (dotted
// name), at its top level or in a bundled jar (NARs keep their classes in
// META-INF/bundled-dependencies/*.jar).
func classInArchive(path, cls string) (bool, error) {
	zr, err := zip.OpenReader(path)
	if err != nil {
		return false, err
	}
	defer zr.Close()
	want := strings.ReplaceAll(cls, ".", "/") + ".class"
	for _, f := range zr.File {
		if f.Name == want {
			return true, nil
		}
	}
	for _, f := range zr.File {
		if !strings.HasSuffix(f.Name, ".jar") || f.UncompressedSize64 > 512<<20 {
			continue
		}
		ok, err := classInNested(f, want)
		if err == nil && ok {
			return true, nil
		}
	}
	return false, nil
}

func classInNested(f *zip.File, want string) (bool, error) {
	rc, err := f.Open()
	if err != nil {
		return false, err
	}
	defer rc.Close()
	tmp, err := os.CreateTemp("", "magnetar-nested-*.jar")
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	n, err := io.Copy(tmp, rc)
	if err != nil {
		return false, err
	}
	zr, err := zip.NewReader(tmp, n)
	if err != nil {
		return false, err
	}
	for _, e := range zr.File {
		if e.Name == want {
			return true, nil
		}
	}
	return false, nil
}
