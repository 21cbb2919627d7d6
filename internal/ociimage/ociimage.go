package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ErrDynamic is wrapped by Write's error for an executable that needs a
// dynamic loader, which an image built here does not have.
var ErrDynamic = errors.New("ociimage: dynamically linked executable")

// File is one regular file of the image.
type File struct {
	// Path is the file's absolute path inside the image, e.g. /magnetar.
	Path string
	// Source is the file on this machine whose contents are copied; Data is
	// used instead when Source is empty.
	Source string
	Data   []byte
	// Mode is the file's permission bits (default 0755 when Source is an
	// executable, else 0644).
	Mode os.FileMode
}

// Spec describes an image.
type Spec struct {
	// Ref names the image in the archive, e.g. magnetar.local/magnetar:dev;
	// `ctr images import` stores it under this name (a reference without a
	// registry host is qualified as docker.io/library/...).
	Ref string
	// Files are laid into the image's single layer, their parent
	// directories created 0755.
	Files []File
	// Dirs are extra empty directories (mode 0755; /tmp is always added
	// with mode 1777).
	Dirs []string
	// Entrypoint and Cmd are the image's defaults; a pod's command and args
	// override them.
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	// User is the default user (empty: root).
	User string
	// ExposedPorts are documentation for runtimes that read them, e.g.
	// "8080/tcp".
	ExposedPorts []string
	Labels       map[string]string
	// StopSignal is the signal a runtime sends to stop the entrypoint
	// (empty: SIGTERM).
	StopSignal string
	// OS and Architecture default to linux and this process's GOARCH.
	OS, Architecture string
}

