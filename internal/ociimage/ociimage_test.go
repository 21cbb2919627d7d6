package ociimage

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestWriteReadBack(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "tool")
	if err := os.WriteFile(src, []byte("#!/tool\nnot an ELF file\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	spec := Spec{
		Ref: "magnetar.local/test:1",
		Files: []File{
			{Path: "/usr/bin/tool", Source: src},
			{Path: "/etc/tool.conf", Data: []byte("a=1\n")},
		},
		Dirs:         []string{"/data"},
		Entrypoint:   []string{"/usr/bin/tool"},
		Cmd:          []string{"serve"},
		Env:          []string{"A=1"},
		WorkingDir:   "/data",
		ExposedPorts: []string{"8080/tcp"},
		StopSignal:   "SIGINT",
	}
	file := filepath.Join(dir, "img.tar")
	digest, err := Write(file, spec)
	if err != nil {
		t.Fatal(err)
	}

	tag, err := name.NewTag(spec.Ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(file, &tag)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := img.Digest(); err != nil || d.String() != digest {
		t.Fatalf("digest read back %v (%v), Write returned %s", d, err, digest)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}
	c := cf.Config
	if !reflect.DeepEqual(c.Entrypoint, spec.Entrypoint) || !reflect.DeepEqual(c.Cmd, spec.Cmd) ||
		!reflect.DeepEqual(c.Env, spec.Env) || c.WorkingDir != "/data" || c.StopSignal != "SIGINT" {
		t.Errorf("config %+v", c)
	}
	if _, ok := c.ExposedPorts["8080/tcp"]; !ok {
		t.Errorf("exposed ports %v", c.ExposedPorts)
	}

	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	type got struct {
		mode int64
		dir  bool
		data string
	}
	var order []string
	entries := map[string]got{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		if h.Uid != 0 || h.Gid != 0 || h.ModTime.Unix() != 0 {
			t.Errorf("%s: owner %d:%d, time %v", h.Name, h.Uid, h.Gid, h.ModTime)
		}
		order = append(order, h.Name)
		entries[h.Name] = got{h.Mode, h.Typeflag == tar.TypeDir, string(b)}
	}
	want := []string{"data/", "etc/", "etc/tool.conf", "tmp/", "usr/", "usr/bin/", "usr/bin/tool"}
	if !reflect.DeepEqual(order, want) {
		t.Fatalf("layer entries %v, want %v", order, want)
	}
	if e := entries["usr/bin/tool"]; e.mode != 0o755 || e.data != "#!/tool\nnot an ELF file\n" {
		t.Errorf("tool: %+v", e)
	}
	if e := entries["etc/tool.conf"]; e.mode != 0o644 || e.data != "a=1\n" {
		t.Errorf("tool.conf: %+v", e)
	}
	if e := entries["tmp/"]; !e.dir || e.mode != 0o1777 {
		t.Errorf("tmp: %+v", e)
	}

	// The same spec gives the same image.
	digest2, err := Write(filepath.Join(dir, "img2.tar"), spec)
	if err != nil || digest2 != digest {
		t.Errorf("second build %s (%v), first %s", digest2, err, digest)
	}
}

func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		spec Spec
	}{
		{"bad reference", Spec{Ref: "UPPER/Case:x"}},
		{"relative path", Spec{Ref: "a/b:1", Files: []File{{Path: "bin/x", Data: []byte("x")}}}},
		{"twice", Spec{Ref: "a/b:1", Files: []File{{Path: "/x", Data: []byte("x")}, {Path: "/x", Data: []byte("y")}}}},
		{"file under file", Spec{Ref: "a/b:1", Files: []File{{Path: "/x", Data: []byte("x")}, {Path: "/x/y", Data: []byte("y")}}}},
		{"missing source", Spec{Ref: "a/b:1", Files: []File{{Path: "/x", Source: filepath.Join(dir, "none")}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Write(filepath.Join(dir, "out.tar"), tc.spec); err == nil {
				t.Fatal("Write succeeded")
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "out.tar")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused build left %v", err)
	}
}

// TestDynamicRefused: a dynamically linked executable (a Debian binary)
// cannot run in an image without a loader.
func TestDynamicRefused(t *testing.T) {
	const dyn = "/bin/true"
	if _, err := os.Stat(dyn); err != nil {
		t.Skipf("no %s: %v", dyn, err)
	}
	_, err := Write(filepath.Join(t.TempDir(), "img.tar"), Spec{Ref: "a/b:1", Files: []File{{Path: "/true", Source: dyn}}})
	if !errors.Is(err, ErrDynamic) {
		t.Fatalf("Write: %v, want ErrDynamic", err)
	}
	// As data (not executable) it is just a file.
	if _, err := Write(filepath.Join(t.TempDir(), "img.tar"), Spec{Ref: "a/b:1", Files: []File{{Path: "/true", Source: dyn, Mode: 0o644}}}); err != nil {
		t.Fatal(err)
	}
}
