// Command opkit-image builds opkit's OCI image, without a container
// engine, from opkit binaries already built: `make image` builds them and
// runs it. What the image holds, and why its digest is reproducible, is
// internal/ociimage's doc; how to use it is docs/image.md.
//
//	opkit-image [flags] PLATFORM=BINARY...
//
// It is a command of its own, not an opkit subcommand, so that the image
// library stays out of the opkit binary.
package main

import (
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/opkit-dev/opkit/internal/ociimage"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("opkit-image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: opkit-image [flags] PLATFORM=BINARY...   e.g. linux/amd64=bin/image/linux_amd64/opkit")
		fs.PrintDefaults()
	}
	layoutDir := fs.String("layout", "bin/opkit-image", "the OCI image layout `directory` to write (replaced whole)")
	archive := fs.String("archive", "bin/opkit-image.tar", "the same layout as a tar `file` (skopeo's oci-archive); empty: none")
	refName := fs.String("tag", "latest", "the image's `name` in the layout's index.json (org.opencontainers.image.ref.name)")
	created := fs.String("created", os.Getenv("SOURCE_DATE_EPOCH"), "the time of every file, config and history entry, in Unix `seconds` (default $SOURCE_DATE_EPOCH, else 0)")
	caFile := fs.String("ca-certificates", "", "a PEM `file` for "+ociimage.CACertificatesPath+" (default: Mozilla's NSS roots pinned by go.sum)")
	source := fs.String("source", "", "the org.opencontainers.image.source label: the repository's `URL`")
	revision := fs.String("revision", "", "the org.opencontainers.image.revision label: the `commit`")
	version := fs.String("version", "", "the org.opencontainers.image.version label: opkit's `version`")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}

	opts := ociimage.Options{Source: *source, Revision: *revision, Version: *version}
	if *created != "" {
		sec, err := strconv.ParseInt(*created, 10, 64)
		if err != nil {
			fmt.Fprintf(stderr, "opkit-image: -created (or SOURCE_DATE_EPOCH) %q: want Unix seconds, e.g. git log -1 --format=%%ct\n", *created)
			return 2
		}
		opts.Created = time.Unix(sec, 0)
	}
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			fmt.Fprintf(stderr, "opkit-image: -ca-certificates: %v\n", err)
			return 1
		}
		opts.CACertificates = pem
	}
	for _, arg := range fs.Args() {
		platform, path, ok := strings.Cut(arg, "=")
		if !ok {
			fmt.Fprintf(stderr, "opkit-image: %q: want PLATFORM=BINARY, e.g. linux/amd64=bin/image/linux_amd64/opkit\n", arg)
			return 2
		}
		data, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintf(stderr, "opkit-image: %v\n", err)
			return 1
		}
		if err := ociimage.CheckStatic(platform, data); err != nil {
			fmt.Fprintf(stderr, "opkit-image: %s (for %s): %v\n", path, platform, err)
			return 1
		}
		opts.Binaries = append(opts.Binaries, ociimage.Binary{Platform: platform, Data: data})
	}

	idx, err := ociimage.Build(opts)
	if err != nil {
		fmt.Fprintf(stderr, "opkit-image: %v\n", err)
		return 1
	}
	if err := ociimage.WriteLayout(*layoutDir, idx, *refName); err != nil {
		fmt.Fprintf(stderr, "opkit-image: %s: %v\n", *layoutDir, err)
		return 1
	}
	if err := report(stdout, idx, *layoutDir); err != nil {
		fmt.Fprintf(stderr, "opkit-image: %v\n", err)
		return 1
	}
	if *archive != "" {
		sum, size, err := writeArchive(*archive, *layoutDir, opts.Created)
		if err != nil {
			fmt.Fprintf(stderr, "opkit-image: %s: %v\n", *archive, err)
			return 1
		}
		fmt.Fprintf(stdout, "%s: oci-archive, %s, sha256:%x\n", *archive, mb(size), sum)
	}
	return 0
}

// report prints the index's digest and, per platform, the image's digest
// and its compressed size (config and layers, as a registry stores it).
func report(w io.Writer, idx v1.ImageIndex, layoutDir string) error {
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: OCI layout, index %s\n", layoutDir, digest)
	manifest, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, desc := range manifest.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return err
		}
		m, err := img.Manifest()
		if err != nil {
			return err
		}
		size := m.Config.Size
		for _, l := range m.Layers {
			size += l.Size
		}
		fmt.Fprintf(w, "  %-12s %s  %s compressed\n", desc.Platform, desc.Digest, mb(size))
	}
	return nil
}

// writeArchive writes the layout's tar next to path and renames it into
// place, and returns its SHA-256 and size.
func writeArchive(path, layoutDir string, mtime time.Time) (sum []byte, size int64, err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return nil, 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := sha256.New()
	if err := ociimage.WriteArchive(io.MultiWriter(f, h), layoutDir, mtime); err != nil {
		return nil, 0, err
	}
	if size, err = f.Seek(0, io.SeekCurrent); err != nil {
		return nil, 0, err
	}
	if err := f.Close(); err != nil {
		return nil, 0, err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return nil, 0, err
	}
	return h.Sum(nil), size, os.Rename(f.Name(), path)
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