// Write builds the image s describes and writes its archive to file,
// replacing it; it returns the image's digest (sha256:..., of its
// manifest).
func Write(file string, s Spec) (string, error) {
	ref, err := name.ParseReference(s.Ref)
	if err != nil {
		return "", fmt.Errorf("ociimage: image reference %q: %w", s.Ref, err)
	}
	img, err := Build(s)
	if err != nil {
		return "", err
	}
	digest, err := img.Digest()
	if err != nil {
		return "", fmt.Errorf("ociimage: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
	if err != nil {
		return "", fmt.Errorf("ociimage: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tarball.Write(ref, img, tmp); err != nil {
		tmp.Close()
		return "", fmt.Errorf("ociimage: writing %s: %w", file, err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("ociimage: %w", err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return "", fmt.Errorf("ociimage: %w", err)
	}
	return digest.String(), nil
}

// Build returns the image s describes, without writing it.
func Build(s Spec) (v1.Image, error) {
	layerTar, err := layer(s)
	if err != nil {
		return nil, err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithCompressionLevel(gzip.BestSpeed), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("ociimage: layer: %w", err)
	}
	osName, arch := s.OS, s.Architecture
	if osName == "" {
		osName = "linux"
	}
	if arch == "" {
		arch = runtime.GOARCH
	}
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{OS: osName, Architecture: arch})
	if err != nil {
		return nil, fmt.Errorf("ociimage: %w", err)
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:   l,
		History: v1.History{CreatedBy: "magnetar ociimage", Created: v1.Time{Time: time.Unix(0, 0).UTC()}},
	})
	if err != nil {
		return nil, fmt.Errorf("ociimage: %w", err)
	}
	cfg := v1.Config{
		Entrypoint: s.Entrypoint,
		Cmd:        s.Cmd,
		Env:        s.Env,
		WorkingDir: s.WorkingDir,
		User:       s.User,
		Labels:     s.Labels,
		StopSignal: s.StopSignal,
	}
	if len(s.ExposedPorts) > 0 {
		cfg.ExposedPorts = map[string]struct{}{}
		for _, p := range s.ExposedPorts {
			cfg.ExposedPorts[p] = struct{}{}
		}
	}
	img, err = mutate.Config(img, cfg)
	if err != nil {
		return nil, fmt.Errorf("ociimage: %w", err)
	}
	return img, nil
}

// entry is one tar entry of the layer, before it is written.
type entry struct {
	path string // clean, absolute
	dir  bool
	mode os.FileMode
	data []byte
}

// layer returns the uncompressed tar of s's files: directories first along
// each path, all entries sorted by path, owned by root, time zero.
func layer(s Spec) ([]byte, error) {
	entries := map[string]*entry{}
	addDir := func(p string, mode os.FileMode) error {
		for d := p; d != "/"; d = path.Dir(d) {
			if e, ok := entries[d]; ok {
				if !e.dir {
					return fmt.Errorf("ociimage: %s is both a file and a directory", d)
				}
				continue
			}
			m := os.FileMode(0o755)
			if d == p {
				m = mode
			}
			entries[d] = &entry{path: d, dir: true, mode: m}
		}
		return nil
	}
	if err := addDir("/tmp", os.ModeSticky|0o777); err != nil {
		return nil, err
	}
	for _, d := range s.Dirs {
		p, err := imagePath(d)
		if err != nil {
			return nil, err
		}
		if err := addDir(p, 0o755); err != nil {
			return nil, err
		}
	}
	for _, f := range s.Files {
		p, err := imagePath(f.Path)
		if err != nil {
			return nil, err
		}
		if _, ok := entries[p]; ok {
			return nil, fmt.Errorf("ociimage: %s listed twice", p)
		}
		data, mode := f.Data, f.Mode
		if f.Source != "" {
			st, err := os.Stat(f.Source)
			if err != nil {
				return nil, fmt.Errorf("ociimage: %w", err)
			}
			if !st.Mode().IsRegular() {
				return nil, fmt.Errorf("ociimage: %s is not a regular file", f.Source)
			}
			if data, err = os.ReadFile(f.Source); err != nil {
				return nil, fmt.Errorf("ociimage: %w", err)
			}
			if mode == 0 {
				mode = 0o644
				if st.Mode()&0o111 != 0 {
					mode = 0o755
				}
			}
		}
		if mode == 0 {
			mode = 0o644
		}
		if mode&0o111 != 0 {
			if err := checkStatic(f.Path, data); err != nil {
				return nil, err
			}
		}
		if err := addDir(path.Dir(p), 0o755); err != nil {
			return nil, err
		}
		entries[p] = &entry{path: p, mode: mode.Perm(), data: data}
	}

	paths := make([]string, 0, len(entries))
	for p := range entries {
		paths = append(paths, p)
	}
	// Sorting full paths puts every directory before what it holds.
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		e := entries[p]
		h := &tar.Header{
			Name:    strings.TrimPrefix(p, "/"),
			Mode:    int64(e.mode.Perm()),
			ModTime: time.Unix(0, 0),
			Format:  tar.FormatPAX,
		}
		if e.mode&os.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		if e.dir {
			h.Typeflag = tar.TypeDir
			h.Name += "/"
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("ociimage: %w", err)
		}
		if !e.dir {
			if _, err := tw.Write(e.data); err != nil {
				return nil, fmt.Errorf("ociimage: %w", err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("ociimage: %w", err)
	}
	return buf.Bytes(), nil
}

// imagePath checks that p is an absolute path inside the image and returns
// it cleaned.
func imagePath(p string) (string, error) {
	if !path.IsAbs(p) {
		return "", fmt.Errorf("ociimage: path %q inside the image is not absolute", p)
	}
	c := path.Clean(p)
	if c == "/" {
		return "", fmt.Errorf("ociimage: path %q names the root", p)
	}
	return c, nil
}

// checkStatic refuses an ELF executable that names a program interpreter.
// Other contents (scripts, non-ELF data) are left alone.
func checkStatic(name string, data []byte) error {
	if !bytes.HasPrefix(data, []byte(elf.ELFMAG)) {
		return nil
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("ociimage: %s: %w", name, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			interp, _ := io.ReadAll(p.Open())
			return fmt.Errorf("%w: %s needs %s (build Go with CGO_ENABLED=0)", ErrDynamic, name, strings.TrimRight(string(interp), "\x00"))
		}
	}
	return nil
}
