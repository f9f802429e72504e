// Package ociimage builds opkit's container image without a container
// engine: an OCI image index with one image per platform, written as an
// OCI image layout directory and as a tar of that directory (what skopeo
// calls an oci-archive). cmd/opkit-image is its command line and
// `make image` its one caller.
//
// # Contents
//
// Every image has two layers and nothing else, no shell and no package
// manager:
//
//   - the base, the same bytes for every platform: /etc/passwd and
//     /etc/group naming root and nonroot (UID and GID 65532, as in the
//     distroless images), the CA bundle at
//     /etc/ssl/certs/ca-certificates.crt, the user's home /home/nonroot
//     (owned by it, mode 0700; opkit's default SQLite archive lives under
//     it) and /tmp (mode 1777);
//   - the binary: /opkit, root-owned, mode 0755, the bytes given.
//
// The config runs /opkit as 65532:65532 in /home/nonroot, with HOME, PATH
// and SSL_CERT_FILE set and the org.opencontainers.image source, revision
// and version labels given. Each label is also an annotation of the index.
//
// # Guarantees
//
// The same Options give the same digests and a byte-identical archive:
// tar entries are sorted, with fixed modes, numeric owners, no user or
// group names and Options.Created as every time; gzip is written by Go's
// compress/gzip at a fixed level with an empty header; JSON is written
// with sorted keys. The CA bundle is pinned by go.sum (see NSSRoots).
//
// # Assumptions
//
// Build does not compile opkit: reproducing a digest also takes the same
// binaries, i.e. the same commit built by the same Go toolchain with the
// same flags (the Makefile's image target). CheckStatic says whether a
// binary can run here at all: the image has no C library, so it must be
// statically linked.
//
// # Caveats
//
// With no shell and no other program, an exec handler (a process in
// opkit's own container) needs an image built FROM this one that adds its
// program; the user, the CA bundle and the environment are inherited. Job
// handlers (their own image) and http handlers need nothing more.
package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed facts, which its tests and docs/image.md state too.
const (
	// UID is the user the image runs as.
	UID = 65532
	// GID is that user's group.
	GID = 65532
	// UserName is that user's name in /etc/passwd and /etc/group.
	UserName = "nonroot"
	// Home is that user's home and the image's working directory.
	Home = "/home/nonroot"
	// BinaryPath is where opkit is, and the entrypoint.
	BinaryPath = "/opkit"
	// CACertificatesPath is the CA bundle, where Go, OpenSSL and most
	// tools on Debian-like systems look first; SSL_CERT_FILE names it too.
	CACertificatesPath = "/etc/ssl/certs/ca-certificates.crt"
)

// OCI label (and annotation) keys the image carries.
const (
	LabelSource   = "org.opencontainers.image.source"
	LabelRevision = "org.opencontainers.image.revision"
	LabelVersion  = "org.opencontainers.image.version"
)

// Binary is opkit built for one platform.
type Binary struct {
	// Platform is "OS/ARCH" or "OS/ARCH/VARIANT", e.g. "linux/amd64" or
	// "linux/arm64". Required.
	Platform string
	// Data is the statically linked opkit binary. Required.
	Data []byte
}

// Options says what goes into the image.
type Options struct {
	// Binaries are the platforms to build, one image each, listed in the
	// index sorted by platform. Required: at least one, each platform once.
	Binaries []Binary
	// Created is the time of every file, of the config and of the
	// history, truncated to the second. Defaults to the Unix epoch; set
	// it to the commit's time (SOURCE_DATE_EPOCH).
	Created time.Time
	// CACertificates is the PEM bundle at CACertificatesPath. Defaults to
	// NSSRoots().
	CACertificates []byte
	// Source, Revision and Version are the org.opencontainers.image
	// labels: the repository's URL, the commit and opkit's version.
	// Defaults to none: an empty one is left out.
	Source, Revision, Version string
}

// Build builds the image index. It reads nothing but opts, so the same
// opts give the same digest.
func Build(opts Options) (v1.ImageIndex, error) {
	if len(opts.Binaries) == 0 {
		return nil, errors.New("ociimage: no binary given: build opkit for at least one platform (Options.Binaries)")
	}
	created := stamp(opts.Created)
	certs := opts.CACertificates
	if certs == nil {
		certs = NSSRoots()
	}
	base, err := newLayer(baseFiles(certs), created)
	if err != nil {
		return nil, fmt.Errorf("ociimage: base layer: %w", err)
	}

	binaries := slices.Clone(opts.Binaries)
	slices.SortFunc(binaries, func(a, b Binary) int { return strings.Compare(a.Platform, b.Platform) })
	labels := labels(opts)
	var idx v1.ImageIndex = empty.Index // an OCI image index
	for i, b := range binaries {
		if i > 0 && b.Platform == binaries[i-1].Platform {
			return nil, fmt.Errorf("ociimage: platform %q given twice: give one binary per platform", b.Platform)
		}
		platform, err := v1.ParsePlatform(b.Platform)
		if err != nil || platform.OS == "" || platform.Architecture == "" {
			return nil, fmt.Errorf("ociimage: platform %q: want OS/ARCH[/VARIANT], e.g. linux/amd64", b.Platform)
		}
		if len(b.Data) == 0 {
			return nil, fmt.Errorf("ociimage: platform %s: the binary is empty", b.Platform)
		}
		img, err := newImage(*platform, base, b.Data, created, labels)
		if err != nil {
			return nil, fmt.Errorf("ociimage: platform %s: %w", b.Platform, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        plainImage{img},
			Descriptor: v1.Descriptor{Platform: platform},
		})
	}
	if len(labels) > 0 {
		idx = mutate.Annotations(idx, labels).(v1.ImageIndex)
	}
	return idx, nil
}

