// Package ociimage writes container images without a registry, a daemon or
// a Dockerfile: Write lays the files of a Spec (typically one static Go
// binary) into a single layer on an empty base, sets the entrypoint and
// environment, and writes the image as an archive that `ctr images import`
// and `docker load` read.
//
// Format. The archive is the tarball go-containerregistry's
// pkg/v1/tarball writes (the `docker save` layout): manifest.json naming
// the image's reference, its config blob (sha256:<hex>) and one
// gzip-compressed layer (<hex>.tar.gz). The layer is deterministic: every
// entry belongs to root:root and has a modification time of zero, parent
// directories are listed before their files, so the same Spec and the same
// file contents give the same image digest.
//
// An image built here has no libc, no shell and no dynamic loader, so an
// executable ELF file with a program interpreter (a dynamically linked
// binary: Go built with cgo) is refused; build Go programs with
// CGO_ENABLED=0.
//
// Callers: the Kubernetes test node (e2e/kubenode) for the magnetar image
// and the node's own sandbox (pause) image; the Kubernetes provisioner's
// image build. Functions are safe for concurrent use; each call reads its
// Spec's files and writes its own output.
package ociimage