// plainImage is listed in the index without an artifactType, which
// go-containerregistry would set to the config's media type: OCI 1.1 gives
// it to artifacts, not images, and tools older than OCI 1.1 (Debian 12's
// skopeo) drop it as they copy the index, which changes its digest.
type plainImage struct{ v1.Image }

// ArtifactType is none.
func (plainImage) ArtifactType() (string, error) { return "", nil }

// stamp is t as every time in the image: UTC, whole seconds, and the Unix
// epoch for the zero time.
func stamp(t time.Time) time.Time {
	if t.IsZero() {
		return time.Unix(0, 0).UTC()
	}
	return t.UTC().Truncate(time.Second)
}

func labels(opts Options) map[string]string {
	l := map[string]string{}
	for k, v := range map[string]string{
		LabelSource:   opts.Source,
		LabelRevision: opts.Revision,
		LabelVersion:  opts.Version,
	} {
		if v != "" {
			l[k] = v
		}
	}
	return l
}

func newImage(platform v1.Platform, base v1.Layer, binary []byte, created time.Time, labels map[string]string) (v1.Image, error) {
	bin, err := newLayer([]file{{name: strings.TrimPrefix(BinaryPath, "/"), mode: 0o755, data: binary}}, created)
	if err != nil {
		return nil, fmt.Errorf("binary layer: %w", err)
	}
	user := strconv.Itoa(UID) + ":" + strconv.Itoa(GID)
	cfg := &v1.ConfigFile{
		Architecture: platform.Architecture,
		OS:           platform.OS,
		Variant:      platform.Variant,
		Created:      v1.Time{Time: created},
		Config: v1.Config{
			User:       user,
			Entrypoint: []string{BinaryPath},
			WorkingDir: Home,
			Env: []string{
				"HOME=" + Home,
				"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				"SSL_CERT_FILE=" + CACertificatesPath,
			},
			Labels: labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	history := func(what string) v1.History {
		return v1.History{Created: v1.Time{Time: created}, CreatedBy: "opkit-image: " + what, Comment: "built by internal/ociimage"}
	}
	return mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer,
			History: history("/etc/passwd, /etc/group, " + CACertificatesPath + ", " + Home + ", /tmp")},
		mutate.Addendum{Layer: bin, MediaType: types.OCILayer,
			History: history(BinaryPath)},
	)
}

// file is one entry of a layer.
type file struct {
	name     string // relative, no leading or trailing slash
	mode     int64  // permission bits, and the sticky bit
	uid, gid int
	dir      bool
	data     []byte
}

func baseFiles(certs []byte) []file {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:%s:/sbin/nologin\n",
		UserName, UID, GID, UserName, Home)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", UserName, GID)
	rel := func(p string) string { return strings.TrimPrefix(p, "/") }
	return []file{
		{name: "etc", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/ssl", mode: 0o755, dir: true},
		{name: "etc/ssl/certs", mode: 0o755, dir: true},
		{name: rel(CACertificatesPath), mode: 0o644, data: certs},
		{name: "home", mode: 0o755, dir: true},
		{name: rel(Home), mode: 0o700, uid: UID, gid: GID, dir: true},
		{name: "tmp", mode: 0o1777, dir: true},
	}
}

// newLayer writes files as a gzipped tar, sorted by name, every entry at
// mtime with numeric owners only.
func newLayer(files []file, mtime time.Time) (v1.Layer, error) {
	files = slices.Clone(files)
	slices.SortFunc(files, func(a, b file) int { return strings.Compare(a.name, b.name) })
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	for _, f := range files {
		h := &tar.Header{
			Name:    f.name,
			Mode:    f.mode,
			Uid:     f.uid,
			Gid:     f.gid,
			ModTime: mtime,
			Format:  tar.FormatUSTAR,
		}
		if f.dir {
			h.Typeflag, h.Name = tar.TypeDir, f.name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	blob := gz.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(blob)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
